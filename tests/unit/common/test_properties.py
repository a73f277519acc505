"""The one list of system property names and the checks every entry point shares."""

from __future__ import annotations

import pytest

from orbitmq.common.properties import (
    BROKER_PROPERTIES,
    PRODUCER_PROPERTIES,
    ROCKETMQ_SYSTEM_PROPERTIES,
    SYSTEM_PROPERTIES,
    SystemPropertyError,
    check_sent_properties,
    check_user_properties,
)
from orbitmq.common.topics import Property


def test_the_list_holds_rocketmqs_names_and_every_name_orbitmq_uses() -> None:
    for name in ("UNIQ_KEY", "KEYS", "TAGS", "DELAY", "WAIT", "TRAN_MSG", "PGROUP", "__STARTDELIVERTIME"):
        assert name in ROCKETMQ_SYSTEM_PROPERTIES, name
    for name in ("TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_ENQUEUE_MS", "TIMER_ROLL_TIMES", "REAL_QID"):
        assert name in ROCKETMQ_SYSTEM_PROPERTIES, name
    for name in ("CLUSTER", "MSG_REGION", "TRACE_ON", "MIN_OFFSET", "MAX_OFFSET", "__SHARDINGKEY"):
        assert name in ROCKETMQ_SYSTEM_PROPERTIES, name
    used = {value for name, value in vars(Property).items() if name.isupper()}
    assert used <= SYSTEM_PROPERTIES and "TIMER_DELAY_MS" in SYSTEM_PROPERTIES
    assert {"TRANSACTION_CHECK_TIMES", "__transactionId__", "__BORNHOST"} <= SYSTEM_PROPERTIES


def test_a_send_may_carry_what_a_producer_writes_and_nothing_only_the_broker_writes() -> None:
    assert PRODUCER_PROPERTIES <= SYSTEM_PROPERTIES
    assert BROKER_PROPERTIES == SYSTEM_PROPERTIES - PRODUCER_PROPERTIES
    assert {"TAGS", "KEYS", "UNIQ_KEY", "DELAY", "TIMER_DELIVER_MS", "TRAN_MSG"} <= PRODUCER_PROPERTIES
    assert {"REAL_TOPIC", "REAL_QID", "RETRY_TOPIC", "PGROUP", "ORIGIN_MESSAGE_ID"} <= BROKER_PROPERTIES
    check_sent_properties({"TAGS": "a", "UNIQ_KEY": "AB", "color": "red"})
    with pytest.raises(SystemPropertyError, match=r"'RETRY_TOPIC' is reserved .* the broker sets this one"):
        check_sent_properties({"TAGS": "a", "RETRY_TOPIC": "T"})


def test_user_properties_with_a_system_name_are_refused_naming_it_and_the_rule() -> None:
    check_user_properties(["region", "a", "uniq_key", "TIMER_OF_MINE"])  # case and prefix: user names
    with pytest.raises(SystemPropertyError) as caught:
        check_user_properties(["region", "UNIQ_KEY"])
    assert caught.value.name == "UNIQ_KEY" and isinstance(caught.value, ValueError)
    assert "property 'UNIQ_KEY' is reserved for the system" in str(caught.value)
    assert "tags, keys, a delay" in str(caught.value)
