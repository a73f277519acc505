"""``orbitmq admin group create`` makes every kind of group the ``Admin`` API makes (RocketMQ's
``updateSubGroup`` options): ``--fifo``/``--orderly``, ``--max-retries``, ``--retry-queues``,
``--broadcast/--no-broadcast``, ``--consume-enable/--no-consume-enable``. Each is read back
through ``group list --json`` and the ``Admin`` API, and takes effect: the proxy tells an official
RocketMQ 5 consumer of a ``--fifo`` group to consume FIFO with the group's attempts, and a broker
refuses pulls of a ``--no-consume-enable`` group."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc
from v2kit import V2Cluster, call, message, official_producer, official_simple_consumer, v2_cluster

from orbitmq.cli.main import main
from orbitmq.client.admin import Admin
from orbitmq.common.rpc import failure_of
from orbitmq.v1 import broker_pb2, common_pb2

pytestmark = pytest.mark.timeout(60)

CLIENT = (("x-mq-client-id", "group-cli-test@1"),)


async def cli(*args: str) -> tuple[int, str]:
    """Run ``orbitmq …`` in a thread (the command runs its own event loop)."""
    result = await asyncio.to_thread(CliRunner().invoke, main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


async def consumer_settings(cluster: V2Cluster, group: str) -> d.Settings:
    """What the proxy tells an official push consumer of ``group`` (Telemetry settings)."""
    async with grpc.aio.insecure_channel(cluster.endpoint) as channel:
        call = service_pb2_grpc.MessagingServiceStub(channel).Telemetry(metadata=CLIENT)
        settings = d.Settings(
            client_type=d.PUSH_CONSUMER, subscription=d.Subscription(group=d.Resource(name=group))
        )
        await call.write(s.TelemetryCommand(settings=settings))
        reply = await asyncio.wait_for(call.read(), 5)
        call.cancel()
    assert reply.status.code == d.OK
    return reply.settings


async def test_group_create_options_are_stored_listed_and_obeyed(tmp_path: Path) -> None:
    async with v2_cluster(tmp_path) as cluster:
        ns = ("--namesrv", cluster.namesrv.address)
        code, out = await cli(
            "admin", "group", "create", "--group", "g-fifo", "--fifo", "--max-retries", "2",
            "--retry-queues", "3", "--no-broadcast", "--json", *ns,
        )  # fmt: skip
        assert code == 0, out
        created = json.loads(out)
        assert created["brokers"] == [cluster.broker.broker.address]
        assert (created["fifo"], created["max_retries"], created["retry_queues"]) == (True, 2, 3)
        for args in (["--group", "g-orderly", "--orderly"], ["--group", "g-plain"]):
            code, out = await cli("admin", "group", "create", *args, *ns)
            assert code == 0, out
        code, out = await cli("admin", "group", "create", "--group", "g-off", "--no-consume-enable", *ns)
        assert code == 0, out

        code, out = await cli("admin", "group", "list", "--json", *ns)
        assert code == 0, out
        rows = {r["group"]: r for r in json.loads(out)}
        shown = ("orderly", "retry_max", "retry_queues", "broadcast_allowed", "consume_enabled")
        assert {g: tuple(rows[g][k] for k in shown) for g in ("g-fifo", "g-orderly", "g-plain", "g-off")} == {
            "g-fifo": (True, 2, 3, False, True),
            "g-orderly": (True, 16, 1, True, True),
            "g-plain": (False, 16, 1, True, True),
            "g-off": (False, 16, 1, True, False),
        }
        async with Admin(cluster.namesrv.address) as admin:
            config = (await admin.groups())["g-fifo"]
        assert (config.consume_message_orderly, config.retry_max_times, config.retry_queue_nums) == (
            True,
            2,
            3,
        )
        assert not config.consume_broadcast_enable

        fifo, plain = await consumer_settings(cluster, "g-fifo"), await consumer_settings(cluster, "g-plain")
        assert (fifo.subscription.fifo, fifo.backoff_policy.max_attempts) == (True, 3)
        assert (plain.subscription.fifo, plain.backoff_policy.max_attempts) == (False, 17)

        code, out = await cli("admin", "topic", "create", "--topic", "GroupCli", *ns)
        assert code == 0, out
        pull = broker_pb2.PullMessageRequest(
            consumer_group="g-off",
            topic="GroupCli",
            queue_id=0,
            queue_offset=0,
            max_msg_nums=1,
            commit_offset=-1,
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await cluster.broker.stub.PullMessage(pull)
        failure = failure_of(refused.value)
        assert failure is not None and failure.reason_name == "NO_PERMISSION"
        code, out = await cli("admin", "group", "create", "--group", "g-off", *ns)  # the defaults again
        assert code == 0, out
        await cluster.broker.stub.PullMessage(pull)

        # g-fifo was created --no-broadcast: its pulls are refused once a member says it
        # broadcasts, as RocketMQ's pull does; a clustering member's are served.
        for model in (common_pb2.CLUSTERING, common_pb2.BROADCASTING):
            member = broker_pb2.ConsumerData(group="g-fifo", message_model=model)
            await cluster.broker.stub.Heartbeat(
                broker_pb2.HeartbeatRequest(client_id=f"member-{model}", consumers=[member])
            )
            pull.consumer_group = "g-fifo"
            if model == common_pb2.CLUSTERING:
                await cluster.broker.stub.PullMessage(pull)
                continue
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await cluster.broker.stub.PullMessage(pull)
            failure = failure_of(refused.value)
            assert failure is not None and failure.reason_name == "NO_PERMISSION"
            assert "'g-fifo' may not consume by broadcasting" in failure.message


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--max-retries", "1001"], "'--max-retries' / '--retry-max': 1001 is not in the range 0<=x<=1000"),
        (["--retry-max", "-1"], "-1 is not in the range 0<=x<=1000"),
        (["--retry-queues", "0"], "'--retry-queues': 0 is not in the range 1<=x<=1024"),
    ],
)
def test_out_of_range_group_settings_are_refused_naming_the_value_and_the_rule(
    args: list[str], said: str
) -> None:
    result = CliRunner().invoke(main, ["admin", "group", "create", "--group", "g", *args])
    assert result.exit_code == 2 and said in result.output, result.output


async def test_consume_from_last_gives_a_new_official_consumer_only_what_is_sent_after_it_began(
    tmp_path: Path,
) -> None:
    """``--consume-from last`` (RocketMQ's ``consumeFromMinEnable`` off): an official
    SimpleConsumer of the new group does not see the backlog sent before its first receive, a
    ``first`` group (the default) does; both are listed with their setting."""
    async with v2_cluster(tmp_path) as cluster:
        ns = ("--namesrv", cluster.namesrv.address)
        for group, start in (("g-last", "last"), ("g-first", "first")):
            code, out = await cli("admin", "group", "create", "--group", group, "--consume-from", start, *ns)
            assert code == 0, out
        code, out = await cli(
            "admin",
            "topic",
            "create",
            "--topic",
            "FromLast",
            "--read-queues",
            "1",
            "--write-queues",
            "1",
            *ns,
        )
        assert code == 0, out
        async with official_producer(cluster.endpoint, ["FromLast"]) as producer:
            for i in range(3):
                await call(producer.send, message("FromLast", f"backlog-{i}".encode()))
            async with official_simple_consumer(cluster.endpoint, "g-last", ["FromLast"], await_s=1) as last:
                assert await call(last.receive, 16, 30) == []  # begins here: the backlog is not its
                await call(producer.send, message("FromLast", b"after"))
                got = await call(last.receive, 16, 30)
                assert [m.body for m in got] == [b"after"]
            async with official_simple_consumer(
                cluster.endpoint, "g-first", ["FromLast"], await_s=1
            ) as first:
                bodies = [m.body for m in await call(first.receive, 16, 30)]
        assert bodies == [b"backlog-0", b"backlog-1", b"backlog-2", b"after"]
        code, out = await cli("admin", "group", "list", "--json", *ns)
        rows = {r["group"]: r["consume_from"] for r in json.loads(out)}
        assert (rows["g-last"], rows["g-first"]) == ("last", "first")
