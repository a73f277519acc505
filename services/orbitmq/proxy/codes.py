"""orbitmq failures as ``apache.rocketmq.v2`` status codes, in one table.

The v2 protocol reports outcomes in-band: every response carries a ``Status`` (a ``Code`` and a
message), and the official clients decide by the code (``BAD_REQUEST``-like codes fail at once,
``TOO_MANY_REQUESTS`` stops retries, the rest are retried). So the proxy never answers with a
bare gRPC error: a broker's ``ErrorReason`` or a transport failure becomes the code a RocketMQ 5
proxy would send for the same condition, and the message is orbitmq's own, one line, naming the
value and the rule.
"""

from __future__ import annotations

import grpc

from orbitmq.client.retry import classify
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.proxy.convert import Refused
from orbitmq.rocketmq_v2 import definition_pb2 as v2
from orbitmq.v1.broker_pb2 import ErrorReason, SendStatus

REASON_CODES: dict[int, int] = {
    ErrorReason.TOPIC_NOT_EXIST: v2.TOPIC_NOT_FOUND,
    ErrorReason.SUBSCRIPTION_GROUP_NOT_EXIST: v2.CONSUMER_GROUP_NOT_FOUND,
    ErrorReason.NO_PERMISSION: v2.FORBIDDEN,
    ErrorReason.UNAUTHENTICATED: v2.UNAUTHORIZED,
    ErrorReason.MESSAGE_ILLEGAL: v2.BAD_REQUEST,
    ErrorReason.INVALID_NAME: v2.BAD_REQUEST,
    ErrorReason.INVALID_OFFSET: v2.ILLEGAL_OFFSET,
    ErrorReason.INVALID_EXPRESSION: v2.ILLEGAL_FILTER_EXPRESSION,
    ErrorReason.SLAVE_READ_ONLY: v2.HA_NOT_AVAILABLE,
    ErrorReason.SERVICE_NOT_AVAILABLE: v2.HA_NOT_AVAILABLE,
    ErrorReason.INVALID_ARGUMENT: v2.BAD_REQUEST,
    ErrorReason.STALE_EPOCH: v2.INTERNAL_SERVER_ERROR,
    ErrorReason.WOULD_HIDE_MESSAGES: v2.PRECONDITION_FAILED,
    ErrorReason.USER_NOT_EXIST: v2.NOT_FOUND,
    ErrorReason.ACL_NOT_EXIST: v2.NOT_FOUND,
    ErrorReason.DISK_FULL: v2.HA_NOT_AVAILABLE,  # RocketMQ's broker: SERVICE_NOT_AVAILABLE, "disk is full"
}
"""A broker's or name server's reason -> the v2 code (unlisted: ``INTERNAL_SERVER_ERROR``)."""

TRANSPORT_CODES: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.DEADLINE_EXCEEDED: v2.PROXY_TIMEOUT,
    grpc.StatusCode.UNAVAILABLE: v2.HA_NOT_AVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED: v2.TOO_MANY_REQUESTS,
}
"""A gRPC failure that carries no reason -> the v2 code."""

SEND_STATUS_CODES: dict[int, int] = {
    SendStatus.SEND_OK: v2.OK,
    SendStatus.FLUSH_DISK_TIMEOUT: v2.MASTER_PERSISTENCE_TIMEOUT,
    SendStatus.FLUSH_SLAVE_TIMEOUT: v2.SLAVE_PERSISTENCE_TIMEOUT,
    SendStatus.SLAVE_NOT_AVAILABLE: v2.HA_NOT_AVAILABLE,
}
"""A stored-but-not-everywhere send status (SYNC_FLUSH, SYNC_MASTER) -> the v2 code."""


def status(code: int, message: str = "") -> v2.Status:
    return v2.Status(code=code, message=message or v2.Code.Name(code))  # type: ignore[arg-type]


OK = status(v2.OK, "OK")


def status_of(error: BaseException) -> v2.Status:
    """The v2 status for a failure raised while serving a request.

    Raises ``error`` again when it is none of the failures this table knows (a bug keeps its
    traceback, and the servicer answers ``INTERNAL_SERVER_ERROR``).
    """
    if isinstance(error, Refused):
        return status(error.code, error.message)
    if isinstance(error, RpcFailure):  # SendFailed and the name server lookups included
        return status(REASON_CODES.get(error.reason, v2.INTERNAL_SERVER_ERROR), str(error))
    if isinstance(error, grpc.aio.AioRpcError):
        carried = failure_of(error)
        if carried is not None:
            return status(REASON_CODES.get(carried.reason, v2.INTERNAL_SERVER_ERROR), carried.message)
        failure = classify(error)
        code = TRANSPORT_CODES.get(error.code(), v2.INTERNAL_SERVER_ERROR)
        return status(code, f"{failure.label}: {failure.detail}")
    raise error


def not_implemented(rpc: str, why: str) -> v2.Status:
    return status(v2.NOT_IMPLEMENTED, f"orbitmq does not serve {rpc} yet: {why}")
