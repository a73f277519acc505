"""The operator's TLS Secrets against a real API server (kwok: no pod runs, so clusters stay
``BrokersNotReady`` once their TLS is in place): its own CA and server certificate made once,
kept across resyncs, made again when deleted; a user's Secret checked, and its problems named in
the conditions with nothing applied; cert-manager's Certificate applied for an issuer and the
cluster waiting for its Secret.

The test bed has no cert-manager: a minimal ``certificates.cert-manager.io`` CRD stands in for
its API, and the test writes the Secret as cert-manager would once its issuer signed it."""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
from typing import Any

import pytest
from k8s_testbed_support import K8sCluster
from operatorkit import (
    RESYNC_S,
    children,
    cluster_cr,
    condition,
    get,
    install_crds,
    running_operator,
    wait_condition,
)

from orbitmq_operator.builders import Cluster, certificates, tls
from orbitmq_operator.builders.certificates import Pem
from orbitmq_operator.spec import ClusterSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300, func_only=True)]

CLUSTER = "sec"
SPEC = {
    "nameServers": {"replicas": 1},
    "brokers": {"groups": 1, "slavesPerGroup": 0, "replicationMode": "ASYNC_MASTER"},
}
CERT_MANAGER_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "certificates.cert-manager.io"},
    "spec": {
        "group": "cert-manager.io",
        "names": {"kind": "Certificate", "plural": "certificates", "singular": "certificate"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


def secret(k8s: K8sCluster, ns: str, name: str) -> dict[str, Any] | None:
    found = k8s.kubectl("get", "secret", name, "-n", ns, "-o", "json", check=False)
    if found.returncode != 0:
        return None
    return json.loads(found.stdout)


def data(k8s: K8sCluster, ns: str, name: str) -> dict[str, str]:
    found = secret(k8s, ns, name)
    assert found is not None, f"Secret {name}"
    return {key: base64.b64decode(value).decode() for key, value in (found.get("data") or {}).items()}


def user_secret(ns: str, name: str, values: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in values.items()},
    }


def mounted_secret(k8s: K8sCluster, ns: str) -> set[str]:
    """The TLS Secret every StatefulSet's pods mount."""
    out = set()
    for (kind, _), obj in children(k8s, ns, CLUSTER).items():
        if kind == "StatefulSet":
            volumes = obj["spec"]["template"]["spec"]["volumes"]
            out |= {v["secret"]["secretName"] for v in volumes if v["name"] == "tls"}
    return out


def names_for(ns: str) -> list[str]:
    spec = ClusterSpec.model_validate({"image": "x", "security": {"tls": {"enabled": True}}})
    return tls.server_names(Cluster(CLUSTER, ns, "uid", spec))


def test_the_operators_own_ca(
    k8s_cluster: K8sCluster, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    k8s, ns = k8s_cluster, namespace
    monkeypatch.setenv("KUBECONFIG", str(k8s.kubeconfig))
    install_crds(k8s)
    with running_operator(ns):
        k8s.apply(cluster_cr(CLUSTER, **SPEC, security={"tls": {"enabled": True}}), namespace=ns)
        wait_condition(k8s, ns, "orbitmqclusters", CLUSTER, "Ready", "False", "BrokersNotReady")
        uid = get(k8s, ns, "orbitmqclusters", CLUSTER)["metadata"]["uid"]
        ca, bundle, server = data(k8s, ns, "sec-ca"), data(k8s, ns, "sec-ca-cert"), data(k8s, ns, "sec-tls")
        for name in ("sec-ca", "sec-ca-cert", "sec-tls"):
            (owner,) = secret(k8s, ns, name)["metadata"]["ownerReferences"]  # type: ignore[index]
            assert owner["uid"] == uid, name
        assert set(ca) == {"ca.crt", "ca.key"} and bundle == {"ca.crt": ca["ca.crt"]}
        assert server["ca.crt"] == ca["ca.crt"]
        now = dt.datetime.now(dt.UTC)
        issued = Pem(server["tls.crt"], server["tls.key"])
        assert (
            certificates.reissue_reason(issued, Pem(ca["ca.crt"], ca["ca.key"]), names_for(ns), now) is None
        )
        assert mounted_secret(k8s, ns) == {"sec-tls"}

        # resyncs keep every Secret as it is
        versions = {
            n: secret(k8s, ns, n)["metadata"]["resourceVersion"] for n in ("sec-ca", "sec-ca-cert", "sec-tls")
        }  # type: ignore[index]
        time.sleep(3 * RESYNC_S + 1)
        assert versions == {n: secret(k8s, ns, n)["metadata"]["resourceVersion"] for n in versions}  # type: ignore[index]

        # a deleted server certificate is issued again from the same CA
        k8s.kubectl("delete", "secret", "sec-tls", "-n", ns)
        k8s.wait_for("sec-tls re-issued", lambda: secret(k8s, ns, "sec-tls") is not None)
        again = data(k8s, ns, "sec-tls")
        assert again["tls.crt"] != server["tls.crt"] and again["ca.crt"] == ca["ca.crt"]

        # a deleted CA: a new one, a new server certificate, clients trusting both for now
        k8s.kubectl("delete", "secret", "sec-ca", "-n", ns)
        k8s.wait_for("a new CA", lambda: secret(k8s, ns, "sec-ca") is not None)
        new_ca = data(k8s, ns, "sec-ca")["ca.crt"]
        assert new_ca != ca["ca.crt"]
        k8s.wait_for(
            "the bundle of both CAs", lambda: data(k8s, ns, "sec-ca-cert")["ca.crt"] == new_ca + ca["ca.crt"]
        )
        rotated = data(k8s, ns, "sec-tls")
        assert rotated["ca.crt"] == new_ca + ca["ca.crt"]
        assert certificates.signed_by(
            certificates.certificates(rotated["tls.crt"], "tls.crt")[0],
            certificates.certificates(new_ca, "ca.crt")[0],
        )
        reasons = {e["reason"] for e in k8s.get_json("events", "-n", ns)["items"]}
        assert {"CertificateAuthorityCreated", "CertificateIssued"} <= reasons


def test_a_users_secret_is_checked_before_anything_is_applied(
    k8s_cluster: K8sCluster, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    k8s, ns = k8s_cluster, namespace
    monkeypatch.setenv("KUBECONFIG", str(k8s.kubeconfig))
    install_crds(k8s)
    now = dt.datetime.now(dt.UTC)
    ca = certificates.new_ca("corp CA", now)
    good = certificates.issue_server(ca, names_for(ns), now)
    other = certificates.issue_server(ca, names_for(ns), now)
    with running_operator(ns):
        k8s.apply(
            cluster_cr(CLUSTER, **SPEC, security={"tls": {"enabled": True, "secretName": "corp"}}),
            namespace=ns,
        )
        body = wait_condition(k8s, ns, "orbitmqclusters", CLUSTER, "Ready", "False", "SecretNotFound")
        message = condition(body, "Degraded")["message"]
        assert f"Secret {ns}/corp (spec.security.tls.secretName) does not exist" in message, message
        assert children(k8s, ns, CLUSTER) == {}, "nothing applied without the certificate"

        k8s.apply(user_secret(ns, "corp", {"tls.crt": good.cert, "tls.key": other.key, "ca.crt": ca.cert}))
        body = wait_condition(k8s, ns, "orbitmqclusters", CLUSTER, "Ready", "False", "InvalidSecret")
        assert "tls.key does not match the certificate in tls.crt" in condition(body, "Degraded")["message"]

        k8s.apply(user_secret(ns, "corp", {"tls.crt": good.cert, "tls.key": good.key, "ca.crt": ca.cert}))
        wait_condition(k8s, ns, "orbitmqclusters", CLUSTER, "Ready", "False", "BrokersNotReady")
        assert mounted_secret(k8s, ns) == {"corp"}
        assert data(k8s, ns, "sec-ca-cert") == {"ca.crt": ca.cert}, "clients find the CA where they always do"
        assert secret(k8s, ns, "sec-ca") is None and secret(k8s, ns, "sec-tls") is None


def test_an_issuer_gets_a_certificate_and_the_cluster_waits_for_its_secret(
    k8s_cluster: K8sCluster, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    k8s, ns = k8s_cluster, namespace
    monkeypatch.setenv("KUBECONFIG", str(k8s.kubeconfig))
    install_crds(k8s)
    k8s.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(CERT_MANAGER_CRD))
    k8s.kubectl("wait", "--for=condition=Established", "crd/certificates.cert-manager.io", "--timeout=60s")
    issuer = {"name": "corp-ca", "kind": "ClusterIssuer"}
    with running_operator(ns):
        k8s.apply(
            cluster_cr(CLUSTER, **SPEC, security={"tls": {"enabled": True, "issuer": issuer}}), namespace=ns
        )
        body = wait_condition(
            k8s, ns, "orbitmqclusters", CLUSTER, "Progressing", "True", "CertificatePending"
        )
        assert condition(body, "Ready")["status"] == "False"
        assert "waiting for cert-manager to issue Secret" in condition(body, "Ready")["message"]
        certificate = k8s.get_json("certificates.cert-manager.io", "sec-tls", "-n", ns)
        assert certificate["spec"]["issuerRef"] == {**issuer, "group": "cert-manager.io"}
        assert certificate["spec"]["secretName"] == "sec-tls"
        assert sorted(certificate["spec"]["dnsNames"] + certificate["spec"]["ipAddresses"]) == sorted(
            names_for(ns)
        )
        assert children(k8s, ns, CLUSTER) == {}, "no pod waits on a Secret that is not there"

        # what cert-manager writes once the issuer signed it
        now = dt.datetime.now(dt.UTC)
        ca = certificates.new_ca("corp CA", now)
        issued = certificates.issue_server(ca, names_for(ns), now)
        k8s.apply(
            user_secret(ns, "sec-tls", {"tls.crt": issued.cert, "tls.key": issued.key, "ca.crt": ca.cert})
        )
        wait_condition(k8s, ns, "orbitmqclusters", CLUSTER, "Ready", "False", "BrokersNotReady")
        assert mounted_secret(k8s, ns) == {"sec-tls"}
        assert data(k8s, ns, "sec-ca-cert") == {"ca.crt": ca.cert}
        assert secret(k8s, ns, "sec-ca") is None, "no CA of the operator's own with an issuer"


def test_the_api_server_refuses_what_tls_cannot_do(k8s_cluster: K8sCluster, namespace: str) -> None:
    """Both CEL rules of spec.security.tls, enforced by the API server itself."""
    k8s, ns = k8s_cluster, namespace
    install_crds(k8s)
    both = {"enabled": True, "secretName": "corp", "issuer": {"name": "ca", "kind": "Issuer"}}
    refused = k8s.kubectl(
        "apply",
        "-n",
        ns,
        "-f",
        "-",
        input=json.dumps(cluster_cr("both", security={"tls": both})),
        check=False,
    )
    assert refused.returncode != 0
    assert "issuer and secretName are exclusive" in refused.stderr, refused.stderr

    k8s.apply(cluster_cr("plain", security={"tls": {"enabled": False}}), namespace=ns)
    patch = json.dumps({"spec": {"security": {"tls": {"enabled": True}}}})
    turned = k8s.kubectl(
        "patch", "orbitmqcluster", "plain", "-n", ns, "--type=merge", "-p", patch, check=False
    )
    assert turned.returncode != 0
    assert "security.tls.enabled cannot be changed once set" in turned.stderr, turned.stderr
