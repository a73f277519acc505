// Command pause is the sandbox ("pause") container of the test bed's real node.
//
// Every pod's sandbox runs one process that holds the pod's namespaces open and, as PID 1
// of a shared PID namespace, reaps orphaned children. Upstream's pause is a C program that
// needs a C toolchain; this does the same job in a static Go binary built with the other
// tools from the wrapper module, so the sandbox image is made locally without a registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0) // the runtime stops a sandbox with SIGTERM (SIGKILL after a grace period)
		}
		for { // reap every exited child; -1: any child, WNOHANG: never block
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
