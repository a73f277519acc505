"""Errors on the wire: one place maps orbitmq failures to gRPC statuses and back.

A servicer raises :class:`RpcFailure` (or any :class:`~orbitmq.common.errors.OrbitError` that
carries a reason); every handler is registered wrapped (:class:`ErrorMappingRegistrar`) so the
failure becomes a gRPC status whose details hold a ``google.rpc.ErrorInfo`` with the
machine-readable reason, so clients decide by reason, not by parsing text.
:func:`failure_of` reads it back on the client side.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from orbitmq.common.errors import OrbitError
from orbitmq.common.names import InvalidNameError
from orbitmq.v1.broker_pb2 import ErrorReason

log = logging.getLogger(__name__)

ERROR_DOMAIN = "orbitmq.io"
F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M")

# Which gRPC code goes with each reason; retriable reasons map to UNAVAILABLE.
_CODES: dict[int, grpc.StatusCode] = {
    ErrorReason.TOPIC_NOT_EXIST: grpc.StatusCode.NOT_FOUND,
    ErrorReason.SUBSCRIPTION_GROUP_NOT_EXIST: grpc.StatusCode.NOT_FOUND,
    ErrorReason.NO_PERMISSION: grpc.StatusCode.PERMISSION_DENIED,
    ErrorReason.MESSAGE_ILLEGAL: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorReason.INVALID_NAME: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorReason.INVALID_OFFSET: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorReason.INVALID_EXPRESSION: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorReason.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorReason.SLAVE_READ_ONLY: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorReason.SERVICE_NOT_AVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorReason.WOULD_HIDE_MESSAGES: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorReason.DISK_FULL: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


class RpcFailure(OrbitError):
    """A request that fails for a stated reason; the message names the value and the rule."""

    def __init__(self, reason: int, message: str, **metadata: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.metadata = metadata

    @property
    def code(self) -> grpc.StatusCode:
        return _CODES.get(self.reason, grpc.StatusCode.INVALID_ARGUMENT)

    @property
    def reason_name(self) -> str:
        return ErrorReason.Name(self.reason)  # type: ignore[arg-type]

    @property
    def retriable(self) -> bool:  # type: ignore[override]
        return self.code is grpc.StatusCode.UNAVAILABLE


def invalid(message: str, reason: int = ErrorReason.INVALID_ARGUMENT) -> RpcFailure:
    return RpcFailure(reason, message)


def _status_of(failure: RpcFailure) -> grpc.Status:
    info = error_details_pb2.ErrorInfo(
        reason=failure.reason_name, domain=ERROR_DOMAIN, metadata=failure.metadata
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(
        code=getattr(code_pb2, failure.code.name), message=failure.message, details=[detail]
    )
    return rpc_status.to_status(status)


def _as_failure(error: Exception) -> RpcFailure | None:
    if isinstance(error, RpcFailure):
        return error
    if isinstance(error, InvalidNameError):
        return RpcFailure(ErrorReason.INVALID_NAME, str(error))
    if isinstance(error, OrbitError) and isinstance(error, ValueError):
        # Validation errors raised below the servicer (offset tables, codecs) name the value.
        return RpcFailure(ErrorReason.INVALID_ARGUMENT, str(error))
    return None


async def _abort(context: grpc.aio.ServicerContext, failure: RpcFailure) -> None:
    await context.abort_with_status(_status_of(failure))


class _Malformed:
    """Stands in for a request whose bytes did not parse, so the handler can answer with a reason."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem


def _safe_deserializer(deserialize: Callable[[bytes], Any] | None, method: str) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return deserialize(data) if deserialize else data
        except DecodeError as error:
            return _Malformed(f"malformed request to {method}: {error}")

    return parse


def takes_request_bytes(method: F) -> F:
    """Mark a servicer method that gets its request's bytes, unparsed, and parses them itself
    (with :func:`parse_request`): for handlers that also read the wire bytes directly."""
    method.takes_request_bytes = True  # type: ignore[attr-defined]
    return method


def returns_reply_bytes(method: F) -> F:
    """Mark a servicer method that returns its reply's wire bytes (it encodes them itself)."""
    method.returns_reply_bytes = True  # type: ignore[attr-defined]
    return method


def parse_request(message_type: type[M], data: bytes, method: str) -> M:
    """``data`` parsed as ``message_type``; bytes that do not parse are an INVALID_ARGUMENT failure."""
    try:
        return message_type.FromString(data)  # type: ignore[attr-defined]
    except DecodeError as error:
        raise RpcFailure(ErrorReason.INVALID_ARGUMENT, f"malformed request to {method}: {error}") from None


def _check_parsed(request: Any) -> None:
    if isinstance(request, _Malformed):
        raise RpcFailure(ErrorReason.INVALID_ARGUMENT, request.problem)


async def _checked_stream(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        _check_parsed(request)
        yield request


class GenericRegistrar:
    """Stands in for a ``grpc.aio.Server`` while generated code registers a service, and hands
    its handlers to the server as generic handlers only, each wrapped by ``wrap``.

    Generated code registers every service twice over: as a generic handler, and method by
    method as "registered methods". grpc.aio keeps one pending request per registered method
    and, for every incoming call, waits on all of them with ``asyncio.wait``: each registered
    method costs each call about a microsecond, so the Broker service's 32 methods added about
    20 % to the CPU a send takes on top of a bare echo server (``docs/benchmarks.md``). A
    generic handler is one dictionary lookup per call.
    """

    def __init__(
        self,
        server: grpc.aio.Server,
        wrap: Callable[[grpc.RpcMethodHandler, str], grpc.RpcMethodHandler] = lambda handler, _: handler,
    ) -> None:
        self._server = server
        self._wrap = wrap
        self.services: list[str] = []

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        """Ignored: generated code registers the same handlers through the call below (the
        caller checks that it came: see :attr:`services`)."""

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.services.append(service)
        wrapped = {name: self._wrap(h, f"/{service}/{name}") for name, h in handlers.items()}
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, wrapped),))

    def check(self, *expected: str) -> None:
        """The registration went through :meth:`add_registered_method_handlers` for exactly
        ``expected`` (older generated code only calls the ignored generic registration)."""
        if self.services != list(expected):
            raise TypeError(
                f"registering {', '.join(expected)} added registered method handlers for "
                f"{self.services}: regenerate the gRPC code (scripts/gen-protos) with grpcio-tools >= 1.62"
            )


def error_mapping_registrar(server: grpc.aio.Server) -> GenericRegistrar:
    """A :class:`GenericRegistrar` whose handlers answer failures with reasons: :class:`RpcFailure`
    (and unparseable requests) become statuses with ErrorInfo.

    Wrapping once at registration, rather than in a server interceptor, keeps the per-call cost
    at one extra coroutine frame: grpc.aio runs interceptors on every call, which took about
    10 % of a bare echo server's calls a second (``docs/benchmarks.md``).
    """
    return GenericRegistrar(server, with_error_mapping)


def with_error_mapping(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    """``handler`` answering failures with reasons (see :func:`error_mapping_registrar`)."""
    behaviour = handler.unary_unary or handler.stream_stream or handler.unary_stream
    raw = getattr(behaviour, "takes_request_bytes", False)
    parse = _safe_deserializer(None if raw else handler.request_deserializer, method)
    serialize = None if getattr(behaviour, "returns_reply_bytes", False) else handler.response_serializer
    if handler.unary_unary is not None:
        inner = handler.unary_unary

        async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                if type(request) is _Malformed:  # (inline: this runs on every call)
                    _check_parsed(request)
                return await inner(request, context)
            except Exception as error:
                failure = _as_failure(error)
                if failure is None:
                    raise
                await _abort(context, failure)

        return grpc.unary_unary_rpc_method_handler(unary_unary, parse, serialize)
    if handler.stream_stream is not None:
        stream_inner = handler.stream_stream

        async def stream_stream(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                async for response in stream_inner(_checked_stream(requests), context):
                    yield response
            except Exception as error:
                failure = _as_failure(error)
                if failure is None:
                    log.exception("stream %s failed", method)
                    raise
                await _abort(context, failure)

        return grpc.stream_stream_rpc_method_handler(stream_stream, parse, serialize)
    if handler.unary_stream is not None:
        # Server streams (the proxy's ReceiveMessage and PullMessage) need the safe parse too:
        # grpc's own raised DecodeError out of the call, answered UNKNOWN with a traceback logged.
        stream_of = handler.unary_stream

        async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                _check_parsed(request)
                async for response in stream_of(request, context):
                    yield response
            except Exception as error:
                failure = _as_failure(error)
                if failure is None:
                    log.exception("stream %s failed", method)
                    raise
                await _abort(context, failure)

        return grpc.unary_stream_rpc_method_handler(unary_stream, parse, serialize)
    return handler


def failure_of(error: grpc.aio.AioRpcError | grpc.RpcError) -> RpcFailure | None:
    """The reason a call failed, read from its status details; None when it carries none."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    if status is None:
        return None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Is(info.DESCRIPTOR) and detail.Unpack(info) and info.domain == ERROR_DOMAIN:
            try:
                reason = ErrorReason.Value(info.reason)
            except ValueError:  # a reason added by a newer server
                reason = ErrorReason.ERROR_REASON_UNSPECIFIED
            return RpcFailure(reason, status.message, **dict(info.metadata))
    return None
