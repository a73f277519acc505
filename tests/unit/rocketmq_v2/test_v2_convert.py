"""Pure translation between apache.rocketmq.v2 and orbitmq: delivery times, transaction ids,
message properties, queue permissions."""

from __future__ import annotations

import gzip
import hashlib
import zlib

import pytest

from orbitmq.common.topics import DELAY_LEVELS_MS
from orbitmq.proxy import convert, routes
from orbitmq.proxy.convert import Refused, TransactionRef
from orbitmq.rocketmq_v2 import definition_pb2 as v2
from orbitmq.v1 import common_pb2

NOW_MS = 1_700_000_000_000
LIMIT = 4 * 1024 * 1024


def _message(**system: object) -> v2.Message:
    message = v2.Message(topic=v2.Resource(name="T"), body=system.pop("body", b"body"))  # type: ignore[arg-type]
    message.system_properties.message_id = "01ID"
    for name, value in system.items():
        setattr(message.system_properties, name, value)
    return message


def test_delivery_timestamp_beyond_the_timer_maximum_is_refused_not_delivered_early() -> None:
    message = _message(message_type=v2.DELAY)
    message.system_properties.delivery_timestamp.FromMilliseconds(NOW_MS + convert.TIMER_MAX_DELAY_MS + 1)
    with pytest.raises(Refused) as refused:
        convert.outbound(message, NOW_MS, DELAY_LEVELS_MS, LIMIT)
    assert refused.value.code == v2.ILLEGAL_DELIVERY_TIME
    assert "259200 s" in refused.value.message
    message.system_properties.delivery_timestamp.FromMilliseconds(NOW_MS + convert.TIMER_MAX_DELAY_MS)
    assert convert.outbound(message, NOW_MS, DELAY_LEVELS_MS, LIMIT).message.deliver_at_ms == (
        NOW_MS + convert.TIMER_MAX_DELAY_MS
    )


def test_transaction_ids_carry_broker_and_offset_and_round_trip() -> None:
    ref = TransactionRef("broker-a", 123_456, "01ID:with:colons")
    assert TransactionRef.decode(ref.encode()) == ref
    for bad in ("", "broker-a", "broker-a:x:1", ":1:2"):
        with pytest.raises(Refused) as refused:
            TransactionRef.decode(bad)
        assert refused.value.code == v2.INVALID_TRANSACTION_ID


def test_outbound_maps_system_properties_to_rocketmq_property_names() -> None:
    message = _message(tag="TagA", message_type=v2.FIFO, message_group="g1")
    message.system_properties.keys.extend(["k1", "k2"])
    message.user_properties["color"] = "red"
    out = convert.outbound(message, NOW_MS, DELAY_LEVELS_MS, LIMIT)
    proto = out.message.to_proto("unused")
    assert dict(proto.properties) == {
        "TAGS": "TagA",
        "KEYS": "k1 k2",
        "UNIQ_KEY": "01ID",
        "__SHARDINGKEY": "g1",
        "color": "red",
    }
    assert (out.sharding_key, out.message_type, proto.body) == ("g1", v2.FIFO, b"body")


def test_user_properties_named_like_any_system_property_are_illegal_keys() -> None:
    """The one list (orbitmq.common.properties): RocketMQ's reserved names, not only those
    orbitmq reads; the message names the key. Stored system names never show as user ones."""
    for name in ("UNIQ_KEY", "CLUSTER", "MSG_REGION", "TRACE_ON", "__STARTDELIVERTIME", "TIMER_ENQUEUE_MS"):
        message = _message()
        message.user_properties.update({"color": "red", name: "x"})
        with pytest.raises(Refused) as caught:
            convert.outbound(message, NOW_MS, DELAY_LEVELS_MS, LIMIT)
        assert caught.value.code == v2.ILLEGAL_MESSAGE_PROPERTY_KEY
        assert f"{name!r} is reserved for the system" in caught.value.message
    message = convert.inbound(
        "T",
        b"b",
        {"UNIQ_KEY": "01ID", "CLUSTER": "c", "TRACE_ON": "true", "color": "red"},
        born_timestamp_ms=1,
        born_host="h",
        store_timestamp_ms=2,
        queue_id=0,
        queue_offset=0,
        message_type=v2.NORMAL,
    )
    assert dict(message.user_properties) == {"color": "red"}


def test_outbound_gzip_body_is_stored_decompressed_and_namespaces_prefix_topics() -> None:
    message = _message(body=gzip.compress(b"plain text"), body_encoding=v2.GZIP)
    message.topic.resource_namespace = "tenant1"
    out = convert.outbound(message, NOW_MS, DELAY_LEVELS_MS, LIMIT)
    assert (out.message.topic, out.message.body) == ("tenant1%T", b"plain text")
    broken = _message(body=b"not gzip", body_encoding=v2.GZIP)
    with pytest.raises(Refused) as refused:
        convert.outbound(broken, NOW_MS, DELAY_LEVELS_MS, LIMIT)
    assert refused.value.code == v2.MESSAGE_CORRUPTED


def test_delayed_outbound_asks_the_broker_timer_for_the_exact_time() -> None:
    message = _message(message_type=v2.DELAY)
    message.system_properties.delivery_timestamp.FromMilliseconds(NOW_MS + 45_123)
    out = convert.outbound(message, NOW_MS, DELAY_LEVELS_MS, LIMIT)
    assert (out.message.delay_level, out.message.deliver_at_ms) == (0, NOW_MS + 45_123)
    assert out.message.to_proto("unused").properties["TIMER_DELIVER_MS"] == str(NOW_MS + 45_123)


def test_key_with_a_space_is_refused_because_orbitmq_separates_keys_by_spaces() -> None:
    message = _message()
    message.system_properties.keys.append("two words")
    with pytest.raises(Refused) as refused:
        convert.outbound(message, NOW_MS, DELAY_LEVELS_MS, LIMIT)
    assert refused.value.code == v2.ILLEGAL_MESSAGE_KEY and "'two words'" in refused.value.message


def test_inbound_restores_system_properties_with_an_md5_digest() -> None:
    properties = {"UNIQ_KEY": "01ID", "TAGS": "t", "KEYS": "a b", "__SHARDINGKEY": "g", "user": "u"}
    message = convert.inbound(
        "tenant1%T",
        b"123456789",
        properties,
        born_timestamp_ms=NOW_MS,
        born_host="10.0.0.1",
        store_timestamp_ms=NOW_MS + 5,
        queue_id=2,
        queue_offset=7,
        message_type=v2.FIFO,
        namespace="tenant1",
    )
    system = message.system_properties
    assert (message.topic.name, message.topic.resource_namespace) == ("T", "tenant1")
    assert (system.message_id, system.tag, list(system.keys), system.message_group) == (
        "01ID",
        "t",
        ["a", "b"],
        "g",
    )
    assert system.body_digest.type == v2.MD5
    assert system.body_digest.checksum == "25F9E794323B453885F5181F1B624D0B"  # MD5 of "123456789"
    assert dict(message.user_properties) == {"user": "u"}


def test_route_permissions_follow_read_and_write_queue_counts_and_the_topic_permission() -> None:
    route = common_pb2.TopicRoute(
        topic="T",
        queue_datas=[
            common_pb2.QueueData(broker_name="b", read_queue_nums=3, write_queue_nums=2, perm=6),
            common_pb2.QueueData(broker_name="a", read_queue_nums=1, write_queue_nums=2, perm=4),
            common_pb2.QueueData(broker_name="gone", read_queue_nums=4, write_queue_nums=4, perm=6),
        ],
        broker_datas=[
            common_pb2.BrokerData(broker_name="a", broker_addrs={0: "h:1"}),
            common_pb2.BrokerData(broker_name="b", broker_addrs={0: "h:2", 1: "h:3"}),
            common_pb2.BrokerData(broker_name="gone", broker_addrs={1: "h:4"}),  # no master: left out
        ],
    )
    endpoints = routes.endpoints_of("proxy.example:8081")
    queues = routes.message_queues(route, v2.Resource(name="T"), endpoints, convert.ALL_TYPES)
    assert [(q.broker.name, q.id, q.permission) for q in queues] == [
        ("a", 0, v2.READ),
        ("a", 1, v2.NONE),
        ("b", 0, v2.READ_WRITE),
        ("b", 1, v2.READ_WRITE),
        ("b", 2, v2.READ),
    ]
    assert endpoints.scheme == v2.DOMAIN_NAME and routes.endpoints_of("[::1]:8081").scheme == v2.IPv6


def _java_client_accepts(digest: v2.Digest, body: bytes) -> bool:
    """rocketmq-client-java's check (``Utilities``): CRC32 as ``Long.toHexString`` upper-cased,
    MD5 and SHA1 as upper-case hex, compared as strings."""
    expected = {
        v2.CRC32: format(zlib.crc32(body), "X"),
        v2.MD5: hashlib.md5(body).hexdigest().upper(),
        v2.SHA1: hashlib.sha1(body).hexdigest().upper(),
    }[digest.type]
    return digest.checksum == expected


def _python_client_accepts(digest: v2.Digest, body: bytes) -> bool:
    """rocketmq-python-client 5.1's check (``Misc.crc32_checksum`` and friends): CRC32 zero-padded
    to 8 digits, MD5 and SHA1 as upper-case hex."""
    expected = {
        v2.CRC32: format(zlib.crc32(body), "08X"),
        v2.MD5: hashlib.md5(body).hexdigest().upper(),
        v2.SHA1: hashlib.sha1(body).hexdigest().upper(),
    }[digest.type]
    return digest.checksum == expected


@pytest.mark.parametrize("body", [b"d-TagB-1", b"123456789", b"", bytes(range(256))])
def test_body_digest_is_spelled_the_way_every_official_client_checks_it(body: bytes) -> None:
    """Protocol: ``SystemProperties.body_digest`` is compared as a string by each client; a CRC32
    whose hex starts with 0 (``d-TagB-1``: ``8BFF1A9``) was "corrupted" for the Java client."""
    message = convert.inbound(
        "T",
        body,
        {"UNIQ_KEY": "01ID"},
        born_timestamp_ms=NOW_MS,
        born_host="10.0.0.1",
        store_timestamp_ms=NOW_MS,
        queue_id=0,
        queue_offset=0,
        message_type=v2.NORMAL,
    )
    digest = message.system_properties.body_digest
    assert _java_client_accepts(digest, body) and _python_client_accepts(digest, body)
