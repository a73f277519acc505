"""The test bed's real node: containerd, runc, bridge CNI, kubelet, kube-proxy and CoreDNS.

`scripts/k8s-testbed up --real-node` (or ORBITMQ_K8S_REAL_NODE=1) adds this node beside the
kwok node, so pods run as real containers.  Everything that can live in the state directory
does (containerd's root, state and socket, runc's state, kubelet's root and pod logs, CNI
config and IPAM data, the Corefile), so a system containerd is never touched.  What cannot -
a bridge, the netns mounts containerd makes under /run/netns, iptables chains, sysctls, a
cgroup subtree, /var/log/containers links - is named after the test bed, snapshotted before
`up` changes it and undone by `teardown`, which `down` runs first and the next `up` runs for
a crashed run.

Cluster DNS: CoreDNS (built by `scripts/k8s-testbed build` from k8s-testbed.d/coredns/) runs
as a host process serving cluster.local on the node IP (the bridge gateway), port 53, and
kubelet gives pods that address as their nameserver (clusterDNS) with the usual search list,
so pods resolve `<svc>.<ns>.svc` and `<pod>.<headless svc>.<ns>.svc` as in a real cluster.

One real node per machine: the bridge, the pod range and the cgroup root are machine-wide,
so /run/orbitmq-k8s-testbed/real-node.json records whose state dir owns them, and a new
`up --real-node` tears down a previous owner first (as `up` stops its own stale processes).

Teardown order matters: CoreDNS, kube-proxy and kubelet first (else kubelet restarts what we
kill), then every container task (SIGKILL through ctr, then through the cgroup), then containerd
and its shims, then mounts, netns, bridge, iptables, sysctls and cgroups.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import images

NODE_NAME = "real-node-0"
NODE_LABELS = {"type": "real"}
BRIDGE = "omq-br0"  # <= 15 characters (IFNAMSIZ)
DEFAULT_POD_CIDR = "10.213.0.0/24"  # not Docker's, podman's (10.88) or kwok's (10.244)
CGROUP_ROOT = "orbitmq-k8s-testbed"
CNI_BIN_DIR = Path("/usr/lib/cni")
CONTAINERD = Path("/usr/bin/containerd")
CTR = Path("/usr/bin/ctr")
NETNS_DIR = Path("/run/netns")
CONTAINER_LOG_LINKS = Path("/var/log/containers")
OWNER_RECORD = Path("/run/orbitmq-k8s-testbed/real-node.json")
UNIX_PATH_MAX = 107  # sun_path is 108 bytes including the terminating NUL

# Debian package -> a file it installs (apt-get install runs only when one is missing).
APT_PACKAGES = {
    "containerd": CONTAINERD,
    "runc": Path("/usr/sbin/runc"),
    "containernetworking-plugins": CNI_BIN_DIR / "bridge",
    "iptables": Path("/usr/sbin/iptables"),
}

# Sysctls that kubelet (kernel tunables), kube-proxy, the bridge plugin or we may change; the
# values before `up` are restored by `teardown`.
SYSCTLS = [
    "net/ipv4/ip_forward",
    "net/ipv6/conf/all/forwarding",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/ipv4/conf/all/route_localnet",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_be_liberal",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
]
# Chains kubelet, kube-proxy and CNI plugins create; only those absent before `up` are removed.
CHAIN_PREFIXES = ("KUBE-", "CNI-")
IPTABLES_TABLES = ("filter", "nat", "mangle")
STOP_ORDER = ["coredns", "kube-proxy", "kubelet"]
CLUSTER_DOMAIN = "cluster.local"
DNS_PORT = 53
# CoreDNS's identity (a client certificate with this CN) and what it may read: the rules of
# kubeadm's system:coredns ClusterRole.  Created through the API by `up --real-node`.
COREDNS_USER = "system:coredns"
COREDNS_RBAC: list[dict[str, Any]] = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "system:coredns"},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["endpoints", "services", "pods", "namespaces"],
                "verbs": ["list", "watch"],
            },
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "system:coredns"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": COREDNS_USER}],
    },
]
# Directories containerd and kubelet create at fixed paths; removed again if `up` made them
# and they are empty (a system containerd's /run/containerd is never empty while it runs).
FIXED_DIRS = [
    Path("/run/containerd"),
    Path("/run/containerd/s"),
    Path("/run/containerd/fifo"),
    Path("/run/containerd/runc"),
    NETNS_DIR,
    CONTAINER_LOG_LINKS,
]


class RealNodeError(Exception):
    """A failure with a message meant for the user (printed without a traceback)."""


Log = Callable[[str], None]


# --------------------------------------------------------------------------- paths


class Layout:
    """Where the real node's files live inside a test bed's state dir."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.base = state / "real-node"
        self.containerd = self.base / "containerd"
        self.socket = self.containerd / "containerd.sock"
        self.containerd_config = self.containerd / "config.toml"
        self.cni_conf = self.base / "cni" / "net.d"
        self.cni_ipam = self.base / "cni" / "ipam"
        self.kubelet_root = self.base / "kubelet"
        self.kubelet_config = self.base / "kubelet-config.yaml"
        self.kube_proxy_config = self.base / "kube-proxy-config.yaml"
        self.corefile = self.base / "Corefile"
        self.pod_logs = self.base / "pod-logs"
        self.images = self.base / "images"
        self.snapshot = self.base / "host-snapshot.json"
        self.info = self.base / "node.json"


def pod_cidr() -> ipaddress.IPv4Network:
    """The private pod range (ORBITMQ_K8S_POD_CIDR); the bridge takes its first address."""
    raw = os.environ.get("ORBITMQ_K8S_POD_CIDR") or DEFAULT_POD_CIDR
    try:
        net = ipaddress.IPv4Network(raw)
    except ValueError as exc:
        raise RealNodeError(f"ORBITMQ_K8S_POD_CIDR={raw!r} is not an IPv4 network: {exc}") from exc
    if not net.is_private or net.prefixlen > 28:
        raise RealNodeError(f"ORBITMQ_K8S_POD_CIDR={raw!r} must be a private range of at least /28")
    return net


def node_ip(net: ipaddress.IPv4Network) -> str:
    """The node's IP: the bridge's (the pods' gateway), the range's first address."""
    return str(next(net.hosts()))


def run(
    argv: list[str], check: bool = True, timeout: float = 60, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """Run a host tool; a failure names the command and its stderr."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as exc:
        raise RealNodeError(f"{' '.join(argv)} timed out after {timeout:.0f}s") from exc
    if check and proc.returncode != 0:
        raise RealNodeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return proc


# --------------------------------------------------------------------------- host prerequisites


def ensure_packages(log: Log, logs: Path) -> None:
    """apt-get install Debian's containerd, runc, CNI plugins and iptables when missing (root)."""
    if os.geteuid() != 0:
        raise RealNodeError("the real node needs root (containers, mounts, bridge, iptables)")
    missing = [pkg for pkg, path in APT_PACKAGES.items() if not path.exists()]
    if not missing:
        return
    if not shutil.which("apt-get"):
        raise RealNodeError(f"missing {', '.join(missing)} and no apt-get to install them")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    log(f"apt-get install {' '.join(missing)} ...")
    started = time.monotonic()
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / "apt-get.log").open("a") as out:
        for argv in (
            ["apt-get", "update", "-q"],
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
        ):
            if subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, check=False).returncode:
                raise RealNodeError(f"{' '.join(argv)} failed; see {logs / 'apt-get.log'}")
    log(f"apt-get install: done in {time.monotonic() - started:.0f}s")


def read_sysctl(name: str) -> str | None:
    try:
        return (Path("/proc/sys") / name).read_text().strip()
    except OSError:
        return None


def write_sysctl(name: str, value: str) -> None:
    with contextlib.suppress(OSError):
        (Path("/proc/sys") / name).write_text(value + "\n")


def iptables_chains() -> dict[str, list[str]]:
    """Existing chains per `<family>:<table>` (what `teardown` must leave alone)."""
    chains: dict[str, list[str]] = {}
    for family in ("iptables", "ip6tables"):
        for table in IPTABLES_TABLES:
            out = run([f"{family}-save", "-t", table], check=False)
            chains[f"{family}:{table}"] = [
                ln[1:].split()[0] for ln in out.stdout.splitlines() if ln.startswith(":")
            ]
    return chains


def cgroup_mounts() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, the named systemd one, the v2 unified one)."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" - ")
        if len(fields) == 2 and fields[1].split()[0] in ("cgroup", "cgroup2"):
            mounts.append(Path(fields[0].split()[4]))
    return mounts


# --------------------------------------------------------------------------- config files


def containerd_config(layout: Layout, pause_image: str) -> str:
    """containerd 1.6 config: private dirs and socket, CRI with our sandbox image and CNI dir."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""\
version = 2
root = "{layout.containerd / "root"}"
state = "{layout.containerd / "state"}"
# (runtime.v1.linux stays: containerd 1.6's task service refuses to load without it.)
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "{layout.socket}"
[ttrpc]
  address = "{layout.socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{layout.containerd / "opt"}"

[{cri}]
  sandbox_image = "{pause_image}"
  # No CAP_SYS_RESOURCE in this VM: lowering oom_score_adj below ours would fail.
  restrict_oom_score_adj = true
  disable_apparmor = true
  # Pod network namespaces under our state dir rather than /run/netns.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{layout.containerd / "runc"}"
  [{cri}.cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{layout.cni_conf}"
    max_conf_num = 1
"""


def cni_config(layout: Layout, net: ipaddress.IPv4Network) -> dict[str, Any]:
    """Bridge CNI on the private range; no masquerade (pods only talk to the host and each other)."""
    gateway = str(next(net.hosts()))
    return {
        "cniVersion": "1.0.0",
        "name": "orbitmq-testbed",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(net), "gateway": gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(layout.cni_ipam),
                },
            }
        ],
    }


def kubelet_config(layout: Layout, node_ip: str, port: int, healthz_port: int, ca: Path) -> dict[str, Any]:
    """KubeletConfiguration for a cgroup v1 VM without swap limits or CAP_SYS_RESOURCE."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{layout.socket}",
        # Only the API server (client cert from our CA) talks to the kubelet API.
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "podLogsDir": str(layout.pod_logs),
        # Never garbage-collect the locally imported images (there is no registry to re-pull).
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "nodeStatusUpdateFrequency": "2s",
        "serializeImagePulls": False,
        "resolvConf": "/etc/resolv.conf",
        # CoreDNS on the node IP: pods get `nameserver <node ip>` and the cluster search list.
        "clusterDNS": [node_ip],
        "clusterDomain": CLUSTER_DOMAIN,
    }


def corefile(node_ip: str, kubeconfig: Path, health_port: int, ready_port: int) -> str:
    """CoreDNS config: cluster.local (and reverse zones) from the API server, NXDOMAIN for the rest.

    Only the node IP is bound (`bind`), so no host resolver on port 53 is disturbed; there is
    no upstream to forward to, so every other name gets NXDOMAIN at once (`template`) rather
    than a timeout.  TTLs and the cache are short: tests create and delete Services quickly.
    """
    return f"""\
{CLUSTER_DOMAIN}:{DNS_PORT} in-addr.arpa:{DNS_PORT} ip6.arpa:{DNS_PORT} {{
    bind {node_ip}
    errors
    log . {{
        class denial error
    }}
    health 127.0.0.1:{health_port}
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} orbitmq-testbed
        pods insecure
        ttl 5
    }}
    cache 5
    loadbalance
}}
.:{DNS_PORT} {{
    bind {node_ip}
    errors
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""


def kube_proxy_config(
    kubeconfig: Path, net: ipaddress.IPv4Network, healthz: int, metrics: int
) -> dict[str, Any]:
    """iptables-mode kube-proxy that leaves conntrack sysctls and route_localnet alone."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "mode": "iptables",
        "clusterCIDR": str(net),
        "healthzBindAddress": f"127.0.0.1:{healthz}",
        "metricsBindAddress": f"127.0.0.1:{metrics}",
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "iptables": {"localhostNodePorts": False, "minSyncPeriod": "0s", "syncPeriod": "30s"},
        "nodePortAddresses": ["primary"],
    }


def resolve_a(server: str, name: str, port: int = DNS_PORT, timeout: float = 2) -> list[str]:
    """Ask one DNS server for the A records of `name` over UDP (stdlib only; no resolver config)."""
    query_id = int.from_bytes(os.urandom(2), "big")
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.rstrip(".").split("."))
    packet = (
        struct.pack(">HHHHHH", query_id, 0x0100, 1, 0, 0, 0) + question + b"\0" + struct.pack(">HH", 1, 1)
    )
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(packet, (server, port))
        reply = sock.recv(4096)
    rid, flags, qdcount, ancount = struct.unpack(">HHHH", reply[:8])
    if rid != query_id or flags & 0x000F:
        return []

    def skip_name(pos: int) -> int:
        """Past a (possibly compressed) domain name."""
        while reply[pos] and reply[pos] & 0xC0 != 0xC0:
            pos += 1 + reply[pos]
        return pos + (2 if reply[pos] else 1)

    pos = 12
    for _ in range(qdcount):  # the echoed question: name, QTYPE, QCLASS
        pos = skip_name(pos) + 4
    addresses = []
    for _ in range(ancount):
        pos = skip_name(pos)
        rtype, _cls, _ttl, length = struct.unpack(">HHIH", reply[pos : pos + 10])
        pos += 10
        if rtype == 1 and length == 4:
            addresses.append(socket.inet_ntoa(reply[pos : pos + 4]))
        pos += length
    return addresses


# --------------------------------------------------------------------------- up


def claim(layout: Layout, log: Log, teardown_other: Callable[[Path], None]) -> None:
    """Make this state dir the machine's one real node, tearing down a previous owner first."""
    with contextlib.suppress(OSError, ValueError):
        previous = Path(json.loads(OWNER_RECORD.read_text())["state"])
        if previous != layout.state:
            log(f"a real node of {previous} is still set up on this machine: tearing it down first")
            teardown_other(previous)
    OWNER_RECORD.parent.mkdir(parents=True, exist_ok=True)
    OWNER_RECORD.write_text(json.dumps({"state": str(layout.state), "pid": os.getpid()}) + "\n")


def snapshot_host(layout: Layout, net: ipaddress.IPv4Network) -> None:
    """Record what teardown restores, before anything is changed."""
    routes = run(["ip", "-j", "route", "show"]).stdout
    for route in json.loads(routes or "[]"):
        dst = route.get("dst", "")
        if dst and dst != "default" and "/" in dst and ipaddress.ip_network(dst, strict=False).overlaps(net):
            raise RealNodeError(
                f"pod range {net} overlaps the host route {dst} (dev {route.get('dev')}); "
                "set ORBITMQ_K8S_POD_CIDR to a free private range"
            )
    snapshot = {
        "sysctls": {name: value for name in SYSCTLS if (value := read_sysctl(name)) is not None},
        "chains": iptables_chains(),
        "bridge_existed": Path(f"/sys/class/net/{BRIDGE}").exists(),
        "absent_dirs": [str(d) for d in FIXED_DIRS if not d.exists()],
    }
    layout.base.mkdir(parents=True, exist_ok=True)
    layout.snapshot.write_text(json.dumps(snapshot, indent=2) + "\n")


def prepare_host(layout: Layout, net: ipaddress.IPv4Network) -> str:
    """Bridge with the gateway address, br_netfilter sysctls, the cgroup root; returns the node IP."""
    gateway = node_ip(net)
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    run(["ip", "addr", "replace", f"{gateway}/{net.prefixlen}", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])
    # Service VIPs between pods on one bridge need bridged traffic to pass iptables.
    write_sysctl("net/bridge/bridge-nf-call-iptables", "1")
    write_sysctl("net/ipv4/ip_forward", "1")
    for mount in cgroup_mounts():
        if mount.name != "unified":
            (mount / CGROUP_ROOT).mkdir(exist_ok=True)
    return gateway


def write_configs(layout: Layout, net: ipaddress.IPv4Network, pause_image: str) -> None:
    for path in (layout.containerd, layout.cni_conf, layout.cni_ipam, layout.kubelet_root, layout.pod_logs):
        path.mkdir(parents=True, exist_ok=True)
    if len(str(layout.socket)) + len(".ttrpc") > UNIX_PATH_MAX:
        raise RealNodeError(f"containerd socket path {layout.socket} is too long for a unix socket")
    layout.containerd_config.write_text(containerd_config(layout, pause_image))
    (layout.cni_conf / "10-orbitmq.conflist").write_text(json.dumps(cni_config(layout, net), indent=2) + "\n")


def ctr(
    layout: Layout, *args: str, timeout: float = 60, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """ctr against our containerd, in the namespace the CRI plugin uses."""
    return run(
        [str(CTR), "--address", str(layout.socket), "--namespace", "k8s.io", *args],
        timeout=timeout,
        check=check,
    )


def import_image(layout: Layout, archive: Path) -> None:
    ctr(layout, "images", "import", "--no-unpack=false", str(archive), timeout=120)


def build_images(layout: Layout, pause_binary: Path, repo_root: Path, venv: Path) -> dict[str, Any]:
    """Write both image archives; returns their references and the Python runtime's host mounts."""
    runtime = images.python_runtime(repo_root, venv)
    pause_ref = images.build_pause_image(pause_binary, layout.images / "pause.tar")
    python_ref = images.build_python_image(runtime, layout.images / "python.tar")
    return {
        "pause_image": pause_ref,
        "image": python_ref,
        "python": runtime.python,
        "host_mounts": list(runtime.host_mounts),
    }


# --------------------------------------------------------------------------- teardown


def _cgroup_dirs(mount: Path) -> list[Path]:
    """Our cgroup subtree in one hierarchy, deepest first (rmdir order)."""
    root = mount / CGROUP_ROOT
    if not root.is_dir():
        return []
    dirs = [Path(d) for d, _, _ in os.walk(root)]
    return sorted(dirs, key=lambda p: len(p.parts), reverse=True)


def cgroup_pids() -> set[int]:
    """Every process in our cgroup subtree (the containers and pause processes)."""
    pids: set[int] = set()
    for mount in cgroup_mounts():
        for d in _cgroup_dirs(mount):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in (d / "cgroup.procs").read_text().split())
    return pids


def _netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _mounts_under(prefix: Path) -> list[str]:
    """Mount points under prefix, deepest first (mountinfo escapes spaces as \\040)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(prefix) or point.startswith(str(prefix) + os.sep):
            points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def _umount(point: str) -> None:
    if run(["umount", point], check=False).returncode != 0:
        run(["umount", "-l", point], check=False)  # busy: detach now, freed when unused


def _remove_chains(snapshot: dict[str, Any]) -> list[str]:
    """Delete the KUBE-*/CNI-* chains added since the snapshot, and every jump into them."""
    before = snapshot.get("chains", {})
    removed = []
    for family in ("iptables", "ip6tables"):
        for table in IPTABLES_TABLES:
            out = run([f"{family}-save", "-t", table], check=False)
            if out.returncode != 0:
                continue
            keep = set(before.get(f"{family}:{table}", []))
            ours = [
                ln[1:].split()[0]
                for ln in out.stdout.splitlines()
                if ln.startswith(":") and ln[1:].startswith(CHAIN_PREFIXES) and ln[1:].split()[0] not in keep
            ]
            if not ours:
                continue
            jumps = [
                "-D" + ln[2:]
                for ln in out.stdout.splitlines()
                if ln.startswith("-A ") and ln.split()[1] not in ours and any(f"-j {c}" in ln for c in ours)
            ]
            script = [
                f"*{table}",
                *jumps,
                *(f"-F {c}" for c in ours),
                *(f"-X {c}" for c in ours),
                "COMMIT",
                "",
            ]
            res = run([f"{family}-restore", "--noflush"], check=False, input="\n".join(script))
            if res.returncode != 0:
                raise RealNodeError(f"{family}-restore ({table}) failed: {res.stderr.strip()}")
            removed += [f"{family}/{table}/{c}" for c in ours]
    return removed


def _stop_pid(pid: int, grace: float, proc_alive: Callable[[int], bool]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while proc_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while proc_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def teardown(
    state: Path,
    log: Log,
    find: Callable[[Path, set[str]], dict[int, str]],
    proc_alive: Callable[[int], bool],
    grace: float = 10,
) -> list[str]:
    """Undo everything `up --real-node` did for this state dir; idempotent and crash-safe.

    `find(state, names)` returns the live processes of this state dir whose binary has one of
    the given base names, as {pid: name}.
    """
    layout = Layout(state)
    if not layout.base.exists():
        return []
    done: list[str] = []
    # 1. kubelet and kube-proxy, so nothing restarts the containers we are about to kill.
    for name in STOP_ORDER:
        for pid, found in find(state, {name}).items():
            _stop_pid(pid, grace, proc_alive)
            done.append(f"{found}({pid})")
    # 2. Containers: remember their network namespaces, then SIGKILL every task.
    victims = cgroup_pids()
    netns = {ino for pid in victims if (ino := _netns_inode(pid)) is not None}
    host_netns = _netns_inode(os.getpid())
    netns.discard(host_netns)  # type: ignore[arg-type]
    containerd_pids = find(state, {"containerd"})
    if containerd_pids and layout.socket.exists():
        tasks = ctr(layout, "tasks", "ls", "-q", check=False, timeout=20).stdout.split()
        for task in tasks:
            ctr(layout, "tasks", "kill", "--all", "--signal", "SIGKILL", task, check=False, timeout=20)
        for task in tasks:
            ctr(layout, "tasks", "delete", "--force", task, check=False, timeout=20)
        if tasks:
            done.append(f"{len(tasks)} container tasks")
    for pid in cgroup_pids():  # whatever ctr could not reach (containerd already gone)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # 3. containerd, then any shim it left.
    for pid, found in containerd_pids.items():
        _stop_pid(pid, grace, proc_alive)
        done.append(f"{found}({pid})")
    for pid, found in find(state, {"containerd-shim-runc-v2"}).items():
        _stop_pid(pid, 2, proc_alive)
        done.append(f"{found}({pid})")
    deadline = time.monotonic() + 10
    while any(proc_alive(pid) for pid in victims) and time.monotonic() < deadline:
        time.sleep(0.1)
    # 4. Mounts under the state dir (rootfs overlays, shm, volumes, tokens) and our netns.
    for point in _mounts_under(state):
        _umount(point)
    if NETNS_DIR.is_dir():
        for entry in NETNS_DIR.iterdir():
            with contextlib.suppress(OSError):
                if entry.stat().st_ino in netns:
                    _umount(str(entry))
                    entry.unlink()
                    done.append(f"netns {entry.name}")
    # 5. Host networking and kernel state, back to the snapshot.
    snapshot: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        snapshot = json.loads(layout.snapshot.read_text())
    if snapshot and not snapshot.get("bridge_existed") and Path(f"/sys/class/net/{BRIDGE}").exists():
        run(["ip", "link", "delete", BRIDGE], check=False)
        done.append(f"bridge {BRIDGE}")
    if snapshot:
        chains = _remove_chains(snapshot)
        if chains:
            done.append(f"{len(chains)} iptables chains")
        for name, value in snapshot.get("sysctls", {}).items():
            if read_sysctl(name) != value:
                write_sysctl(name, value)
                done.append(f"sysctl {name}={value}")
    # 6. Cgroups (empty now) and kubelet's log links into our state dir.
    for mount in cgroup_mounts():
        for d in _cgroup_dirs(mount):
            with contextlib.suppress(OSError):
                d.rmdir()
    if CONTAINER_LOG_LINKS.is_dir():
        for link in CONTAINER_LOG_LINKS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(str(state) + os.sep):
                    link.unlink()
    for absent in sorted(snapshot.get("absent_dirs", []), key=len, reverse=True):
        with contextlib.suppress(OSError):
            Path(absent).rmdir()
    leftover = _mounts_under(state)
    if leftover:
        raise RealNodeError(f"mounts left under {state}: {leftover[:5]}")
    with contextlib.suppress(OSError, ValueError):
        if Path(json.loads(OWNER_RECORD.read_text())["state"]) == state:
            OWNER_RECORD.unlink()
            OWNER_RECORD.parent.rmdir()
    return done
