"""Times a client sends with nanos outside protobuf's range are refused with the protocol's code,
not an internal error: protobuf's ToMilliseconds raised ValueError for them, and the proxy
logged a traceback for each QueryOffset by timestamp (found by the RPC fuzzer); PullMessage's
long-polling timeout and SendMessage's delivery timestamp were converted the same way."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from orbitmq.bench.fuzz import CHECK_TOPIC, _create_topics, servers
from orbitmq.rocketmq_v2 import definition_pb2 as v2
from orbitmq.rocketmq_v2 import service_pb2 as pb
from orbitmq.rocketmq_v2 import service_pb2_grpc

pytestmark = pytest.mark.timeout(90)


def test_times_out_of_range_are_refused_with_the_protocols_codes(tmp_path: Path) -> None:
    with servers(tmp_path) as children:
        asyncio.run(_create_topics(children["namesrv"].address))
        queue = v2.MessageQueue(topic=v2.Resource(name=CHECK_TOPIC), id=0, broker=v2.Broker(name="broker-a"))
        with grpc.insecure_channel(children["proxy"].address) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            for nanos in (-1, 1_000_000_000):
                query = pb.QueryOffsetRequest(message_queue=queue, query_offset_policy=v2.TIMESTAMP)
                query.timestamp.seconds, query.timestamp.nanos = 1, nanos  # (the v2 pool's Timestamp)
                status = stub.QueryOffset(query, timeout=10).status
                assert status.code == v2.BAD_REQUEST, status
                assert "timestamp is not a valid time: Timestamp is not valid: Nanos" in status.message

            pull = pb.PullMessageRequest(
                group=v2.Resource(name="G"),
                message_queue=queue,
                offset=0,
                batch_size=1,
                filter_expression=v2.FilterExpression(type=v2.TAG, expression="*"),
            )
            pull.long_polling_timeout.seconds, pull.long_polling_timeout.nanos = 1, -2_000_000_000
            answers = list(stub.PullMessage(pull, timeout=10))
            assert answers[0].status.code == v2.ILLEGAL_POLLING_TIME, answers[0]
    faults = [line for child in children.values() for line in child.log_faults()]
    assert faults == []
