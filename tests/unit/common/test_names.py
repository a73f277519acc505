from __future__ import annotations

import pytest

from orbitmq.common.errors import OrbitError
from orbitmq.common.names import (
    GROUP_NAME_MAX_LENGTH,
    NAME_RULE,
    TOPIC_NAME_MAX_LENGTH,
    InvalidNameError,
    validate_group_name,
    validate_topic_name,
)


@pytest.mark.parametrize(
    "name", ["TopicA", "a", "%RETRY%group-1", "%DLQ%g_2", "x|y", "A" * TOPIC_NAME_MAX_LENGTH]
)
def test_valid_topic_names_are_returned_unchanged(name: str) -> None:
    assert validate_topic_name(name) == name


@pytest.mark.parametrize("name", ["group_1", "%RETRY%x", "G" * GROUP_NAME_MAX_LENGTH])
def test_valid_group_names_are_returned_unchanged(name: str) -> None:
    assert validate_group_name(name) == name


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("bad name", "' '"),
        ("topic@group", "'@'"),
        ("caf\u00e9", "'\u00e9'"),
        ("trailing\n", "'\\n'"),
        ("", "must not be empty"),
    ],
)
def test_invalid_topic_names_name_the_value_and_the_rule(name: str, problem: str) -> None:
    with pytest.raises(InvalidNameError) as info:
        validate_topic_name(name)
    message = str(info.value)
    assert repr(name) in message
    assert problem in message
    assert NAME_RULE in message
    assert info.value.name == name
    assert info.value.kind == "topic"


def test_topic_name_length_limit_is_127() -> None:
    with pytest.raises(InvalidNameError, match="128 characters is longer than 127"):
        validate_topic_name("T" * 128)


def test_group_name_length_limit_is_255() -> None:
    validate_group_name("G" * 255)
    with pytest.raises(InvalidNameError, match="256 characters is longer than 255") as info:
        validate_group_name("G" * 256)
    assert "invalid group name" in str(info.value)


def test_long_names_are_shortened_in_the_message() -> None:
    with pytest.raises(InvalidNameError) as info:
        validate_group_name("G" * 5000)
    assert len(str(info.value)) < 300
    assert "(5000 characters)" in str(info.value)


def test_non_strings_are_rejected() -> None:
    with pytest.raises(InvalidNameError, match="must be a string, not int"):
        validate_topic_name(42)  # type: ignore[arg-type]


def test_invalid_name_error_is_a_value_error_and_an_orbit_error() -> None:
    with pytest.raises(InvalidNameError) as info:
        validate_group_name("no spaces")
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, OrbitError)
    assert info.value.retriable is False
