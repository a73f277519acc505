// A CoreDNS build with only the plugins the test bed's real node needs: cluster DNS for
// cluster.local (and reverse lookups) from the API server, no forwarding (the machine has no
// upstream resolver worth asking), NXDOMAIN for every other name via `template`.
//
// This is CoreDNS's documented way to choose a plugin set at compile time: import the plugin
// packages (each registers itself with caddy) and set dnsserver.Directives, the order in
// which a query passes through the plugins of a server block (the order of upstream's
// plugin.cfg, restricted to the plugins below).
//
// It is its own module (orbitmq.local/k8s-testbed-coredns), so CoreDNS's dependencies never
// change the versions the Kubernetes wrapper module one directory up builds with.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

var directives = []string{
	"bind",
	"ready",
	"health",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"template",
	"kubernetes",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
