"""``spec.brokers.settings``: checked with the broker's own settings model before anything is
built, and refused with the key and the rule a user must fix."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from orbitmq_operator.builders import Cluster, SpecError, desired_objects
from orbitmq_operator.builders.broker_settings import OWNED_SETTINGS, broker_config_text
from orbitmq_operator.spec import ClusterSpec


def make(settings: dict[str, Any], **brokers: Any) -> Cluster:
    spec = ClusterSpec.model_validate({"image": "orbitmq:1.0", "brokers": {"settings": settings, **brokers}})
    return Cluster("orbit", "mq", "uid", spec)


def refusal(settings: dict[str, Any], **brokers: Any) -> SpecError:
    with pytest.raises(SpecError) as refused:
        desired_objects(make(settings, **brokers))
    assert refused.value.reason == "InvalidSpec"
    return refused.value


@pytest.mark.parametrize("key", sorted(OWNED_SETTINGS))
def test_settings_the_operator_owns_are_refused(key: str) -> None:
    error = refusal({key: "x"})
    assert error.path == f"spec.brokers.settings.{key}"
    assert "set by the operator" in str(error)


def test_owned_settings_say_which_spec_field_to_set() -> None:
    assert "spec.brokers.flushMode" in str(refusal({"flush_mode": "SYNC_FLUSH"}))
    assert "spec.metrics.port" in str(refusal({"metrics_listen": "0.0.0.0:1"}))


def test_topic_auto_creation_is_off_unless_the_spec_turns_it_on() -> None:
    """A misspelt topic in production is TOPIC_NOT_EXIST, not a new topic: brokers the operator
    runs do not create topics on a first send unless ``spec.brokers.autoCreateTopic`` says so."""
    assert yaml.safe_load(broker_config_text(make({})))["auto_create_topic"] is False
    assert yaml.safe_load(broker_config_text(make({}, autoCreateTopic=True)))["auto_create_topic"] is True
    assert "spec.brokers.autoCreateTopic" in str(refusal({"auto_create_topic": True}))


def test_an_unknown_setting_is_named_with_a_suggestion() -> None:
    error = refusal({"lock_expiry": 1000})
    assert error.path == "spec.brokers.settings.lock_expiry"
    assert "not a broker setting; did you mean lock_expiry_ms?" in str(error)
    camel = refusal({"lockExpiryMs": 1000})
    assert "settings are snake_case: lock_expiry_ms" in str(camel)


def test_a_bad_value_is_named_with_the_rule() -> None:
    error = refusal({"lock_expiry_ms": 0})
    assert error.path == "spec.brokers.settings.lock_expiry_ms"
    assert "greater than or equal to 1" in error.problem and "got 0" in error.problem
    assert refusal({"delay_levels": "1s 5x"}).path == "spec.brokers.settings.delay_levels"
    assert refusal({"long_polling_enable": "sometimes"}).path == ("spec.brokers.settings.long_polling_enable")


def test_the_stores_rules_apply_across_settings_and_spec() -> None:
    """A segment must hold the largest message: a rule of two fields, named by both."""
    error = refusal({"max_message_bytes": 8 * 1024 * 1024}, segmentMib=5)
    assert error.path == "spec.brokers.settings"
    assert "segment_bytes" in error.problem and "max_message_bytes" in error.problem


def test_good_settings_reach_the_file_as_given() -> None:
    cluster = make({"transaction_timeout_ms": 9000, "long_polling_enable": False, "delay_levels": "1s"})
    values = yaml.safe_load(broker_config_text(cluster))
    assert values["transaction_timeout_ms"] == 9000
    assert values["long_polling_enable"] is False
    assert values["delay_levels"] == "1s"
    assert "grace_ms" not in values  # defaults stay the broker's own
