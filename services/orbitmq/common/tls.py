"""TLS for every orbitmq connection: settings, server and channel credentials, and causes.

TLS is off unless a certificate (server) or a CA (client) is configured, so nothing changes for
a plaintext deployment. The same three PEM files serve both sides of a process: a name server or
broker serves with ``tls_cert``/``tls_key`` and, when it calls another process (a broker
registering with its name servers), presents the same pair and trusts ``tls_ca``.

Rotation: a server's credentials come from :func:`grpc.dynamic_ssl_server_credentials`, whose
fetcher gRPC calls before every handshake. :class:`CertificateReloader` answers with a ``stat``
of the three files and re-reads them only when one changed (a Kubernetes Secret swaps its
symlink), so new connections get the new certificate at once and established ones keep the
handshake they made. A half-written pair (a key that no longer matches) is ignored until it
matches again.

Causes: gRPC reports every failed handshake as UNAVAILABLE, and for two of them (a plaintext
client at a TLS port, a client without the certificate a mutual-TLS server requires) only as
"Socket closed". :func:`explain` turns such a failure into a :class:`TlsError` that names the
cause, with one handshake of Python's :mod:`ssl` against the same address when gRPC's words do
not tell (a few milliseconds, and only after a call failed this way).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from orbitmq.common.errors import OrbitError
from orbitmq.common.rpc import RpcFailure
from orbitmq.v1.broker_pb2 import ErrorReason

log = logging.getLogger(__name__)

ENV_CA = "ORBITMQ_TLS_CA"
ENV_CERT = "ORBITMQ_TLS_CERT"
ENV_KEY = "ORBITMQ_TLS_KEY"
ENV_SERVER_NAME = "ORBITMQ_TLS_SERVER_NAME"
CLIENT_ENV = {"tls_ca": ENV_CA, "tls_cert": ENV_CERT, "tls_key": ENV_KEY, "tls_server_name": ENV_SERVER_NAME}
"""Client TLS settings by field, and the environment variable each is read from."""

PROBE_TIMEOUT_S = 1.0
"""How long :func:`diagnose` waits for its connection and handshake: a live server answers
in milliseconds; one that does not within a second is not failing at the TLS layer."""
PROBE_READ_S = 0.5
"""After a handshake, how long the probe waits for the server's first bytes (a gRPC server
sends its HTTP/2 settings at once) before taking the connection as accepted."""

_HANDSHAKE_WORDS = ("Socket closed", "handshake", "Handshake", "SSL", "Ssl", "TSI_", "Hostname Verification")
"""Words of gRPC's details that may come from a failed handshake (anything else, such as
"Connection refused" or a deadline, is not worth a probe)."""

_BEGIN_CERT = "-----BEGIN CERTIFICATE-----"
_BEGIN_KEY = (
    "-----BEGIN PRIVATE KEY-----",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----BEGIN EC PRIVATE KEY-----",
)


class TlsError(RpcFailure):
    """A connection refused at the TLS layer; the message names the address and the cause.

    Not retriable: a wrong CA, an expired certificate or a missing client certificate fails the
    same way until someone changes a file or a flag. An :class:`RpcFailure` with the reason
    NO_PERMISSION (the server does not let this client in), so every path that handles a failed
    call (a producer's send, the CLI's one-line errors) handles it as one.
    """

    def __init__(self, message: str) -> None:
        super().__init__(ErrorReason.NO_PERMISSION, message)


# -- settings -------------------------------------------------------------------------------


def _read_pem(path: Path, field: str, begins: tuple[str, ...], what: str) -> str:
    try:
        text = path.expanduser().read_text()
    except OSError as error:
        raise ValueError(f"{field} {path}: cannot read the file ({error.strerror})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{field} {path}: must be a PEM file ({what}), not binary (DER)") from None
    if not any(begin in text for begin in begins):
        raise ValueError(f"{field} {path}: must be a PEM file holding {what} ('{begins[0]}')")
    return text


class TlsFiles(BaseModel):
    """The PEM files of one process's TLS: its certificate and key, and the CA it trusts.

    Checked at load: each file is readable PEM of the right kind, a certificate comes with its
    key and the key matches it; a bad one is refused naming the field and the rule.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tls_cert: Path | None = None
    """This process's certificate chain (PEM); a server with one serves TLS only."""
    tls_key: Path | None = Field(default=None, validate_default=True)
    """The private key of ``tls_cert`` (PEM, unencrypted)."""
    tls_ca: Path | None = None
    """CA certificates (PEM) trusted to sign the other side: servers for a client, client
    certificates for a server that requires them. A client with none trusts the system's CAs."""

    @field_validator("tls_cert")
    @classmethod
    def _check_cert(cls, value: Path | None) -> Path | None:
        if value is not None:
            _read_pem(value, "tls_cert", (_BEGIN_CERT,), "a certificate")
            return value.expanduser()
        return value

    @field_validator("tls_ca")
    @classmethod
    def _check_ca(cls, value: Path | None) -> Path | None:
        if value is None:
            return value
        _read_pem(value, "tls_ca", (_BEGIN_CERT,), "CA certificates")
        try:
            ssl.create_default_context(cafile=str(value.expanduser()))
        except ssl.SSLError as error:
            raise ValueError(f"tls_ca {value}: not a readable PEM certificate ({error.reason})") from None
        return value.expanduser()

    @field_validator("tls_key")
    @classmethod
    def _check_key(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        cert = info.data.get("tls_cert")
        if value is None:
            if cert is not None:
                raise ValueError("tls_key must be given with tls_cert (the certificate's private key)")
            return value
        if cert is None:
            if "tls_cert" in info.data:  # tls_cert itself was valid, and missing
                raise ValueError("tls_key needs tls_cert (the certificate this key belongs to)")
            return value
        _read_pem(value, "tls_key", _BEGIN_KEY, "an unencrypted private key")
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                str(cert), str(value.expanduser())
            )
        except ssl.SSLError as error:
            if error.reason == "KEY_VALUES_MISMATCH":
                raise ValueError(
                    f"tls_key {value} does not match the certificate in tls_cert {cert}"
                ) from None
            raise ValueError(
                f"tls_key {value} cannot be used with tls_cert {cert} ({error.reason})"
            ) from None
        return value.expanduser()

    @property
    def client_enabled(self) -> bool:
        """Whether this process's outgoing connections use TLS (any of the files is set)."""
        return self.tls_cert is not None or self.tls_ca is not None


class ServerTls(TlsFiles):
    """TLS settings of a serving process (name server, broker): mixed into their settings, so
    ``--tls-cert``, ``ORBITMQ_BROKER_TLS_CERT`` and a config file's ``tls_cert`` all work."""

    tls_require_client_cert: bool = Field(default=False, validate_default=True)
    """Mutual TLS: refuse clients without a certificate signed by ``tls_ca``."""

    @field_validator("tls_require_client_cert")
    @classmethod
    def _check_require(cls, value: bool, info: ValidationInfo) -> bool:
        if value and ("tls_cert" in info.data and info.data["tls_cert"] is None):
            raise ValueError("tls_require_client_cert needs tls_cert and tls_key (the server's own TLS)")
        if value and ("tls_ca" in info.data and info.data["tls_ca"] is None):
            raise ValueError("tls_require_client_cert needs tls_ca (the CA that signs client certificates)")
        return value


class ClientTls(TlsFiles):
    """TLS of a client: the library reads it from ``ORBITMQ_TLS_*`` unless given one."""

    tls_server_name: str | None = None
    """Check the server's certificate for this name instead of the address's host (a server
    reached through an IP or a tunnel); off unless asked, as it weakens the name check."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ClientTls:
        """``ORBITMQ_TLS_CA``, ``_CERT``, ``_KEY``, ``_SERVER_NAME``; a bad value raises
        :class:`TlsConfigError` naming the variable and the rule."""
        environ = os.environ if environ is None else environ
        values = {field: environ[name] for field, name in CLIENT_ENV.items() if environ.get(name)}
        return client_tls(values, CLIENT_ENV)


class TlsConfigError(OrbitError, ValueError):
    """TLS settings that cannot be used; the message names the setting and the rule."""


def client_tls(values: Mapping[str, Any], names: Mapping[str, str]) -> ClientTls:
    """A validated :class:`ClientTls`; an error names each bad setting as ``names`` calls it
    (an environment variable, a flag)."""
    from pydantic import ValidationError

    try:
        return ClientTls(**values)
    except ValidationError as error:
        problems = []
        for issue in error.errors():
            field = str(issue["loc"][0]) if issue["loc"] else ""
            problems.append(f"{names.get(field, field)}: {str(issue['msg']).removeprefix('Value error, ')}")
        raise TlsConfigError("invalid TLS settings: " + "; ".join(problems)) from None


# -- server side ----------------------------------------------------------------------------


class CertificateReloader:
    """gRPC's certificate-configuration fetcher: the files' configuration when they changed.

    Called by gRPC before each handshake (on one of its threads), so it must be cheap: a
    ``stat`` of each file, and a read only when a size or modification time differs. None tells
    gRPC to keep what it has.
    """

    def __init__(self, tls: ServerTls) -> None:
        self._tls = tls
        self._seen = self._signature()
        self._rejected: tuple[tuple[int, int, int], ...] = ()
        self.configuration = self._load()
        self.reloads = 0
        """How many times a changed set of files was taken (for logs and tests)."""

    def _paths(self) -> list[Path]:
        return [path for path in (self._tls.tls_cert, self._tls.tls_key, self._tls.tls_ca) if path]

    def _signature(self) -> tuple[tuple[int, int, int], ...]:
        signature = []
        for path in self._paths():
            try:
                status = path.stat()
            except OSError:
                return ()  # a file missing mid-rotation: try again at the next handshake
            signature.append((status.st_mtime_ns, status.st_size, status.st_ino))
        return tuple(signature)

    def _load(self) -> Any:
        tls = self._tls
        assert tls.tls_cert is not None and tls.tls_key is not None
        cert, key = tls.tls_cert.read_bytes(), tls.tls_key.read_bytes()
        ca = tls.tls_ca.read_bytes() if tls.tls_ca else None
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def __call__(self) -> Any:
        signature = self._signature()
        if not signature or signature in (self._seen, self._rejected):
            return None
        try:
            TlsFiles(tls_cert=self._tls.tls_cert, tls_key=self._tls.tls_key, tls_ca=self._tls.tls_ca)
            configuration = self._load()
        except (ValueError, OSError) as error:
            # Logged once per state of the files; the next change is looked at again.
            self._rejected = signature
            log.warning("TLS files changed but cannot be used yet, keeping the old ones: %s", error)
            return None
        self._seen = signature
        self.configuration = configuration
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", self._tls.tls_cert)
        return configuration


def server_credentials(tls: ServerTls) -> tuple[grpc.ServerCredentials, CertificateReloader] | None:
    """Credentials that re-read the files when they change, or None without ``tls_cert``."""
    if tls.tls_cert is None:
        return None
    reloader = CertificateReloader(tls)
    credentials = grpc.dynamic_ssl_server_credentials(
        reloader.configuration, reloader, require_client_authentication=tls.tls_require_client_cert
    )
    return credentials, reloader


# -- client side ----------------------------------------------------------------------------


def channel_credentials(tls: TlsFiles) -> grpc.ChannelCredentials | None:
    """Credentials for a channel, or None when this side speaks plaintext."""
    if not tls.client_enabled:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=tls.tls_ca.read_bytes() if tls.tls_ca else None,
        private_key=tls.tls_key.read_bytes() if tls.tls_key else None,
        certificate_chain=tls.tls_cert.read_bytes() if tls.tls_cert else None,
    )


def open_channel(address: str, tls: TlsFiles | None, options: list[tuple[str, Any]]) -> grpc.aio.Channel:
    """A channel to ``address``: secure with ``tls``'s credentials, else plaintext."""
    credentials = channel_credentials(tls) if tls is not None else None
    if credentials is None:
        return grpc.aio.insecure_channel(address, options=options)
    server_name = getattr(tls, "tls_server_name", None)
    if server_name:
        options = [*options, ("grpc.ssl_target_name_override", server_name)]
    return grpc.aio.secure_channel(address, credentials, options=options)


# -- causes ---------------------------------------------------------------------------------


def may_be_handshake(error: BaseException) -> bool:
    """Whether ``error`` is a failed call that a TLS handshake may explain."""
    if not isinstance(error, grpc.aio.AioRpcError) or error.code() is not grpc.StatusCode.UNAVAILABLE:
        return False
    details = error.details() or ""
    return any(word in details for word in _HANDSHAKE_WORDS)


async def explain(error: BaseException, address: str, tls: TlsFiles | None) -> TlsError | None:
    """A :class:`TlsError` naming why ``error`` happened, if a TLS handshake is the cause."""
    if not may_be_handshake(error):
        return None
    cause = await diagnose(address, tls)
    return TlsError(f"TLS connection to {address} failed: {cause}") if cause else None


def _client_context(tls: TlsFiles | None) -> ssl.SSLContext:
    if tls is None or not tls.client_enabled:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(cafile=str(tls.tls_ca) if tls.tls_ca else None)
        if tls.tls_cert and tls.tls_key:
            context.load_cert_chain(str(tls.tls_cert), str(tls.tls_key))
    context.set_alpn_protocols(["h2"])
    return context


def _verify_cause(error: ssl.SSLCertVerificationError, address: str, tls: TlsFiles, name: str) -> str:
    code, message = error.verify_code, error.verify_message
    if code == 10:
        return f"the server's certificate has expired ({message}); the server needs a renewed one"
    if code == 9:
        return f"the server's certificate is not valid yet ({message}); check the clocks"
    if code in (2, 18, 19, 20, 21):
        trusted = (
            f"--tls-ca / {ENV_CA} ({tls.tls_ca})" if tls.tls_ca else "the system's CAs (no --tls-ca given)"
        )
        return f"the server's certificate is not signed by a CA in {trusted}: {message} (wrong CA)"
    if code in (62, 64):
        return (
            f"the server's certificate does not name {name!r} (name mismatch: {message}); connect by a "
            f"name the certificate holds, or check it for another with --tls-server-name / {ENV_SERVER_NAME}"
        )
    return f"the server's certificate was refused: {message}"


async def diagnose(address: str, tls: TlsFiles | None) -> str | None:
    """Why a TLS connection to ``address`` fails, found with one handshake of Python's ssl
    configured as ``tls`` is; None when the handshake is not what fails."""
    from orbitmq.common.server import split_host_port

    host, port = split_host_port(address)
    name = getattr(tls, "tls_server_name", None) or host
    secure = tls is not None and tls.client_enabled
    try:
        context = _client_context(tls)
    except (OSError, ssl.SSLError) as error:
        return f"the client's TLS files cannot be loaded: {error}"
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=context, server_hostname=name), PROBE_TIMEOUT_S
        )
    except ssl.SSLCertVerificationError as error:
        assert tls is not None
        return _verify_cause(error, address, tls, name)
    except ssl.SSLError as error:
        if secure and error.reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "RECORD_LAYER_FAILURE"):
            return "the server speaks plaintext, not TLS (is it started with --tls-cert?), or drop --tls-ca"
        return f"TLS handshake failed: {error.reason or error}" if secure else None
    except (OSError, TimeoutError):
        return None
    try:
        first = await asyncio.wait_for(reader.read(1), PROBE_READ_S)
    except (OSError, TimeoutError):
        first = b"?"  # still open: the server took the handshake
    finally:
        writer.close()
    if not secure:
        return f"the server speaks TLS and this client plaintext: give the CA with --tls-ca or {ENV_CA}"
    if first:
        return None
    if tls is not None and tls.tls_cert is None:
        return (
            "the server requires a client certificate (mutual TLS) and none was given: "
            f"set --tls-cert and --tls-key (or {ENV_CERT} and {ENV_KEY})"
        )
    return "the server refused the client certificate (not signed by a CA it trusts, or expired)"
