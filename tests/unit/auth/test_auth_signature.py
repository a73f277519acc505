"""Request signatures: orbitmq v1's round trip, tampering and replay window edges, and RocketMQ 5's
scheme checked against what the official Python client itself sends."""

from __future__ import annotations

import hashlib
import hmac
import importlib
import time
from pathlib import Path
from types import ModuleType

import pytest

from orbitmq.auth.signature import (
    ACCESS_KEY_HEADER,
    DATE_HEADER,
    DEFAULT_WINDOW_MS,
    MQV2_DEFAULT_WINDOW_MS,
    SIGNATURE_HEADER,
    SignatureError,
    SignatureFailure,
    mqv2_date_time,
    sign_mqv2,
    sign_v1,
    verify_mqv2,
    verify_v1,
)

SEND = "/orbitmq.v1.Broker/SendMessage"
NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SECRETS = {"app": "app-secret", "root": "root-secret"}
MALFORMED = SignatureFailure.MALFORMED


def lookup(access_key: str) -> str | None:
    return SECRETS.get(access_key)


def _failure(call: object, *args: object, **kwargs: object) -> SignatureError:
    with pytest.raises(SignatureError) as refused:
        call(*args, **kwargs)  # type: ignore[operator]
    return refused.value


def _replace(metadata: list[tuple[str, str]], key: str, value: str) -> list[tuple[str, str]]:
    return [(k, value if k == key else v) for k, v in metadata]


# -- orbitmq v1 ------------------------------------------------------------------------------------


def test_v1_round_trip_answers_the_access_key() -> None:
    metadata = sign_v1(SEND, "app", "app-secret", NOW_MS)
    assert [k for k, _ in metadata] == [ACCESS_KEY_HEADER, DATE_HEADER, SIGNATURE_HEADER]
    assert "app-secret" not in str(metadata)
    assert verify_v1(metadata, SEND, lookup, NOW_MS) == "app"
    # gRPC hands metadata values over as str, binary ones as bytes; other headers are ignored.
    as_bytes = [("user-agent", "grpc-python"), *((k, v.encode()) for k, v in metadata)]
    assert verify_v1(as_bytes, SEND, lookup, NOW_MS) == "app"
    upper = _replace(metadata, SIGNATURE_HEADER, dict(metadata)[SIGNATURE_HEADER].upper())
    assert verify_v1(upper, SEND, lookup, NOW_MS) == "app"


@pytest.mark.parametrize(
    ("skew_ms", "accepted"),
    [
        (0, True),
        (DEFAULT_WINDOW_MS, True),
        (-DEFAULT_WINDOW_MS, True),
        (DEFAULT_WINDOW_MS + 1, False),
        (-DEFAULT_WINDOW_MS - 1, False),
        (24 * 3600 * 1000, False),
    ],
)
def test_v1_replay_window_edges(skew_ms: int, accepted: bool) -> None:
    metadata = sign_v1(SEND, "app", "app-secret", NOW_MS + skew_ms)
    if accepted:
        assert verify_v1(metadata, SEND, lookup, NOW_MS) == "app"
        return
    refused = _failure(verify_v1, metadata, SEND, lookup, NOW_MS)
    assert refused.failure is SignatureFailure.STALE
    assert "window ±300 s" in str(refused) and refused.access_key == "app"


def test_v1_window_is_configurable() -> None:
    metadata = sign_v1(SEND, "app", "app-secret", NOW_MS - 10_000)
    assert verify_v1(metadata, SEND, lookup, NOW_MS, window_ms=10_000) == "app"
    refused = _failure(verify_v1, metadata, SEND, lookup, NOW_MS, window_ms=9_999)
    assert refused.failure is SignatureFailure.STALE


def test_v1_tampering_is_a_bad_signature() -> None:
    metadata = sign_v1(SEND, "app", "app-secret", NOW_MS)
    other_rpc = _failure(verify_v1, metadata, "/orbitmq.v1.Broker/DeleteTopic", lookup, NOW_MS)
    assert other_rpc.failure is SignatureFailure.BAD_SIGNATURE
    later = _replace(metadata, DATE_HEADER, str(NOW_MS + 1))
    assert _failure(verify_v1, later, SEND, lookup, NOW_MS).failure is SignatureFailure.BAD_SIGNATURE
    # Another user's access key with this signature (the key is signed too).
    borrowed = _replace(metadata, ACCESS_KEY_HEADER, "root")
    assert _failure(verify_v1, borrowed, SEND, lookup, NOW_MS).failure is SignatureFailure.BAD_SIGNATURE
    wrong_secret = sign_v1(SEND, "app", "guess", NOW_MS)
    refused = _failure(verify_v1, wrong_secret, SEND, lookup, NOW_MS)
    assert refused.failure is SignatureFailure.BAD_SIGNATURE
    assert "guess" not in str(refused) and "app-secret" not in str(refused)


def test_v1_unknown_access_key_and_missing_or_malformed_credentials() -> None:
    unknown = sign_v1(SEND, "nobody", "x", NOW_MS)
    refused = _failure(verify_v1, unknown, SEND, lookup, NOW_MS)
    assert (refused.failure, refused.access_key) == (SignatureFailure.UNKNOWN_ACCESS_KEY, "nobody")
    anonymous = _failure(verify_v1, [("user-agent", "x")], SEND, lookup, NOW_MS)
    assert anonymous.failure is SignatureFailure.MISSING
    partial = sign_v1(SEND, "app", "app-secret", NOW_MS)[:2]
    refused = _failure(verify_v1, partial, SEND, lookup, NOW_MS)
    assert refused.failure is SignatureFailure.MALFORMED and SIGNATURE_HEADER in str(refused)
    rfc3339 = _replace(sign_v1(SEND, "app", "app-secret", NOW_MS), DATE_HEADER, "2026-01-01T00:00:00Z")
    assert _failure(verify_v1, rfc3339, SEND, lookup, NOW_MS).failure is SignatureFailure.MALFORMED
    not_hex = _replace(sign_v1(SEND, "app", "app-secret", NOW_MS), SIGNATURE_HEADER, "é" * 64)
    assert _failure(verify_v1, not_hex, SEND, lookup, NOW_MS).failure is SignatureFailure.BAD_SIGNATURE


# -- RocketMQ 5 (MQv2-HMAC-SHA1) -------------------------------------------------------------------


@pytest.fixture
def official_signature(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The official Python client's own signing module (it logs under $HOME when imported)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    return importlib.import_module("rocketmq.v5.util.signature")


def _official_metadata(official_signature: ModuleType, access_key: str, secret: str) -> list[tuple[str, str]]:
    client = importlib.import_module("rocketmq.v5.client")
    config = client.ClientConfiguration("127.0.0.1:8081", client.Credentials(access_key, secret))
    return official_signature.Signature.metadata(config, "client-1")


def test_official_python_client_signature_verifies(official_signature: ModuleType) -> None:
    metadata = _official_metadata(official_signature, "app", "app-secret")
    assert dict(metadata)["authorization"].startswith("MQv2-HMAC-SHA1 Credential=app, ")
    now_ms = int(time.time() * 1000)
    assert verify_mqv2(metadata, lookup, now_ms) == "app"
    # The client stamps local time with a 'Z': the default window spans every UTC offset...
    assert verify_mqv2(metadata, lookup, now_ms + 14 * 3600 * 1000) == "app"
    # ...and RocketMQ's own behaviour (no time check) is one argument away.
    assert verify_mqv2(metadata, lookup, now_ms + 30 * 24 * 3600 * 1000, window_ms=None) == "app"


def test_official_python_client_with_a_wrong_secret_is_refused(official_signature: ModuleType) -> None:
    metadata = _official_metadata(official_signature, "app", "not-the-secret")
    refused = _failure(verify_mqv2, metadata, lookup, int(time.time() * 1000))
    assert (refused.failure, refused.access_key) == (SignatureFailure.BAD_SIGNATURE, "app")
    unknown = _official_metadata(official_signature, "nobody", "x")
    refused = _failure(verify_mqv2, unknown, lookup, int(time.time() * 1000))
    assert refused.failure is SignatureFailure.UNKNOWN_ACCESS_KEY


def test_our_mqv2_signing_matches_the_official_client(official_signature: ModuleType) -> None:
    date_time = mqv2_date_time(NOW_MS)
    assert date_time == "20260101T000000Z"
    ours = dict(sign_mqv2("app", "app-secret", date_time))["authorization"]
    assert ours.endswith(f"Signature={official_signature.Signature.sign('app-secret', date_time)}")


def _java_style(access_key: str, secret: str, date_time: str) -> list[tuple[str, str]]:
    """As the Java client sends it: upper-case hex, region and service after the access key."""
    signature = hmac.new(secret.encode(), date_time.encode(), hashlib.sha1).hexdigest().upper()
    authorization = (
        f"MQv2-HMAC-SHA1 Credential={access_key}/cn-hangzhou/rocketmq, "
        f"SignedHeaders=x-mq-date-time, Signature={signature}"
    )
    return [("x-mq-date-time", date_time), ("authorization", authorization)]


def test_client_variants_verify() -> None:
    date_time = mqv2_date_time(NOW_MS)
    assert verify_mqv2(_java_style("app", "app-secret", date_time), lookup, NOW_MS) == "app"
    rust = sign_mqv2("app", "app-secret", "2026-01-01T00:00:00+00:00")
    assert verify_mqv2(rust, lookup, NOW_MS) == "app"
    refused = _failure(verify_mqv2, rust, lookup, NOW_MS + MQV2_DEFAULT_WINDOW_MS + 1)
    assert refused.failure is SignatureFailure.STALE


@pytest.mark.parametrize(
    ("skew_ms", "window_ms", "accepted"),
    [
        (MQV2_DEFAULT_WINDOW_MS, MQV2_DEFAULT_WINDOW_MS, True),
        (-MQV2_DEFAULT_WINDOW_MS, MQV2_DEFAULT_WINDOW_MS, True),
        (MQV2_DEFAULT_WINDOW_MS + 1000, MQV2_DEFAULT_WINDOW_MS, False),
        (-MQV2_DEFAULT_WINDOW_MS - 1000, MQV2_DEFAULT_WINDOW_MS, False),
        (60_000, 60_000, True),
        (61_000, 60_000, False),
    ],
)
def test_mqv2_window_edges(skew_ms: int, window_ms: int, accepted: bool) -> None:
    metadata = sign_mqv2("app", "app-secret", mqv2_date_time(NOW_MS + skew_ms))
    if accepted:
        assert verify_mqv2(metadata, lookup, NOW_MS, window_ms=window_ms) == "app"
    else:
        refused = _failure(verify_mqv2, metadata, lookup, NOW_MS, window_ms=window_ms)
        assert refused.failure is SignatureFailure.STALE


def test_mqv2_tampered_date_is_a_bad_signature() -> None:
    metadata = sign_mqv2("app", "app-secret", mqv2_date_time(NOW_MS - 3600_000))
    fresh = _replace(metadata, "x-mq-date-time", mqv2_date_time(NOW_MS))
    assert _failure(verify_mqv2, fresh, lookup, NOW_MS).failure is SignatureFailure.BAD_SIGNATURE


@pytest.mark.parametrize(
    ("metadata", "failure", "said"),
    [
        ([("x-mq-date-time", "20260101T000000Z")], SignatureFailure.MISSING, "no authorization header"),
        ([("authorization", "MQv2-HMAC-SHA1 Credential=app, Signature=00")], MALFORMED, "no x-mq"),
        ([("authorization", "HMAC-SHA256 Credential=app")], MALFORMED, "algorithm"),
        ([("authorization", "MQv2-HMAC-SHA1 Credential")], MALFORMED, "not name=value"),
        ([("authorization", "MQv2-HMAC-SHA1 Signature=00")], MALFORMED, "no Credential"),
        ([("authorization", "MQv2-HMAC-SHA1 Credential=app, Signature=zz")], MALFORMED, "not hex"),
        ([("authorization", "MQv2-HMAC-SHA1 Credential=app")], MALFORMED, "no Signature"),
        (
            [
                ("x-mq-date-time", "20260101T000000Z"),
                ("authorization", "MQv2-HMAC-SHA1 Credential=app, SignedHeaders=host, Signature=00"),
            ],
            MALFORMED,
            "lacks x-mq-date-time",
        ),
    ],
)
def test_mqv2_malformed_credentials(
    metadata: list[tuple[str, str]], failure: SignatureFailure, said: str
) -> None:
    refused = _failure(verify_mqv2, metadata, lookup, NOW_MS)
    assert refused.failure is failure
    assert said in str(refused)


def test_mqv2_unparsable_date_is_checked_by_signature_only() -> None:
    metadata = sign_mqv2("app", "app-secret", "some day")
    assert verify_mqv2(metadata, lookup, NOW_MS) == "app"
