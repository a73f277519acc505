"""``spec.security.tls`` in the pods and in cert-manager's Certificate: what every orbitmq pod
mounts and runs with, the names the certificate holds (the ones clients inside the cluster
dial), probes a TLS-only port can answer, and nothing at all with TLS off."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import codecs

from orbitmq.common.server import HEALTH_PATH
from orbitmq_operator.builders import Cluster, desired_objects, names, tls
from orbitmq_operator.reconcile.certificates import Certificate
from orbitmq_operator.spec import ClusterSpec

TLS_ARGS = [
    "--tls-cert",
    "/var/run/orbitmq/tls/tls.crt",
    "--tls-key",
    "/var/run/orbitmq/tls/tls.key",
    "--tls-ca",
    "/var/run/orbitmq/tls/ca.crt",
]


def make(security: dict[str, Any] | None = None, **spec: Any) -> Cluster:
    body = {"image": "orbitmq:1.0", "brokers": {"groups": 2}, "proxy": {"replicas": 1}, **spec}
    if security is not None:
        body["security"] = security
    return Cluster("orbit", "mq", "uid-1", ClusterSpec.model_validate(body), 1)


def pods(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """Pod spec of every workload by its name."""
    return {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]
        for o in desired_objects(cluster)
        if o["kind"] in ("StatefulSet", "Deployment")
    }


def test_tls_off_changes_no_pod() -> None:
    plain = make()
    assert pods(plain) == pods(make({"tls": {"enabled": False, "requireClientCert": False}}))
    for name, pod in pods(plain).items():
        (container,) = pod["containers"]
        assert "grpc" in container["readinessProbe"], name
        assert not any(a.startswith("--tls") for a in container["command"]), name
        assert all(v["name"] != names.TLS_VOLUME for v in pod["volumes"]), name
    broker = pods(plain)["orbit-broker-0"]["containers"][0]["command"]
    assert broker[broker.index("--advertise-addr") + 1] == "$(POD_IP):10911"


@pytest.mark.parametrize("mutual", [False, True])
def test_every_pod_mounts_the_secret_and_serves_tls(mutual: bool) -> None:
    cluster = make({"tls": {"enabled": True, "requireClientCert": mutual}})
    every = pods(cluster)
    assert sorted(every) == ["orbit-broker-0", "orbit-broker-1", "orbit-namesrv", "orbit-proxy"]
    for name, pod in every.items():
        (container,) = pod["containers"]
        expected = [*TLS_ARGS, *(["--tls-require-client-cert"] if mutual else [])]
        assert container["command"][-len(expected) :] == expected, name
        assert {"name": "tls", "mountPath": "/var/run/orbitmq/tls", "readOnly": True} in container[
            "volumeMounts"
        ]
        assert {"name": "tls", "secret": {"secretName": "orbit-tls", "defaultMode": 0o440}} in pod["volumes"]
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            assert container[probe]["httpGet"] == {"path": HEALTH_PATH, "port": "metrics", "scheme": "HTTP"}
            assert "grpc" not in container[probe], f"{name} {probe}: the kubelet's gRPC probe has no TLS"
        assert any(p["name"] == "metrics" for p in container["ports"])


def test_probes_keep_their_timings_under_tls() -> None:
    plain = pods(make())["orbit-broker-0"]["containers"][0]
    secure = pods(make({"tls": {"enabled": True}}))["orbit-broker-0"]["containers"][0]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        timings = {k: v for k, v in plain[probe].items() if k != "grpc"}
        assert {k: v for k, v in secure[probe].items() if k != "httpGet"} == timings


def test_brokers_advertise_their_dns_name_under_tls() -> None:
    """A certificate cannot name a pod IP it does not know: a broker advertises its pod's name
    through its group's headless Service, which the certificate holds by wildcard."""
    cluster = make({"tls": {"enabled": True}})
    for group in (0, 1):
        container = pods(cluster)[f"orbit-broker-{group}"]["containers"][0]
        command = container["command"]
        advertised = command[command.index("--advertise-addr") + 1]
        assert advertised == f"$(POD_NAME).orbit-broker-{group}.mq.svc:10911"
        env = [e["name"] for e in container["env"]]
        assert env[:3] == ["POD_IP", "POD_NAME", "ORBITMQ_BROKER_STORE_HOST"], "a $(VAR) needs VAR before it"
        store_host = next(e["value"] for e in container["env"] if e["name"] == "ORBITMQ_BROKER_STORE_HOST")
        assert store_host == "$(POD_IP):10911", "records and message ids hold an IP address"
        host = advertised.replace("$(POD_NAME)", f"orbit-broker-{group}-1").rsplit(":", 1)[0]
        assert _certificate_covers(tls.server_names(cluster), host)


def test_server_names_cover_what_clients_dial() -> None:
    cluster = make({"tls": {"enabled": True}})
    wanted = tls.server_names(cluster)
    dialled = [
        names.namesrv_service_address("orbit", "mq").rsplit(":", 1)[0],
        *(a.rsplit(":", 1)[0] for a in names.namesrv_pod_addresses("orbit", "mq", 3)),
        names.proxy_service_address("orbit", "mq").rsplit(":", 1)[0],
        "orbit-namesrv",  # a client in the same namespace
        "orbit-namesrv.mq",
        names.broker_pod_host("orbit", "mq", 63, "orbit-broker-63-0"),  # the largest group index
        "localhost",
    ]
    for host in dialled:
        assert _certificate_covers(wanted, host), host
    assert not _certificate_covers(wanted, "orbit-broker-0-0.orbit-broker-0.other.svc"), "another namespace"
    assert len(wanted) == len(set(wanted))


def _certificate_covers(sans: list[str], host: str) -> bool:
    """Whether a certificate with these DNS names matches ``host`` (RFC 6125: a wildcard stands
    for one whole left-most label; test_certificates checks this with OpenSSL's handshake)."""
    for san in sans:
        if san == host:
            return True
        if san.startswith("*.") and "." in host and host.split(".", 1)[1] == san[2:]:
            return True
    return False


def test_a_user_secret_is_mounted_as_it_is_named() -> None:
    cluster = make({"tls": {"enabled": True, "secretName": "my-certs"}})
    for pod in pods(cluster).values():
        assert {"name": "tls", "secret": {"secretName": "my-certs", "defaultMode": 0o440}} in pod["volumes"]
    assert tls.certificate(cluster) is None


def test_issuer_gives_a_certificate_for_the_same_names() -> None:
    cluster = make({"tls": {"enabled": True, "issuer": {"name": "corp-ca", "kind": "ClusterIssuer"}}})
    certificate = tls.certificate(cluster)
    assert certificate is not None
    assert isinstance(codecs.from_dict(dict(certificate)), Certificate)  # what the reconcile applies
    spec = certificate["spec"]
    assert certificate["metadata"]["name"] == spec["secretName"] == "orbit-tls"
    assert certificate["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert spec["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert sorted([*spec["dnsNames"], *spec["ipAddresses"]]) == sorted(tls.server_names(cluster))
    assert {"server auth", "client auth"} <= set(spec["usages"]), "servers present it to each other"
    assert spec["privateKey"]["rotationPolicy"] == "Always"
    for pod in pods(cluster).values():
        assert {"name": "tls", "secret": {"secretName": "orbit-tls", "defaultMode": 0o440}} in pod["volumes"]
    assert tls.certificate(make({"tls": {"enabled": True}})) is None, "the operator's own CA needs none"


def test_issuer_and_secret_name_are_exclusive() -> None:
    with pytest.raises(ValueError, match="issuer and secretName are exclusive"):
        make({"tls": {"enabled": True, "secretName": "x", "issuer": {"name": "ca", "kind": "Issuer"}}})


@pytest.mark.parametrize("mutual", [False, True])
def test_the_proxy_reaches_the_cluster_over_tls(mutual: bool) -> None:
    """The proxy calls name servers and brokers as a client library does (``ORBITMQ_TLS_*``)."""
    container = pods(make({"tls": {"enabled": True, "requireClientCert": mutual}}))["orbit-proxy"][
        "containers"
    ][0]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert env["ORBITMQ_TLS_CA"] == "/var/run/orbitmq/tls/ca.crt"
    if mutual:
        assert env["ORBITMQ_TLS_CERT"] == "/var/run/orbitmq/tls/tls.crt"
        assert env["ORBITMQ_TLS_KEY"] == "/var/run/orbitmq/tls/tls.key"
    else:
        assert "ORBITMQ_TLS_CERT" not in env
    plain = pods(make())["orbit-proxy"]["containers"][0]
    assert not any(e["name"].startswith("ORBITMQ_TLS_") for e in plain.get("env", []))
    for name, pod in pods(make({"tls": {"enabled": True}})).items():
        if name != "orbit-proxy":
            names_ = [e["name"] for e in pod["containers"][0].get("env", [])]
            assert not any(n.startswith("ORBITMQ_TLS_") for n in names_), "servers take their flags"
