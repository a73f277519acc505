"""Bad input fails before any task starts, with a message naming the option and its rule."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from sparkkit import ThreadCluster

from orbitmq.client.message import Message

pytestmark = pytest.mark.timeout(180)

TOPIC = "SparkErrors"


@pytest.fixture(scope="module")
def topic(cluster: ThreadCluster) -> str:
    cluster.create_topic(TOPIC, 2, broker="broker-a")
    cluster.send([Message(TOPIC, f"e-{i}".encode()) for i in range(10)])
    return TOPIC


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _failure(run: Any) -> str:
    with pytest.raises(Exception) as caught:  # Spark wraps the Python worker's error in its own
        run()
    return str(caught.value)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            {"startingOffset": "earliest"},
            ["'startingoffset'", "is not an option of the orbitmq reader", "startingOffsets"],
        ),
        (
            {"startingOffsets": '{"SparkErrors": {"broker-a:0": 1}'},
            ["'startingOffsets'", "is not valid JSON"],
        ),
        ({"startingOffsets": json.dumps({"SparkErrors": {"broker-a": 1}})}, ["'<broker name>:<queue id>'"]),
        ({"startingOffsets": "yesterday"}, ["'startingOffsets'", "must be earliest, latest, timestamp:"]),
        ({"startingOffsets": "latest"}, ["'startingOffsets'", "not allowed for a batch read"]),
        (
            {
                "startingOffsets": json.dumps({TOPIC: {"broker-a:0": 5}}),
                "endingOffsets": json.dumps({TOPIC: {"broker-a:0": 2}}),
            },
            ["'endingOffsets'", "before its starting offset 5", "must not precede the start"],
        ),
        (
            {"startingOffsets": json.dumps({TOPIC: {"broker-a:1": 4}}), "endingOffsets": "timestamp:0"},
            ["'endingOffsets'", "broker-a:1 ends at 0, before its starting offset 4"],
        ),
        (
            {"startingOffsets": json.dumps({TOPIC: {"broker-z:0": 1}})},
            ["'startingOffsets'", "broker-z:0", "does not have"],
        ),
        ({"maxOffsetsPerTrigger": "10"}, ["'maxOffsetsPerTrigger'", "readStream only"]),
        ({"minPartitions": "0"}, ["'minPartitions'", "whole number of 1 or more"]),
        ({"tags": "A", "sql": "a > 1"}, ["'sql'", "not both"]),
        ({"sql": "a >>> 1"}, ["'sql'", "not a valid SQL92 filter"]),
        ({"topic": "NoSuchSparkTopic"}, ["'topic'", "NoSuchSparkTopic", "the topic must exist"]),
        ({"topic": "bad topic!"}, ["'topic'", "invalid topic name"]),
    ],
    ids=lambda value: None if isinstance(value, dict) else "",
)
def test_bad_read_options_fail_before_any_task_with_the_option_and_rule(
    spark: Any, cluster: ThreadCluster, topic: str, options: dict[str, str], expected: list[str]
) -> None:
    jobs_before = set(spark.sparkContext.statusTracker().getJobIdsForGroup())
    reader = spark.read.format("orbitmq").option("namesrv", cluster.namesrv).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    message = _failure(lambda: reader.load().collect())
    for text in expected:
        assert text in message, message
    # Planning failed on the driver: no Spark job (hence no task) was started.
    assert set(spark.sparkContext.statusTracker().getJobIdsForGroup()) == jobs_before


def test_a_name_server_that_does_not_answer_is_named(spark: Any) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    reader = spark.read.format("orbitmq").option("namesrv", address).option("topic", TOPIC)
    message = _failure(lambda: reader.load().collect())
    assert "'namesrv'" in message and "no name server answered" in message and address in message, message


def test_a_missing_namesrv_option_is_named(spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORBITMQ_NAMESRV", raising=False)
    message = _failure(lambda: spark.read.format("orbitmq").option("topic", TOPIC).load().collect())
    assert "'namesrv'" in message and "is required" in message, message


def test_bad_writes_fail_before_any_task(spark: Any, cluster: ThreadCluster, topic: str) -> None:
    frame = spark.createDataFrame([(b"x", "t")], "body binary, tag string")
    message = _failure(
        lambda: (
            frame.write.format("orbitmq")
            .option("namesrv", cluster.namesrv)
            .option("topic", topic)
            .mode("append")
            .save()
        )
    )
    assert "column 'tag' is not one the orbitmq writer takes" in message, message

    good = spark.createDataFrame([(b"x",)], "body binary")
    message = _failure(
        lambda: (
            good.write.format("orbitmq")
            .option("namesrv", cluster.namesrv)
            .option("topic", "NoSuchSparkSink")
            .mode("append")
            .save()
        )
    )
    assert "'topic'" in message and "NoSuchSparkSink" in message and "must exist" in message, message

    message = _failure(
        lambda: (
            good.write.format("orbitmq")
            .option("namesrv", cluster.namesrv)
            .option("topic", topic)
            .option("batchSize", "5000")
            .mode("append")
            .save()
        )
    )
    assert "'batchSize'" in message and "between 1 and 1024" in message, message
