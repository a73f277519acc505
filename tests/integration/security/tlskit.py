"""Real certificates made in the test (``cryptography``), and a TLS cluster in the test process.

A :class:`Pki` is one CA with files under a directory; :meth:`Pki.issue` writes a certificate
and key signed by it (a server's names, or a client's, expired or not), as an operator's
cert-manager would put them in a Secret.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from brokerkit import TEST_SETTINGS
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from orbitmq.broker.server import Broker
from orbitmq.broker.settings import BrokerSettings
from orbitmq.common.server import split_host_port
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings

SERVER_NAMES = ("localhost", "127.0.0.1")
"""What a test server's certificate names: the tests connect to 127.0.0.1."""


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path
    serial: int


class Pki:
    """A CA whose certificate is ``<root>/<name>-ca.pem``."""

    def __init__(self, root: Path, name: str = "test") -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.name = name
        self._key = _key()
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
        now = dt.datetime.now(dt.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.ca = root / f"{name}-ca.pem"
        self.ca.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        stem: str,
        names: tuple[str, ...] = SERVER_NAMES,
        *,
        expired: bool = False,
        into: Path | None = None,
    ) -> Issued:
        """``<stem>.pem`` and ``<stem>.key`` (under ``into``, default the CA's directory) for
        ``names`` (DNS names or IP addresses); ``expired`` ended yesterday."""
        key = _key()
        now = dt.datetime.now(dt.UTC)
        start, end = (
            (now - dt.timedelta(days=2), now - dt.timedelta(days=1))
            if expired
            else (now - dt.timedelta(hours=1), now + dt.timedelta(days=1))
        )
        alternatives: list[x509.GeneralName] = []
        for name in names:
            try:
                alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alternatives.append(x509.DNSName(name))
        serial = x509.random_serial_number()
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        folder = into or self.root
        folder.mkdir(parents=True, exist_ok=True)
        issued = Issued(folder / f"{stem}.pem", folder / f"{stem}.key", serial)
        _write_key(key, issued.key)
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return issued


def served_serial(address: str, ca: Path) -> int:
    """The serial number of the certificate a new TLS connection to ``address`` is shown
    (blocking: call in a thread)."""
    host, port = split_host_port(address)
    context = ssl.create_default_context(cafile=str(ca))
    with context.wrap_socket(
        socket.create_connection((host, port), timeout=5), server_hostname=host
    ) as connection:
        der = connection.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


@dataclass
class TlsCluster:
    """A name server and a broker serving TLS with certificates of one CA (mutual TLS optional)."""

    namesrv: NameServer
    broker: Broker
    pki: Pki
    server: Issued

    @property
    def address(self) -> str:
        return self.namesrv.address

    async def close(self) -> None:
        await self.broker.close()
        await self.namesrv.close()


async def start_tls_cluster(root: Path, *, mutual: bool = False) -> TlsCluster:
    """Both on free ports of 127.0.0.1, their certificate naming it; the broker registered."""
    pki = Pki(root / "pki")
    server = pki.issue("server")
    tls = {
        "tls_cert": server.cert,
        "tls_key": server.key,
        "tls_ca": pki.ca,
        "tls_require_client_cert": mutual,
    }
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None, **tls))
    await namesrv.start()
    settings = BrokerSettings(data_dir=root / "broker-a", namesrv=namesrv.address, **{**TEST_SETTINGS, **tls})
    broker = Broker(settings)
    try:
        await broker.start()
    except BaseException:
        await namesrv.close()
        raise
    return TlsCluster(namesrv, broker, pki, server)
