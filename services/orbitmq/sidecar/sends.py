"""An application's concurrent sends through the sidecar, coalesced into ``SendBatch`` calls.

A gRPC call costs the sidecar about 250 µs of CPU and the application about 115 µs (grpc.aio's
per-call work; the sidecar's own Python is about 10 µs of it), far more than a message in it.
So, as the library producer does with its broker calls (:mod:`orbitmq.client.accumulator`,
whose lanes these are): a send that finds no call on its way goes at once, alone, as a plain
``Send``; sends that arrive while calls are out wait and leave together as one ``SendBatch``.
The sidecar sends each message of a batch through its producer as if it had come alone (which
coalesces them again into broker calls), and answers each with its own result or refusal.

A sidecar from before ``SendBatch`` answers it UNIMPLEMENTED: the client then sends every
message alone, as it used to.
"""

from __future__ import annotations

import asyncio

import grpc

from orbitmq.client.accumulator import Lane, Lanes, Pending
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.v1 import sidecar_pb2, sidecar_pb2_grpc

MAX_SENDS = 256
MAX_BYTES = 4 * 1024 * 1024
"""Bodies' bytes in one batch: far below the channel's 64 MiB message limit."""
IN_FLIGHT = 2
"""Calls on their way at once (as the producer's round-robin lanes)."""


class PendingSend(Pending[sidecar_pb2.SidecarSendResponse]):
    __slots__ = ("request",)

    request: sidecar_pb2.SidecarSendRequest


class SidecarSends(Lanes[str, PendingSend]):
    """The sends of one :class:`~orbitmq.sidecar.client.SidecarClient` (one lane)."""

    def __init__(self, stub: sidecar_pb2_grpc.SidecarStub) -> None:
        super().__init__(
            "sidecar-client", "the sidecar client is closed", max_items=MAX_SENDS, max_bytes=MAX_BYTES
        )
        self._stub = stub
        self._batches = True
        """False once the sidecar answered SendBatch UNIMPLEMENTED (an older sidecar)."""
        self.calls = 0
        """Calls made (Send or SendBatch); with :attr:`messages`, what coalescing saved."""
        self.messages = 0

    async def send(self, request: sidecar_pb2.SidecarSendRequest) -> sidecar_pb2.SidecarSendResponse:
        """The sidecar's answer to ``request``; raises :class:`RpcFailure` for its refusal."""
        pending = PendingSend()
        pending.request = request
        pending.alone = False
        self._put("", pending, IN_FLIGHT)
        return await pending

    def _size(self, pending: PendingSend) -> int:
        return len(pending.request.message.body)

    async def _deliver(self, lane: Lane[str, PendingSend], batch: list[PendingSend]) -> None:
        self.messages += len(batch)
        if len(batch) == 1 or not self._batches:
            await asyncio.gather(*(self._alone(pending) for pending in batch))
            return
        try:
            request = sidecar_pb2.SidecarSendBatchRequest(sends=[pending.request for pending in batch])
            self.calls += 1
            reply = await self._stub.SendBatch(request)
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.UNIMPLEMENTED:
                self._batches = False
                await asyncio.gather(*(self._alone(pending) for pending in batch))
                return
            _fail(batch, _failure(error))
            return
        if len(reply.outcomes) != len(batch):
            answered = len(reply.outcomes)
            _fail(batch, RuntimeError(f"the sidecar answered {answered} outcomes for {len(batch)} sends"))
            return
        for pending, outcome in zip(batch, reply.outcomes, strict=True):
            if pending.done():  # its caller gave up (cancelled)
                continue
            if outcome.HasField("result"):
                pending.set_result(outcome.result)
            else:
                pending.set_exception(RpcFailure(outcome.reason, outcome.error))

    async def _alone(self, pending: PendingSend) -> None:
        self.calls += 1
        try:
            reply = await self._stub.Send(pending.request)
        except grpc.aio.AioRpcError as error:
            _fail([pending], _failure(error))
            return
        if not pending.done():
            pending.set_result(reply)


def _failure(error: grpc.aio.AioRpcError) -> BaseException:
    """The sidecar's refusal as it sent it; the gRPC error itself when the sidecar is unreachable."""
    failure = failure_of(error)
    return error if failure is None else failure


def _fail(batch: list[PendingSend], error: BaseException) -> None:
    for pending in batch:
        if not pending.done():
            pending.set_exception(error)
