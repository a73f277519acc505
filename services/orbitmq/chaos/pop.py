"""POP consumers through ``orbitmq proxy``, as a RocketMQ 5 SimpleConsumer works.

Each consumer loops ReceiveMessage (long polling, a batch, an invisible duration) and acks every
message it got with AckMessage, over the generated ``apache.rocketmq.v2`` stubs (the official
client would add a thread and its own retry policy to what is measured). A proxy that is gone
(killed, restarting) or stopped answers nothing: the call fails or times out and the consumer
calls again, as an application's loop does. A message not acked (its ack lost, its proxy or
broker killed) becomes visible again after the invisible duration: a re-delivery.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from orbitmq.chaos.history import Delivery, History
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.rocketmq_v2 import definition_pb2 as d
from orbitmq.rocketmq_v2 import service_pb2 as s
from orbitmq.rocketmq_v2 import service_pb2_grpc

POP_GROUP = "ChaosPop"
CONSUMERS = 2
BATCH = 16
INVISIBLE_S = 5
"""How long a received message stays hidden before it is delivered again unacked."""
POLL_S = 1.0
CALL_SLACK_S = 3.0
"""Beyond the long polling: a stopped proxy's call ends here, and the loop calls again."""
RETRY_PAUSE_S = 0.2

Parse = Callable[[bytes], tuple[str, str | None, int | None]]


@dataclass
class PopConsumers:
    """:data:`CONSUMERS` simple consumers of ``topic`` in :data:`POP_GROUP` via ``endpoint``."""

    endpoint: str
    topic: str
    broker_name: str
    history: History
    clock: Callable[[], float]
    parse: Parse
    running: bool = True
    errors: int = 0
    """Calls that failed (proxy gone, stopped, a broker failing over): each one retried."""
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._consume(f"chaos-pop-{n}")) for n in range(CONSUMERS)]

    async def close(self) -> None:
        self.running = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _consume(self, client_id: str) -> None:
        metadata = (("x-mq-client-id", client_id),)
        group = d.Resource(name=POP_GROUP)
        topic = d.Resource(name=self.topic)
        async with grpc.aio.insecure_channel(self.endpoint, GRPC_OPTIONS) as channel:  # 5 s backoff at most
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            while self.running:
                try:
                    messages = await self._receive(stub, group, metadata)
                    if messages:
                        await self._ack(stub, group, topic, messages, metadata)
                except (grpc.aio.AioRpcError, TimeoutError):
                    self.errors += 1
                    await asyncio.sleep(RETRY_PAUSE_S)

    async def _receive(
        self, stub: service_pb2_grpc.MessagingServiceStub, group: d.Resource, metadata: tuple[tuple[str, str]]
    ) -> list[d.Message]:
        request = s.ReceiveMessageRequest(
            group=group,
            message_queue=d.MessageQueue(
                topic=d.Resource(name=self.topic), id=-1, broker=d.Broker(name=self.broker_name)
            ),
            batch_size=BATCH,
        )
        request.invisible_duration.FromSeconds(INVISIBLE_S)
        request.long_polling_timeout.FromMilliseconds(int(POLL_S * 1000))
        messages: list[d.Message] = []
        async with asyncio.timeout(POLL_S + CALL_SLACK_S):
            async for frame in stub.ReceiveMessage(request, metadata=metadata, timeout=POLL_S + CALL_SLACK_S):
                if frame.WhichOneof("content") == "message":
                    messages.append(frame.message)
        now = self.clock()
        for message in messages:
            message_id, key, seq = self.parse(message.body)
            props = message.system_properties
            self.history.add_delivery(
                Delivery(message_id, POP_GROUP, now, props.queue_id, props.queue_offset, key, seq)
            )
        return messages

    async def _ack(
        self,
        stub: service_pb2_grpc.MessagingServiceStub,
        group: d.Resource,
        topic: d.Resource,
        messages: list[d.Message],
        metadata: tuple[tuple[str, str]],
    ) -> None:
        """One AckMessage for the batch; a refused or lost ack leaves the message to come again."""
        entries = [
            s.AckMessageEntry(
                message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle
            )
            for m in messages
        ]
        reply = await stub.AckMessage(
            s.AckMessageRequest(group=group, topic=topic, entries=entries),
            metadata=metadata,
            timeout=CALL_SLACK_S,
        )
        if reply.status.code not in (d.OK, d.MULTIPLE_RESULTS):
            self.errors += 1
