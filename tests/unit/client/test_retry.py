"""The producer's retry policy and failure classification (pure: no servers, no sleeps)."""

from __future__ import annotations

import pytest

from orbitmq.client.faults import LatencyFaults
from orbitmq.client.retry import MIN_ATTEMPT_MS, Failure, SendFailed, SendRetryPolicy, classify
from orbitmq.common.clock import ManualClock
from orbitmq.common.rpc import RpcFailure
from orbitmq.v1.broker_pb2 import ErrorReason


def test_default_budget_outlasts_a_failover() -> None:
    policy = SendRetryPolicy()
    assert policy.send_timeout_ms >= 3_000 + 2 * policy.retry_backoff_max_ms
    assert policy.attempt_timeout_ms > 3_000  # a SYNC_MASTER's wait for its slave is an answer


def test_pauses_double_up_to_the_cap_and_stop_when_the_budget_is_spent() -> None:
    policy = SendRetryPolicy(send_timeout_ms=10_000, retry_backoff_ms=50, retry_backoff_max_ms=1_000)
    full = [policy.pause_ms(retry, 0, jitter=0.999999) for retry in range(1, 8)]
    assert [round(p or 0) for p in full] == [50, 100, 200, 400, 800, 1000, 1000]
    assert policy.pause_ms(3, 0, jitter=0.0) == 100  # half of 200: jitter spreads producers
    assert policy.pause_ms(1, 9_000, jitter=0.0) == 25
    assert policy.pause_ms(6, 9_000, jitter=0.0) == 500  # leaves 500 ms for the attempt
    assert policy.pause_ms(6, 9_500, jitter=0.0) == 500 - MIN_ATTEMPT_MS  # last try at the deadline
    assert policy.pause_ms(1, 10_000 - MIN_ATTEMPT_MS, jitter=0.0) is None


def test_every_pause_leaves_time_for_one_more_attempt() -> None:
    policy = SendRetryPolicy(send_timeout_ms=2_000)
    elapsed, retry = 0.0, 1
    while (pause := policy.pause_ms(retry, elapsed, jitter=0.5)) is not None:
        elapsed += pause + 1  # each attempt fails at once (connection refused)
        assert policy.attempt_timeout_s(elapsed) * 1000 >= MIN_ATTEMPT_MS
        retry += 1
    assert elapsed <= 2_000 and retry > 3


def test_attempt_timeout_is_bounded_by_what_is_left() -> None:
    policy = SendRetryPolicy(send_timeout_ms=10_000, attempt_timeout_ms=5_000)
    assert policy.attempt_timeout_s(0) == 5.0
    assert policy.attempt_timeout_s(8_000) == 2.0
    assert policy.with_budget(None) is policy and policy.with_budget(500).send_timeout_ms == 500


def test_settings_must_be_positive() -> None:
    with pytest.raises(ValueError, match="send_timeout_ms must be positive, not 0"):
        SendRetryPolicy(send_timeout_ms=0)


@pytest.mark.parametrize(
    ("reason", "retriable", "moves"),
    [
        (ErrorReason.SERVICE_NOT_AVAILABLE, True, False),
        (ErrorReason.SLAVE_READ_ONLY, True, False),
        (ErrorReason.DISK_FULL, False, True),  # at once to another broker group, never waited on
        (ErrorReason.MESSAGE_ILLEGAL, False, False),
        (ErrorReason.NO_PERMISSION, False, False),
        (ErrorReason.TOPIC_NOT_EXIST, False, False),
    ],
)
def test_reasons_that_are_retried(reason: int, retriable: bool, moves: bool) -> None:
    failure = classify(RpcFailure(reason, "broker said\nso"))
    assert failure.retriable is retriable and failure.detail == "broker said so"
    assert failure.moves is moves


def test_final_error_is_one_line_naming_topic_broker_and_reason() -> None:
    failure = Failure(ErrorReason.SERVICE_NOT_AVAILABLE, "UNAVAILABLE", "Connection refused", True)
    error = SendFailed("Orders", "broker-a", "127.0.0.1:10911", failure, 10.04, 23)
    assert str(error) == (
        "send to topic Orders failed on broker broker-a (127.0.0.1:10911): UNAVAILABLE "
        "(Connection refused) after 10.0 s of retries (23 attempts)"
    )
    assert error.reason == ErrorReason.SERVICE_NOT_AVAILABLE and error.retriable
    assert error.metadata == {"topic": "Orders", "broker": "broker-a"}
    once = SendFailed(
        "T", None, None, Failure(ErrorReason.MESSAGE_ILLEGAL, "MESSAGE_ILLEGAL", "", False), 0, 1
    )
    assert str(once) == "send to topic T failed: MESSAGE_ILLEGAL" and not once.retriable


def test_a_replaced_master_is_no_longer_avoided() -> None:
    faults = LatencyFaults(ManualClock())
    faults.record("broker-a", 0, failed=True)
    assert not faults.available("broker-a")
    faults.forget("broker-a")
    assert faults.available("broker-a")
