"""The operator's own CA (builders/certificates.py): certificates that real TLS handshakes accept
for the names the pods are dialled by, renewal decisions, the clients' trust bundle across a CA
rotation, and certificates from elsewhere refused naming what is wrong.

Handshakes run OpenSSL (Python's ssl) over memory buffers: the same checks a gRPC client makes
(chain to a trusted CA, the name, the validity), without a socket."""

from __future__ import annotations

import datetime as dt
import re
import ssl
from pathlib import Path

import pytest

from orbitmq_operator.builders import Cluster, certificates, tls
from orbitmq_operator.builders.certificates import CertificateProblem, Pem
from orbitmq_operator.spec import ClusterSpec

NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
CLUSTER = Cluster(
    "orbit", "mq", "uid", ClusterSpec.model_validate({"image": "x", "security": {"tls": {"enabled": True}}})
)
NAMES = tls.server_names(CLUSTER)


def _files(tmp: Path, stem: str, pem: Pem) -> tuple[str, str]:
    cert, key = tmp / f"{stem}.crt", tmp / f"{stem}.key"
    cert.write_text(pem.cert)
    key.write_text(pem.key)
    return str(cert), str(key)


def handshake(
    tmp: Path, server: Pem, trusted: str, host: str, client: Pem | None = None, require_client: bool = False
) -> None:
    """One TLS 1.3 handshake in memory; raises ``ssl.SSLError`` as a client or server would."""
    (tmp / "trusted.crt").write_text(trusted)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(*_files(tmp, "server", server))
    if require_client:
        server_context.verify_mode = ssl.CERT_REQUIRED
        server_context.load_verify_locations(str(tmp / "trusted.crt"))
    client_context = ssl.create_default_context(cafile=str(tmp / "trusted.crt"))
    if client is not None:
        client_context.load_cert_chain(*_files(tmp, "client", client))
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_side = client_context.wrap_bio(to_client, to_server, server_hostname=host)
    server_side = server_context.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(10):
        for name, side in (("client", client_side), ("server", server_side)):
            if done[name]:
                continue
            try:
                side.do_handshake()
                done[name] = True
            except ssl.SSLWantReadError:
                pass
        s_in.write(to_server.read())
        to_client.write(s_out.read())
        if all(done.values()):
            # TLS 1.3: the server checks a client certificate after the client thinks it is done
            client_side.write(b"x")
            s_in.write(to_server.read())
            server_side.read(1)
            return
    raise AssertionError("the handshake did not finish")


@pytest.fixture
def ca() -> Pem:
    return certificates.new_ca("orbitmq mq/orbit CA", NOW)


def test_the_server_certificate_is_accepted_for_every_dialled_name(ca: Pem, tmp_path: Path) -> None:
    server = certificates.issue_server(ca, NAMES, dt.datetime.now(dt.UTC))
    for host in (
        "orbit-namesrv.mq.svc",
        "orbit-namesrv-1.orbit-namesrv-headless.mq.svc",
        "orbit-broker-3-1.orbit-broker-3.mq.svc",
        "orbit-proxy",
        "localhost",
    ):
        handshake(tmp_path, server, ca.cert, host)
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        handshake(tmp_path, server, ca.cert, "orbit-broker-0-0.orbit-broker-0.other.svc")


def test_another_ca_is_refused(ca: Pem, tmp_path: Path) -> None:
    server = certificates.issue_server(ca, NAMES, dt.datetime.now(dt.UTC))
    other = certificates.new_ca("other", NOW)
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        handshake(tmp_path, server, other.cert, "orbit-namesrv.mq.svc")


def test_the_server_certificate_also_serves_as_a_client_certificate(ca: Pem, tmp_path: Path) -> None:
    """Servers present it when they call each other (mutual TLS): clientAuth is among its usages."""
    now = dt.datetime.now(dt.UTC)
    server = certificates.issue_server(ca, NAMES, now)
    handshake(tmp_path, server, ca.cert, "localhost", client=server, require_client=True)
    stranger = certificates.issue_server(certificates.new_ca("stranger", now), NAMES, now)
    with pytest.raises(ssl.SSLError):
        handshake(tmp_path, server, ca.cert, "localhost", client=stranger, require_client=True)


def test_reissue_reasons(ca: Pem) -> None:
    server = certificates.issue_server(ca, NAMES, NOW)
    assert certificates.reissue_reason(server, ca, NAMES, NOW) is None
    assert certificates.reissue_reason(server, ca, list(reversed(NAMES)), NOW) is None, "order is no change"
    assert certificates.reissue_reason(None, ca, NAMES, NOW) == "no server certificate yet"
    assert certificates.reissue_reason(server, ca, NAMES[:-1], NOW) == "the names it must hold changed"
    rotated = certificates.new_ca("orbitmq mq/orbit CA", NOW)
    assert certificates.reissue_reason(server, rotated, NAMES, NOW) == "it was signed by another CA"
    # 90 days, renewed when 30 are left
    assert certificates.reissue_reason(server, ca, NAMES, NOW + dt.timedelta(days=59)) is None
    assert "expires at 2027-02-24" in str(
        certificates.reissue_reason(server, ca, NAMES, NOW + dt.timedelta(days=61))
    )
    mismatched = Pem(server.cert, certificates.issue_server(ca, NAMES, NOW).key)
    assert certificates.reissue_reason(mismatched, ca, NAMES, NOW) == "tls.key does not match tls.crt"
    assert "not a PEM certificate" in str(
        certificates.reissue_reason(Pem("junk", server.key), ca, NAMES, NOW)
    )


def test_the_ca_is_renewed_a_third_before_its_end(ca: Pem) -> None:
    cert, _ = certificates.load_ca(ca)
    assert not certificates.due(cert, NOW + dt.timedelta(days=3 * 365))
    assert certificates.due(cert, NOW + dt.timedelta(days=4 * 365))


def test_trust_bundle_keeps_the_previous_ca_for_one_rotation(ca: Pem, tmp_path: Path) -> None:
    first = certificates.trust_bundle(ca.cert, None, NOW)
    assert first == ca.cert
    assert certificates.trust_bundle(ca.cert, first, NOW) == ca.cert, "the current CA is not doubled"
    second = certificates.new_ca("orbitmq mq/orbit CA", NOW + dt.timedelta(hours=1))
    overlap = certificates.trust_bundle(second.cert, first, NOW)
    assert overlap == second.cert + ca.cert
    # a client holding the overlap bundle accepts servers of either CA
    now = dt.datetime.now(dt.UTC)
    for issuer in (ca, second):
        handshake(tmp_path, certificates.issue_server(issuer, NAMES, now), overlap, "orbit-namesrv.mq.svc")
    third = certificates.new_ca("orbitmq mq/orbit CA", NOW + dt.timedelta(hours=2))
    assert certificates.trust_bundle(third.cert, overlap, NOW) == third.cert + second.cert, (
        "one rotation only"
    )
    assert certificates.trust_bundle(second.cert, first, NOW + dt.timedelta(days=6 * 365)) == second.cert, (
        "an expired previous CA is dropped"
    )
    assert certificates.trust_bundle(second.cert, "junk", NOW) == second.cert


def test_an_unusable_ca_is_refused_naming_why(ca: Pem) -> None:
    other = certificates.new_ca("other", NOW)
    with pytest.raises(
        CertificateProblem, match=re.escape("ca.key does not match the certificate in ca.crt")
    ):
        certificates.load_ca(Pem(ca.cert, other.key))
    server = certificates.issue_server(ca, NAMES, NOW)
    with pytest.raises(CertificateProblem, match="not a CA certificate"):
        certificates.load_ca(server)
    with pytest.raises(CertificateProblem, match=re.escape("ca.crt is not a PEM certificate")):
        certificates.load_ca(Pem("nothing", ca.key))


def test_a_given_server_secret_is_checked(ca: Pem) -> None:
    server = certificates.issue_server(ca, NAMES, NOW)
    certificates.check_server_secret(server.cert, server.key, ca.cert, NOW)
    certificates.check_server_secret(
        server.cert, server.key, certificates.new_ca("x", NOW).cert + ca.cert, NOW
    )
    other = certificates.issue_server(ca, NAMES, NOW)
    with pytest.raises(
        CertificateProblem, match=re.escape("tls.key does not match the certificate in tls.crt")
    ):
        certificates.check_server_secret(server.cert, other.key, ca.cert, NOW)
    with pytest.raises(CertificateProblem, match=re.escape("tls.crt expired at 2027-02-24")):
        certificates.check_server_secret(server.cert, server.key, ca.cert, NOW + dt.timedelta(days=91))
    with pytest.raises(CertificateProblem, match=re.escape("not signed by a CA in ca.crt")):
        certificates.check_server_secret(server.cert, server.key, certificates.new_ca("x", NOW).cert, NOW)
    with pytest.raises(CertificateProblem, match=re.escape("tls.key is not an unencrypted PEM private key")):
        certificates.check_server_secret(server.cert, "nope", ca.cert, NOW)
