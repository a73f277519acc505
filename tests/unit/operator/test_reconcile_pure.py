"""The reconcilers' pure halves: what is applied and when, topic and group CRs as Admin calls,
refusals as condition reasons, failover members following pods, and the operator's config."""

from __future__ import annotations

import grpc
import pytest

from orbitmq.common.rpc import RpcFailure
from orbitmq.ha import Policy
from orbitmq.ha.group import BrokerGroupFailover
from orbitmq.v1 import broker_pb2
from orbitmq.v1.broker_pb2 import ErrorReason
from orbitmq_operator.builders import Cluster, desired_objects
from orbitmq_operator.builders.errors import SpecError
from orbitmq_operator.config import NamesrvMode, OperatorConfig, parse_overrides
from orbitmq_operator.reconcile import conditions
from orbitmq_operator.reconcile.apply import ANNOTATION_APPLIED_HASH, applied_hash, needs_apply, stamped
from orbitmq_operator.reconcile.conditions import Reason
from orbitmq_operator.reconcile.failover import ClusterFailover, sync_members, wanted_groups
from orbitmq_operator.reconcile.resources import (
    group_arguments,
    refusal_of,
    resource_status,
    topic_arguments,
)
from orbitmq_operator.spec import ClusterSpec, ConsumerGroupSpec, TopicSpec


def objects(**brokers: object) -> list[dict]:
    spec = ClusterSpec.model_validate({"image": "orbitmq:test", "brokers": brokers})
    return desired_objects(Cluster("demo", "ns", "uid", spec))


def test_an_applied_object_is_skipped_until_its_content_changes() -> None:
    before = {(o["kind"], o["metadata"]["name"]): o for o in objects(groups=1)}
    live = {key: stamped(o) for key, o in before.items()}
    after = {(o["kind"], o["metadata"]["name"]): o for o in objects(groups=1, slavesPerGroup=2)}
    changed = sorted(key for key, o in after.items() if needs_apply(o, live.get(key)))
    assert changed == [("StatefulSet", "demo-broker-0")]
    assert needs_apply(after[("Service", "demo-broker-0")], None), "missing: applied"


def test_the_hash_ignores_key_order_and_is_what_is_stamped() -> None:
    manifest = objects()[0]
    reordered = dict(reversed(list(manifest.items())))
    assert applied_hash(reordered) == applied_hash(manifest)
    assert stamped(manifest)["metadata"]["annotations"][ANNOTATION_APPLIED_HASH] == applied_hash(manifest)
    assert "annotations" not in manifest["metadata"], "the builders' dict is not changed"


def test_topic_cr_to_admin_arguments() -> None:
    spec = TopicSpec.model_validate(
        {
            "cluster": "demo",
            "topicName": "Orders",
            "readQueues": 8,
            "writeQueues": 4,
            "perm": 6,
            "force": True,
        }
    )
    assert topic_arguments(spec, "demo") == {
        "read_queue_nums": 8,
        "write_queue_nums": 4,
        "perm": 6,
        "order": False,
        "cluster": "demo",
        "update_existing": True,
        "force": True,
    }


def test_group_cr_to_admin_arguments() -> None:
    spec = ConsumerGroupSpec.model_validate(
        {
            "cluster": "demo",
            "groupName": "billing",
            "retryMaxTimes": 3,
            "broadcastAllowed": False,
            "orderly": True,
        }
    )
    assert group_arguments(spec, "demo") == {
        "retry_max_times": 3,
        "consume_broadcast_enable": False,
        "orderly": True,
        "cluster": "demo",
    }


def test_refusals_become_reasons_a_user_can_act_on() -> None:
    hide = refusal_of(RpcFailure(ErrorReason.WOULD_HIDE_MESSAGES, "queue 3 holds 5 messages"), "topic 'T'")
    assert (hide.reason, hide.retriable) == (Reason.WOULD_HIDE_MESSAGES, False)
    assert "queue 3 holds 5 messages" in hide.message and "spec.force: true" in hide.message
    none = refusal_of(RpcFailure(ErrorReason.SERVICE_NOT_AVAILABLE, "no master broker"), "topic 'T'")
    assert (none.reason, none.retriable) == (Reason.BROKERS_UNREACHABLE, True)
    bad = refusal_of(RpcFailure(ErrorReason.INVALID_ARGUMENT, "perm 9"), "topic 'T'")
    assert (bad.reason, bad.retriable) == (Reason.REFUSED, False)


async def test_an_unreachable_name_server_is_brokers_unreachable() -> None:
    async with grpc.aio.insecure_channel("127.0.0.1:1") as channel:
        try:
            await channel.unary_unary("/x.Y/Z")(b"", timeout=2)
        except grpc.aio.AioRpcError as error:
            refusal = refusal_of(error, "topic 'T'")
    assert refusal.reason is Reason.BROKERS_UNREACHABLE and "UNAVAILABLE" in refusal.message


def test_resource_status_lists_where_it_is() -> None:
    status = resource_status(
        conditions.ready(Reason.APPLIED, "on all"), 2, None, "2025-01-01T00:00:00Z", ["b-1", "b-0"]
    )
    assert status["appliedTo"] == ["b-0", "b-1"] and status["observedGeneration"] == 2
    assert {c["type"]: c["reason"] for c in status["conditions"]}["Ready"] == "Applied"


def test_failover_members_follow_the_pods_and_keep_their_state() -> None:
    failover = BrokerGroupFailover([], "SYNC_MASTER", Policy(detection_window_ms=3_000))
    sync_members(failover, {"demo-broker-0-0": "10.0.0.5", "demo-broker-0-1": None})
    assert [(m.name, m.address) for m in failover.members] == [
        ("demo-broker-0-0", "10.0.0.5:10911"),
        ("demo-broker-0-1", None),
    ]
    failover.members[0].state = broker_pb2.HaState(role="SYNC_MASTER", epoch=4)
    sync_members(failover, {"demo-broker-0-0": None, "demo-broker-0-1": "10.0.0.6"})
    master = failover.member("demo-broker-0-0")
    assert master.address is None and master.state is not None and master.state.epoch == 4, (
        "a restarting master keeps its epoch: the decision needs it"
    )
    sync_members(failover, {"demo-broker-0-1": "10.0.0.6"})
    assert [m.name for m in failover.members] == ["demo-broker-0-1"]


def test_cluster_failover_follows_spec_and_groups() -> None:
    state = ClusterFailover()
    state.configure(
        {"g0": {"p0": "10.0.0.1"}, "g1": {"p1": None}}, "ASYNC_MASTER", Policy(detection_window_ms=2_000)
    )
    assert sorted(state.groups) == ["g0", "g1"]
    state.configure({"g0": {"p0": "10.0.0.1"}}, "SYNC_MASTER", Policy(detection_window_ms=5_000))
    assert list(state.groups) == ["g0"]
    assert state.groups["g0"].master_role == "SYNC_MASTER"
    assert state.groups["g0"].policy.detection_window_ms == 5_000


def test_config_from_environment() -> None:
    config = OperatorConfig.from_env(
        {
            "ORBITMQ_OPERATOR_NAMESRV_MODE": "pod-ip",
            "ORBITMQ_OPERATOR_NAMESRV_OVERRIDES": "ns/demo=127.0.0.1:9876;127.0.0.1:9877, ns/other=h:1",
        }
    )
    assert config.namesrv_mode is NamesrvMode.POD_IP
    assert config.namesrv_overrides == {"ns/demo": "127.0.0.1:9876;127.0.0.1:9877", "ns/other": "h:1"}
    assert OperatorConfig.from_env({}).namesrv_mode is NamesrvMode.SERVICE


def test_a_bad_override_names_the_rule() -> None:
    with pytest.raises(SpecError, match="<namespace>/<cluster>=<host:port>"):
        parse_overrides("demo=127.0.0.1:9876")


def test_surplus_groups_being_drained_or_removed_are_not_failed_over() -> None:
    """Deleting a drained group's StatefulSet terminates its master and slave one by one; the
    failover daemon must not read that as a dead master with a live slave."""
    pods = {
        "demo-broker-0": {"demo-broker-0-0": "10.0.0.1", "demo-broker-0-1": "10.0.0.2"},
        "demo-broker-1": {"demo-broker-1-0": None, "demo-broker-1-1": "10.0.0.4"},
    }
    assert wanted_groups(pods, "demo", 2) == pods
    assert wanted_groups(pods, "demo", 1) == {"demo-broker-0": pods["demo-broker-0"]}
    state = ClusterFailover()
    state.configure(wanted_groups(pods, "demo", 1), "ASYNC_MASTER", Policy(detection_window_ms=1000))
    assert list(state.groups) == ["demo-broker-0"]
