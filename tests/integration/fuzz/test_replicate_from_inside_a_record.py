"""Replication asked to start inside a record is refused with INVALID_OFFSET: the master's stream
loop read an empty span there forever without yielding to the event loop, so one such request
froze the whole broker (health checks, sends, name-server heartbeats; found by the RPC fuzzer)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orbitmq.bench.fuzz import Child
from orbitmq.common.rpc import failure_of
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(60)


def test_replicate_from_inside_a_record_is_refused_and_the_broker_stays_responsive(tmp_path: Path) -> None:
    no_metrics = ["--metrics-listen", ""]
    store_flags = ["--data-dir", str(tmp_path / "broker"), "--segment-bytes", str(8 * 1024 * 1024)]
    namesrv = Child("namesrv", ["namesrv", "--listen", "127.0.0.1:0", *no_metrics], tmp_path / "namesrv.log")
    broker = Child(
        "broker",
        ["broker", "--listen", "127.0.0.1:0", *no_metrics, "--namesrv", namesrv.address, *store_flags],
        tmp_path / "broker.log",
    )
    try:
        with grpc.insecure_channel(broker.address) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            topic = common_pb2.TopicConfig(topic_name="R", read_queue_nums=1, write_queue_nums=1)
            stub.CreateTopic(broker_pb2.CreateTopicRequest(topic=topic), timeout=10)
            message = common_pb2.Message(topic="R", body=b"one record")
            sent = stub.SendMessage(
                broker_pb2.SendMessageRequest(producer_group="PG", topic="R", queue_id=0, messages=[message]),
                timeout=10,
            )
            assert sent.msg_ids
            for inside in (1, 7, 20):
                asks = iter([broker_pb2.ReplicaAck(slave_addr="127.0.0.1:1", max_offset=inside)])
                with pytest.raises(grpc.RpcError) as caught:
                    list(stub.Replicate(asks, timeout=5))
                failure = failure_of(caught.value)
                assert failure is not None and failure.reason == ErrorReason.INVALID_OFFSET, caught.value
                assert f"asks from offset {inside}, where no record starts" in failure.message
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        broker.stop()
        namesrv.stop()
    assert broker.log_faults() == []
