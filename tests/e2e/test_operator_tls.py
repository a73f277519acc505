"""``spec.security.tls`` on the test bed's real node: a cluster with TLS on every port, from the
operator's own CA, becomes Ready; a client pod given only ``<cluster>-ca-cert`` produces and
consumes through the name servers' Service; and after a CA rotation the new certificates reach
every pod without a restart while an established producer keeps sending.

What each step shows:

* Ready: the pods serve TLS only and their probes (``/health`` on the metrics port) pass; the
  SYNC_MASTER group is writable, so its slave replicates from the master over TLS (the master's
  advertised DNS name is in the certificate); the operator reads every broker's role over TLS,
  dialling pod IPs and checking each pod's DNS name (it runs outside the pod network's DNS).
* A client pod mounting ``<cluster>-ca-cert`` (the CA alone, no server name override) creates a
  topic, produces and consumes: the brokers it is routed to are named in the certificate.
* Rotation: ``<cluster>-ca`` is deleted, as an administrator retiring a CA would. The operator
  makes a new CA, a new server certificate, and a bundle of both CAs; the kubelet swaps the
  mounted files and every server presents the new certificate to new connections (each pod is
  asked with a handshake trusting only the new CA, by the name clients use) with no container
  restarted. A client trusting only the new CA then produces and consumes; the producer started
  before the rotation never failed a send, on its established connections.

The test bed has no cert-manager controller: the ``issuer`` mode is covered by the builder's
unit tests (the Certificate object) and the reconcile's waiting is a condition, not run here.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from k8s_testbed_support import K8sCluster
from realpods import cluster_cr, host_volumes, operated_namespace, pod_settings, wait_ready

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900, func_only=True)]

CLUSTER = "sec"
TOPIC = "TlsOrders"
CA_MOUNT = "/etc/orbitmq-ca"
CLIENT = "tls-client"

LONG_PRODUCER = """
import asyncio, json, os, sys, time
from orbitmq.client import Message, Producer
from orbitmq.common.tls import ClientTls

async def main(namesrv, ca, topic):
    ok, failed, errors = 0, 0, []
    async with Producer("TlsLongProducer", namesrv, tls=ClientTls(tls_ca=ca)) as producer:
        deadline = time.monotonic() + 600
        while not os.path.exists("/tmp/stop") and time.monotonic() < deadline:
            try:
                await producer.send(Message(topic, f"long-{ok}".encode()))
                ok += 1
                if ok == 1:
                    print("first", flush=True)
            except Exception as error:
                failed += 1
                errors.append(f"{type(error).__name__}: {error}"[:300])
            await asyncio.sleep(0.1)
    print(json.dumps({"ok": ok, "failed": failed, "errors": errors[:5]}), flush=True)

asyncio.run(main(*sys.argv[1:4]))
"""


def client_pod(k8s: K8sCluster) -> dict[str, Any]:
    """A pod of the orbitmq image that idles, with the cluster's CA bundle mounted."""
    settings = pod_settings(k8s)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": CLIENT},
        "spec": {
            "nodeSelector": settings["nodeSelector"],
            "securityContext": {"runAsUser": 10001, "runAsGroup": 10001, "runAsNonRoot": True},
            "containers": [
                {
                    "name": "client",
                    "image": k8s.info["real_node"]["image"],
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", "import time; time.sleep(3600)"],
                    "env": [{"name": "HOME", "value": "/tmp"}],
                    "volumeMounts": [
                        *settings["volumeMounts"],
                        {"name": "ca", "mountPath": CA_MOUNT, "readOnly": True},
                        {"name": "tmp", "mountPath": "/tmp"},
                    ],
                }
            ],
            "volumes": [
                *settings["volumes"],
                {"name": "ca", "secret": {"secretName": f"{CLUSTER}-ca-cert"}},
                {"name": "tmp", "emptyDir": {}},
            ],
        },
    }


def in_client(k8s: K8sCluster, ns: str, *args: str, timeout: float = 120) -> str:
    """Run a command in the client pod; its stdout (fails with its stderr)."""
    return k8s.kubectl("exec", CLIENT, "-n", ns, "--", *args, timeout=timeout).stdout


def secret_text(k8s: K8sCluster, ns: str, name: str, key: str) -> str:
    data = k8s.get_json("secret", name, "-n", ns)["data"]
    return base64.b64decode(data[key]).decode()


def served_by(address: tuple[str, int], host: str, ca: str) -> str:
    """The issuer of the certificate a new TLS connection to ``address`` is shown, checked
    against ``ca`` only and for ``host`` (a handshake failure raises)."""
    with tempfile.NamedTemporaryFile("w", suffix=".crt") as bundle:
        bundle.write(ca)
        bundle.flush()
        context = ssl.create_default_context(cafile=bundle.name)
    with (
        socket.create_connection(address, timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as connection,
    ):
        cert = connection.getpeercert()
    return dict(pair[0] for pair in cert["issuer"])["commonName"]


def orbitmq_pods(k8s: K8sCluster, ns: str) -> list[dict[str, Any]]:
    return k8s.get_json("pods", "-n", ns, "-l", f"app.kubernetes.io/instance={CLUSTER}")["items"]


def endpoints(k8s: K8sCluster, ns: str) -> list[tuple[str, tuple[str, int], str]]:
    """(pod, its gRPC address, the name clients check) of every name server and broker."""
    out = []
    for pod in orbitmq_pods(k8s, ns):
        name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
        labels = pod["metadata"]["labels"]
        if labels["app.kubernetes.io/component"] == "namesrv":
            out.append((name, (ip, 9876), f"{name}.{CLUSTER}-namesrv-headless.{ns}.svc"))
        else:
            group = f"{CLUSTER}-broker-{labels['orbitmq.io/broker-group']}"
            out.append((name, (ip, 10911), f"{name}.{group}.{ns}.svc"))
    return out


def restarts(k8s: K8sCluster, ns: str) -> dict[str, int]:
    return {
        p["metadata"]["name"]: sum(c["restartCount"] for c in p["status"].get("containerStatuses", []))
        for p in orbitmq_pods(k8s, ns)
    }


def produce_and_consume(k8s: K8sCluster, ns: str, ca: str, tag: str) -> None:
    """Ten messages in and out through the name servers' Service, trusting ``ca`` only."""
    namesrv = f"{CLUSTER}-namesrv.{ns}.svc:9876"
    common = ["--namesrv", namesrv, "--tls-ca", ca]
    out = in_client(
        k8s,
        ns,
        "orbitmq",
        "produce",
        *common,
        "--topic",
        TOPIC,
        "--count",
        "10",
        "--body",
        f"{tag}-{{i}}",
        "--tag",
        tag,
        "--json",
    )
    summary = json.loads(out.strip().splitlines()[-1])["summary"]
    assert summary["sent"] == 10 and summary["failed"] == 0, out
    got = in_client(
        k8s,
        ns,
        "orbitmq",
        "consume",
        *common,
        "--topic",
        TOPIC,
        "--group",
        f"TlsReader{tag}",
        "--expr",
        tag,  # the ten only, not the long producer's thousands
        "--from",
        "first",
        "--count",
        "10",
        "--idle-timeout",
        "30",
        "--json",
        timeout=180,
    )
    bodies = {json.loads(line).get("body") for line in got.strip().splitlines()[:-1]}
    assert {f"{tag}-{i}" for i in range(10)} <= bodies, got[-2000:]


def show_state(k8s: K8sCluster, ns: str) -> None:
    """The cluster's status, its pods and their logs' tails: printed when a step failed."""
    print(json.dumps(k8s.get_json("orbitmqclusters.orbitmq.io", CLUSTER, "-n", ns).get("status"), indent=1))
    print(k8s.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False).stdout)
    for pod in k8s.get_json("pods", "-n", ns)["items"]:
        name = pod["metadata"]["name"]
        print(f"--- {name}: {json.dumps(pod['status'].get('containerStatuses'))[:1500]}")
        print(k8s.kubectl("logs", name, "-n", ns, "--tail=30", check=False).stdout)
    events = k8s.kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp", check=False).stdout
    print(events[-4000:])


def test_tls_cluster_serves_clients_and_rotates_its_ca(k8s_real_node: K8sCluster, tmp_path: Path) -> None:
    k8s = k8s_real_node
    with operated_namespace(k8s, "e2e-tls", tmp_path) as ns:
        try:
            tls_cluster_steps(k8s, ns, tmp_path)
        except BaseException:
            show_state(k8s, ns)
            raise


def tls_cluster_steps(k8s: K8sCluster, ns: str, tmp_path: Path) -> None:
    host_volumes(k8s, ns, CLUSTER, groups=1, replicas=2, root=tmp_path / "volumes")
    brokers = {"groups": 1, "slavesPerGroup": 1, "replicationMode": "SYNC_MASTER"}
    started = time.monotonic()
    k8s.apply(cluster_cr(k8s, CLUSTER, brokers, security={"tls": {"enabled": True}}), namespace=ns)
    k8s.apply(client_pod(k8s), namespace=ns)
    ready = wait_ready(k8s, ns, CLUSTER, timeout=300)
    print(f"TLS cluster Ready in {time.monotonic() - started:.1f}s")
    (group,) = ready["status"]["brokerGroups"]
    assert group["writable"] and group["master"], group  # SYNC_MASTER: the slave follows over TLS
    first_ca = secret_text(k8s, ns, f"{CLUSTER}-ca", "ca.crt")
    assert secret_text(k8s, ns, f"{CLUSTER}-ca-cert", "ca.crt") == first_ca
    assert secret_text(k8s, ns, f"{CLUSTER}-tls", "ca.crt") == first_ca
    for pod, address, host in endpoints(k8s, ns):
        assert served_by(address, host, first_ca) == f"orbitmq {ns}/{CLUSTER} CA", pod
        with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
            served_by(address, "wrong.example", first_ca)  # the name is checked, not only the CA

    k8s.wait_for(
        "the client pod running",
        lambda: k8s.get_json("pod", CLIENT, "-n", ns)["status"].get("phase") == "Running",
        timeout=120,
    )
    namesrv = f"{CLUSTER}-namesrv.{ns}.svc:9876"
    tls_ca = ["--tls-ca", f"{CA_MOUNT}/ca.crt"]
    in_client(
        k8s, ns, "orbitmq", "admin", "topic", "create", "--namesrv", namesrv, *tls_ca,
        "--topic", TOPIC, "--cluster", CLUSTER,
    )  # fmt: skip
    produce_and_consume(k8s, ns, f"{CA_MOUNT}/ca.crt", "before")

    long_producer = subprocess.Popen(
        [str(k8s.bin_dir / "kubectl"), "exec", CLIENT, "-n", ns, "--", "python", "-c", LONG_PRODUCER,
         namesrv, f"{CA_MOUNT}/ca.crt", TOPIC],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=k8s.env,
    )  # fmt: skip
    try:
        assert long_producer.stdout is not None
        assert long_producer.stdout.readline().strip() == "first", long_producer.stderr
        before = restarts(k8s, ns)

        rotated = time.monotonic()
        k8s.kubectl("delete", "secret", f"{CLUSTER}-ca", "-n", ns)

        def new_ca() -> str:
            found = k8s.kubectl("get", "secret", f"{CLUSTER}-ca", "-n", ns, "-o", "json", check=False)
            if found.returncode != 0:
                return ""
            data = (json.loads(found.stdout).get("data") or {}).get("ca.crt")
            return base64.b64decode(data).decode() if data else ""

        k8s.wait_for("a new CA", lambda: new_ca() not in ("", first_ca), timeout=60)
        second_ca = new_ca()
        bundle = secret_text(k8s, ns, f"{CLUSTER}-ca-cert", "ca.crt")
        assert bundle == second_ca + first_ca, "clients trust both CAs until the next rotation"

        def all_rotated() -> bool:
            for _, address, host in endpoints(k8s, ns):
                try:
                    served_by(address, host, second_ca)
                except (ssl.SSLError, OSError):
                    return False
            return True

        k8s.wait_for("every pod serving the new certificate", all_rotated, timeout=240)
        took = time.monotonic() - rotated
        print(f"every pod serves the new CA's certificate {took:.1f}s after the rotation")
        assert restarts(k8s, ns) == before, "no container restarted for the new certificate"

        write = "import sys; open('/tmp/new-ca.crt', 'w').write(sys.stdin.read())"
        k8s.kubectl("exec", "-i", CLIENT, "-n", ns, "--", "python", "-c", write, input=second_ca)
        produce_and_consume(k8s, ns, "/tmp/new-ca.crt", "after")
        in_client(k8s, ns, "python", "-c", "open('/tmp/stop', 'w').close()")
        out, err = long_producer.communicate(timeout=120)
    finally:
        if long_producer.poll() is None:
            long_producer.kill()
    result = json.loads(out.strip().splitlines()[-1])
    assert result["failed"] == 0 and result["ok"] > 0, (result, err[-2000:])
    print(f"established producer: {result['ok']} sends across the rotation, none failed")
    status = wait_ready(k8s, ns, CLUSTER, timeout=60)["status"]
    (group,) = status["brokerGroups"]
    assert group["writable"], group  # the operator still reads the brokers, with the new CA
