"""Request signatures: orbitmq's own for ``orbitmq.v1``, and RocketMQ 5's for the proxy.

Both carry the access key and an HMAC keyed by the user's secret in gRPC metadata, so the
secret never crosses the wire; a server finds the secret by access key and recomputes the HMAC.
Neither signs the request body: a gRPC server interceptor sees the method and the metadata, not
the message, and TLS is what keeps a request from being captured and altered. What they bound is
reuse: a signature names its RPC and its time.

**orbitmq v1** (every RPC of the name server, broker and sidecar)::

    x-orbitmq-access-key: <access key>
    x-orbitmq-date:       <Unix time, milliseconds, decimal>
    x-orbitmq-signature:  hex(HMAC-SHA256(secret, "ORBITMQ1-HMAC-SHA256\\n<method>\\n<date>\\n<access key>"))

``<method>`` is the full gRPC method (``/orbitmq.v1.Broker/SendMessage``), so a captured
signature is good for that RPC only, and only while ``<date>`` is within the replay window of the
server's clock (±5 minutes by default; inside the window a captured request can be sent again,
which TLS prevents, not this).

**RocketMQ 5** (``apache.rocketmq.v2``, the official clients' session credentials)::

    x-mq-date-time: 20240102T030405Z
    authorization:  MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time, Signature=<hex>

with ``<hex>`` = hex(HMAC-SHA1(secret, x-mq-date-time)), as RocketMQ 5.3's
``DefaultAuthenticationContextBuilder`` checks it. What the clients differ in, and this accepts:

* hex case: Python and Go send lower case, Java (``Hex.encodeHexString(.., false)``) upper case;
* ``Credential`` may carry ``/region/service`` after the access key (older Java, Go, C++): the
  access key is what precedes the first ``/``; the Python client without credentials signs
  with ``Credential=`` empty, which is answered as no credentials at all (``MISSING``);
* ``x-mq-date-time`` is ``yyyyMMdd'T'HHmmss'Z'``, but the Java and Python clients format their
  *local* time with a literal ``Z`` (``SimpleDateFormat`` / ``datetime.now()``), and the Rust
  client sends RFC 3339. RocketMQ itself does not check the time. Here a window is checked when
  the date parses: by default wide enough for any time zone (±14 h) plus 5 minutes of skew, which
  refuses a signature replayed a day later without refusing a client east or west of UTC.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from orbitmq.common.errors import OrbitError

ACCESS_KEY_HEADER = "x-orbitmq-access-key"
DATE_HEADER = "x-orbitmq-date"
SIGNATURE_HEADER = "x-orbitmq-signature"
V1_SCHEME = "ORBITMQ1-HMAC-SHA256"
DEFAULT_WINDOW_MS = 5 * 60 * 1000
"""How far a v1 request's date may be from the server's clock: client clocks drift by seconds
(NTP keeps them far closer), a replayed capture is refused after this long."""

MQ_AUTHORIZATION_HEADER = "authorization"
MQ_DATE_TIME_HEADER = "x-mq-date-time"
MQV2_ALGORITHM = "MQv2-HMAC-SHA1"
MQV2_DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
MQV2_ZONE_SLACK_MS = 14 * 60 * 60 * 1000
"""Official clients stamp local time as if it were UTC (see the module docstring): a window must
allow the widest UTC offset (+14 h, -12 h) on top of the clock skew it accepts."""
MQV2_DEFAULT_WINDOW_MS = MQV2_ZONE_SLACK_MS + DEFAULT_WINDOW_MS
"""The zone slack plus :data:`DEFAULT_WINDOW_MS` of skew."""

_DUMMY_SECRET = b"orbitmq: no such access key"
"""Signs when the access key is unknown, so an unknown key costs what a known one does."""

SecretLookup = Callable[[str], str | None]
"""Access key → secret, or None when no (enabled) user has that access key."""
Metadata = Iterable[tuple[str, str | bytes]]


class SignatureFailure(enum.Enum):
    MISSING = "missing"
    """No credentials at all (an anonymous request)."""
    MALFORMED = "malformed"
    UNKNOWN_ACCESS_KEY = "unknown access key"
    BAD_SIGNATURE = "bad signature"
    STALE = "stale"
    """The date is outside the replay window."""


_F = SignatureFailure


class SignatureError(OrbitError):
    """A request's credentials were refused; ``failure`` says which check failed.

    Servers answer every failure alike on the wire (UNAUTHENTICATED / RocketMQ's UNAUTHORIZED)
    and log the message, which names the access key and the check, never the secret.
    """

    def __init__(self, failure: SignatureFailure, message: str, access_key: str = "") -> None:
        self.failure = failure
        self.access_key = access_key
        super().__init__(message)


def sign_v1(method: str, access_key: str, secret: str, now_ms: int) -> list[tuple[str, str]]:
    """The metadata a client adds to one call of ``method`` (``/orbitmq.v1.Broker/SendMessage``)."""
    date = str(now_ms)
    signature = _v1_signature(secret.encode(), method, date, access_key)
    return [(ACCESS_KEY_HEADER, access_key), (DATE_HEADER, date), (SIGNATURE_HEADER, signature)]


def verify_v1(
    metadata: Metadata,
    method: str,
    lookup_secret: SecretLookup,
    now_ms: int,
    window_ms: int = DEFAULT_WINDOW_MS,
) -> str:
    """Check a call's v1 signature; answer its access key or raise :class:`SignatureError`.

    ``now_ms``: the server's clock (injected, so the window is tested without sleeping);
    ``window_ms``: how far the signed date may be from it, either way.
    """
    access_key = date = signature = None
    for key, value in metadata:
        if key == ACCESS_KEY_HEADER:
            access_key = _text(value)
        elif key == DATE_HEADER:
            date = _text(value)
        elif key == SIGNATURE_HEADER:
            signature = _text(value)
    if access_key is None and date is None and signature is None:
        raise SignatureError(_F.MISSING, f"{method}: no credentials ({ACCESS_KEY_HEADER} and others)")
    if not access_key or not date or not signature:
        given = ((ACCESS_KEY_HEADER, access_key), (DATE_HEADER, date), (SIGNATURE_HEADER, signature))
        missing = ", ".join(header for header, value in given if not value)
        raise SignatureError(_F.MALFORMED, f"{method}: credentials lack {missing}", access_key or "")
    if not date.isascii() or not date.isdigit():
        raise SignatureError(_F.MALFORMED, f"{method}: {DATE_HEADER} {date!r} is not Unix ms", access_key)
    secret = lookup_secret(access_key)
    key = secret.encode() if secret is not None else _DUMMY_SECRET
    expected = _v1_signature(key, method, date, access_key)
    matches = hmac.compare_digest(expected, signature.lower() if signature.isascii() else "")
    if secret is None:
        message = f"{method}: unknown access key {access_key!r}"
        raise SignatureError(_F.UNKNOWN_ACCESS_KEY, message, access_key)
    if not matches:
        message = f"{method}: signature of {access_key!r} does not match"
        raise SignatureError(_F.BAD_SIGNATURE, message, access_key)
    skew_ms = int(date) - now_ms
    if abs(skew_ms) > window_ms:
        raise SignatureError(
            _F.STALE,
            f"{method}: {access_key!r} signed {skew_ms / 1000:+.1f} s from the server's clock "
            f"(window ±{window_ms / 1000:.0f} s)",
            access_key,
        )
    return access_key


def _v1_signature(key: bytes, method: str, date: str, access_key: str) -> str:
    message = f"{V1_SCHEME}\n{method}\n{date}\n{access_key}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def sign_mqv2(access_key: str, secret: str, date_time: str) -> list[tuple[str, str]]:
    """RocketMQ 5's metadata for one call, as the official clients send it (lower-case hex)."""
    signature = hmac.new(secret.encode(), date_time.encode(), hashlib.sha1).hexdigest()
    credential = f"Credential={access_key}, SignedHeaders={MQ_DATE_TIME_HEADER}, Signature={signature}"
    authorization = f"{MQV2_ALGORITHM} {credential}"
    return [(MQ_DATE_TIME_HEADER, date_time), (MQ_AUTHORIZATION_HEADER, authorization)]


def mqv2_date_time(now_ms: int) -> str:
    """``x-mq-date-time`` for a Unix time, in UTC (what the official clients mean to send)."""
    return datetime.fromtimestamp(now_ms / 1000, UTC).strftime(MQV2_DATE_TIME_FORMAT)


def verify_mqv2(
    metadata: Metadata,
    lookup_secret: SecretLookup,
    now_ms: int,
    window_ms: int | None = MQV2_DEFAULT_WINDOW_MS,
) -> str:
    """Check a RocketMQ 5 call's signature; answer its access key or raise :class:`SignatureError`.

    ``window_ms``: how far a parsable ``x-mq-date-time`` may be from ``now_ms``; None checks no
    time at all (RocketMQ's own behaviour).
    """
    authorization = date_time = None
    for key, value in metadata:
        if key == MQ_AUTHORIZATION_HEADER:
            authorization = _text(value)
        elif key == MQ_DATE_TIME_HEADER:
            date_time = _text(value)
    if authorization is None:
        raise SignatureError(_F.MISSING, f"no {MQ_AUTHORIZATION_HEADER} header (an anonymous client)")
    access_key, signed_headers, signature = _parse_authorization(authorization)
    if not date_time:
        raise SignatureError(_F.MALFORMED, f"{access_key!r}: no {MQ_DATE_TIME_HEADER} header", access_key)
    if signed_headers is not None and MQ_DATE_TIME_HEADER not in signed_headers.lower().split(";"):
        message = f"{access_key!r}: SignedHeaders={signed_headers} lacks {MQ_DATE_TIME_HEADER}"
        raise SignatureError(_F.MALFORMED, message, access_key)
    secret = lookup_secret(access_key)
    key = secret.encode() if secret is not None else _DUMMY_SECRET
    expected = hmac.new(key, date_time.encode(), hashlib.sha1).digest()
    matches = hmac.compare_digest(expected, signature)
    if secret is None:
        raise SignatureError(_F.UNKNOWN_ACCESS_KEY, f"unknown access key {access_key!r}", access_key)
    if not matches:
        raise SignatureError(_F.BAD_SIGNATURE, f"signature of {access_key!r} does not match", access_key)
    signed_ms = _parse_mq_date_time(date_time)
    if window_ms is not None and signed_ms is not None and abs(signed_ms - now_ms) > window_ms:
        raise SignatureError(
            _F.STALE,
            f"{access_key!r} signed {MQ_DATE_TIME_HEADER}={date_time}, "
            f"{(signed_ms - now_ms) / 3_600_000:+.2f} h from the server's clock "
            f"(window ±{window_ms / 3_600_000:.2f} h)",
            access_key,
        )
    return access_key


def _parse_authorization(authorization: str) -> tuple[str, str | None, bytes]:
    """``MQv2-HMAC-SHA1 Credential=ak[/..], SignedHeaders=.., Signature=hex`` → its three parts."""
    algorithm, _, rest = authorization.strip().partition(" ")
    if algorithm != MQV2_ALGORITHM:
        message = f"{MQ_AUTHORIZATION_HEADER}: algorithm {algorithm!r} is not {MQV2_ALGORITHM}"
        raise SignatureError(_F.MALFORMED, message)
    fields: dict[str, str] = {}
    for item in rest.split(","):
        name, equals, value = item.strip().partition("=")
        if not equals:
            message = f"{MQ_AUTHORIZATION_HEADER}: {item.strip()!r} is not name=value"
            raise SignatureError(_F.MALFORMED, message)
        fields[name] = value.strip()
    access_key = fields.get("Credential", "").split("/", 1)[0]
    if not access_key and fields.get("Credential") == "":
        # The Python client without credentials still signs, with ``Credential=`` empty.
        raise SignatureError(
            _F.MISSING, f"{MQ_AUTHORIZATION_HEADER} has an empty Credential (an anonymous client)"
        )
    if not access_key:
        raise SignatureError(_F.MALFORMED, f"{MQ_AUTHORIZATION_HEADER}: no Credential (access key)")
    try:
        signature = bytes.fromhex(fields.get("Signature", ""))
    except ValueError:
        raise SignatureError(_F.MALFORMED, f"{access_key!r}: Signature is not hex", access_key) from None
    if not signature:
        raise SignatureError(_F.MALFORMED, f"{access_key!r}: no Signature", access_key)
    return access_key, fields.get("SignedHeaders"), signature


def mq_date_time_ms(date_time: str) -> int | None:
    """Unix milliseconds of an ``x-mq-date-time`` read as UTC; None when it does not parse (then
    :func:`verify_mqv2` checks no time, as RocketMQ)."""
    return _parse_mq_date_time(date_time)


def _parse_mq_date_time(date_time: str) -> int | None:
    """Unix milliseconds of ``yyyyMMddTHHmmssZ`` or RFC 3339, read as UTC; None if neither."""
    text = date_time
    if len(text) == 16 and text[8] == "T" and text[15] == "Z" and (text[:8] + text[9:15]).isdigit():
        # The official clients' format, read without strptime (a quarter of a check's cost).
        fields = (text[0:4], text[4:6], text[6:8], text[9:11], text[11:13], text[13:15])
        year, month, day, hour, minute, second = (int(f) for f in fields)
        try:
            return int(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()) * 1000
        except ValueError:
            return None
    for parse in (
        lambda text: datetime.strptime(text, MQV2_DATE_TIME_FORMAT).replace(tzinfo=UTC),
        lambda text: datetime.fromisoformat(text.replace("Z", "+00:00")),
    ):
        try:
            moment = parse(date_time)
        except ValueError:
            continue
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)
    return None


def _text(value: str | bytes) -> str:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else value
