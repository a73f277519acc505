"""orbitmq failures as apache.rocketmq.v2 codes: the table v2 clients act on (retry or not)."""

from __future__ import annotations

import grpc
import pytest

from orbitmq.client.retry import SendFailed, classify
from orbitmq.common.rpc import RpcFailure
from orbitmq.proxy import codes
from orbitmq.proxy.convert import Refused
from orbitmq.rocketmq_v2 import definition_pb2 as v2
from orbitmq.v1.broker_pb2 import ErrorReason


def _transport(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def test_every_orbitmq_reason_has_a_v2_code() -> None:
    reasons = set(ErrorReason.values()) - {ErrorReason.ERROR_REASON_UNSPECIFIED}
    assert reasons <= set(codes.REASON_CODES), "a new ErrorReason needs its v2 code"


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        (ErrorReason.TOPIC_NOT_EXIST, v2.TOPIC_NOT_FOUND),
        (ErrorReason.NO_PERMISSION, v2.FORBIDDEN),
        (ErrorReason.SERVICE_NOT_AVAILABLE, v2.HA_NOT_AVAILABLE),
        (ErrorReason.INVALID_OFFSET, v2.ILLEGAL_OFFSET),
    ],
)
def test_failures_with_a_reason_keep_their_message(reason: int, code: int) -> None:
    status = codes.status_of(RpcFailure(reason, "topic Orders: the broker said so"))
    assert (status.code, status.message) == (code, "topic Orders: the broker said so")


def test_a_send_that_ran_out_of_time_names_topic_broker_and_cause() -> None:
    failure = classify(
        _transport(grpc.StatusCode.UNAVAILABLE, "failed to connect; last error: Connection refused")
    )
    status = codes.status_of(SendFailed("Orders", "broker-a", "10.0.0.1:10911", failure, 2.8, 9))
    assert status.code == v2.HA_NOT_AVAILABLE
    assert (
        "Orders" in status.message and "broker-a" in status.message and "Connection refused" in status.message
    )


@pytest.mark.parametrize(
    ("grpc_code", "code"),
    [
        (grpc.StatusCode.DEADLINE_EXCEEDED, v2.PROXY_TIMEOUT),
        (grpc.StatusCode.UNAVAILABLE, v2.HA_NOT_AVAILABLE),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, v2.TOO_MANY_REQUESTS),
        (grpc.StatusCode.INTERNAL, v2.INTERNAL_SERVER_ERROR),
    ],
)
def test_transport_failures_without_a_reason(grpc_code: grpc.StatusCode, code: int) -> None:
    status = codes.status_of(_transport(grpc_code, "it broke"))
    assert status.code == code and "it broke" in status.message


def test_refusals_pass_through_and_bugs_are_not_hidden() -> None:
    assert codes.status_of(Refused(v2.ILLEGAL_TOPIC, "bad")).code == v2.ILLEGAL_TOPIC
    with pytest.raises(ZeroDivisionError):
        codes.status_of(ZeroDivisionError("a bug keeps its traceback"))
