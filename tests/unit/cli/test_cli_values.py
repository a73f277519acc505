"""Values the CLI parses and prints: permissions as letters or numbers, times as ISO-8601."""

from __future__ import annotations

import click
import pytest

from orbitmq.cli.common import Perm, iso_time


@pytest.mark.parametrize(
    ("given", "perm"), [("r", 4), ("w", 2), ("rw", 6), ("WR", 6), ("6", 6), ("7", 7), ("0", 0), (4, 4)]
)
def test_perm_takes_letters_and_numbers(given: object, perm: int) -> None:
    assert Perm().convert(given, None, None) == perm


@pytest.mark.parametrize("given", ["x", "", "8", "-1", "rwx", "read"])
def test_a_bad_perm_names_the_value_and_the_rule(given: str) -> None:
    with pytest.raises(click.BadParameter) as error:
        Perm().convert(given, None, None)
    assert f"{given!r} is not a permission: give r, w or rw, or a number 0-7" in str(error.value)


def test_iso_time_is_utc_with_milliseconds_and_never_is_none() -> None:
    assert iso_time(1_795_676_083_675) == "2026-11-26T06:54:43.675+00:00"
    assert iso_time(0) is None
