"""The operator's own certificate authority: making a cluster's CA and server certificate,
deciding when one must be made again, and checking certificates given by others.

Pure functions of PEM text and the time (``cryptography``, no API calls), so every decision is
unit-tested; :mod:`orbitmq_operator.reconcile.certificates` keeps the results in Secrets.

* **The CA** (``<cluster>-ca``: ``ca.crt``, ``ca.key``) is valid :data:`CA_VALIDITY` and made
  again when a third of that is left (or when its Secret is deleted or unusable). Clients trust
  the bundle in ``<cluster>-ca-cert`` (``ca.crt``): the current CA and the one before it while
  that one is still valid, so a client given either keeps connecting across a rotation.
* **The server certificate** (``<cluster>-tls``: ``tls.crt``, ``tls.key``, ``ca.crt``, one for
  every pod of the cluster) is valid :data:`SERVER_VALIDITY` and made again when a third of
  that is left, when it was not signed by the current CA's key, or when the names it must hold
  changed (broker groups added). Its usages are server *and* client authentication: servers
  present it when they call each other (a broker registering, a slave replicating), which a
  mutual-TLS cluster checks like any client's.

Keys are ECDSA P-256: small, quick to make and to handshake with.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY = dt.timedelta(days=5 * 365)
SERVER_VALIDITY = dt.timedelta(days=90)
RENEW_FRACTION = 1 / 3
"""A certificate is made again when less than this part of its validity is left (cert-manager's
default ``renewBefore``): a 90-day certificate 30 days before it expires."""
CLOCK_SKEW = dt.timedelta(minutes=5)
"""``notBefore`` is set this far in the past: a node whose clock is a little behind still
accepts a certificate made just now."""


class CertificateProblem(ValueError):
    """A certificate or key that cannot be used; the message names what and why."""


@dataclass(frozen=True)
class Pem:
    """A certificate (or a bundle of them) and its private key, PEM text."""

    cert: str
    key: str


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=ca,
        crl_sign=ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def new_ca(common_name: str, now: dt.datetime) -> Pem:
    """A self-signed CA named ``common_name`` (``orbitmq <namespace>/<cluster> CA``)."""
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Pem(_cert_pem(cert), _key_pem(key))


def _alternative_names(names: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def issue_server(ca: Pem, names: Sequence[str], now: dt.datetime) -> Pem:
    """A certificate for ``names`` (DNS names, wildcards, IP addresses) signed by ``ca``."""
    ca_cert, ca_key = load_ca(ca)
    key = _key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + SERVER_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(ca=False), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(_alternative_names(names)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return Pem(_cert_pem(cert), _key_pem(key))


# -- reading and checking ---------------------------------------------------------------------


def certificates(pem: str, what: str) -> list[x509.Certificate]:
    """Every certificate of a PEM text (a bundle); :class:`CertificateProblem` when none."""
    try:
        found = x509.load_pem_x509_certificates(pem.encode())
    except ValueError as error:
        raise CertificateProblem(f"{what} is not a PEM certificate ({error})") from None
    if not found:
        raise CertificateProblem(f"{what} holds no certificate")
    return found


def private_key(pem: str, what: str) -> ec.EllipticCurvePrivateKey | object:
    try:
        return serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError) as error:
        raise CertificateProblem(f"{what} is not an unencrypted PEM private key ({error})") from None


def _public_bytes(key: object) -> bytes:
    return key.public_bytes(  # type: ignore[attr-defined, no-any-return]
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def key_matches(cert: x509.Certificate, key: object) -> bool:
    return _public_bytes(cert.public_key()) == _public_bytes(key.public_key())  # type: ignore[attr-defined]


def load_ca(ca: Pem) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA's certificate and key, checked: a CA certificate, and the key is its own."""
    cert = certificates(ca.cert, "ca.crt")[0]
    key = private_key(ca.key, "ca.key")
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertificateProblem("ca.key must be an ECDSA key (the operator makes P-256 keys)")
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise CertificateProblem("ca.crt is not a CA certificate (basicConstraints CA:TRUE)")
    if not key_matches(cert, key):
        raise CertificateProblem("ca.key does not match the certificate in ca.crt")
    return cert, key


def due(cert: x509.Certificate, now: dt.datetime) -> bool:
    """Whether ``cert`` is expired or within :data:`RENEW_FRACTION` of its end."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return now >= end - (end - start) * RENEW_FRACTION


def names_of(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [*san.get_values_for_type(x509.DNSName), *map(str, san.get_values_for_type(x509.IPAddress))]


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def reissue_reason(server: Pem | None, ca: Pem, names: Sequence[str], now: dt.datetime) -> str | None:
    """Why the server certificate must be made again (None: it is good as it is)."""
    if server is None:
        return "no server certificate yet"
    try:
        cert = certificates(server.cert, "tls.crt")[0]
        key = private_key(server.key, "tls.key")
    except CertificateProblem as problem:
        return str(problem)
    if not key_matches(cert, key):
        return "tls.key does not match tls.crt"
    if not signed_by(cert, certificates(ca.cert, "ca.crt")[0]):
        return "it was signed by another CA"
    if sorted(names_of(cert)) != sorted(names):
        return "the names it must hold changed"
    if due(cert, now):
        return f"it expires at {cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
    return None


def trust_bundle(current_ca: str, previous_bundle: str | None, now: dt.datetime) -> str:
    """``ca.crt`` for clients: the current CA, then the newest other CA of the previous bundle
    that is still valid (one rotation of overlap; deleting ``<cluster>-ca-cert`` too drops it)."""
    current = certificates(current_ca, "ca.crt")[0]
    out = [current]
    if previous_bundle:
        try:
            previous = certificates(previous_bundle, "the previous ca.crt")
        except CertificateProblem:
            previous = []
        others = [
            c
            for c in previous
            if c.fingerprint(hashes.SHA256()) != current.fingerprint(hashes.SHA256())
            and c.not_valid_after_utc > now
        ]
        out += sorted(others, key=lambda c: c.not_valid_before_utc, reverse=True)[:1]
    return "".join(map(_cert_pem, out))


def check_server_secret(cert_pem: str, key_pem: str, ca_pem: str, now: dt.datetime) -> None:
    """A server certificate someone else made (``secretName``, cert-manager): usable as it is,
    or :class:`CertificateProblem` naming the key and the rule."""
    chain = certificates(cert_pem, "tls.crt")
    cert, key = chain[0], private_key(key_pem, "tls.key")
    if not key_matches(cert, key):
        raise CertificateProblem("tls.key does not match the certificate in tls.crt")
    if cert.not_valid_after_utc <= now:
        raise CertificateProblem(f"tls.crt expired at {cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}")
    cas = certificates(ca_pem, "ca.crt")
    # the certificate, or the last intermediate its chain carries, is issued by a CA of ca.crt
    if not any(signed_by(chain[-1], ca) or signed_by(cert, ca) for ca in cas):
        raise CertificateProblem(
            "tls.crt is not signed by a CA in ca.crt (clients given ca.crt would refuse it)"
        )
