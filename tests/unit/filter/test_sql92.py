"""SQL92 property filters: parsing, three-valued evaluation, errors, caching and speed."""

from __future__ import annotations

import re
import time

import pytest

from orbitmq.common.errors import OrbitError
from orbitmq.filter.sql92 import (
    MAX_EXPRESSION_LENGTH,
    Sql92Error,
    Sql92Filter,
    compile_sql92,
    validate_sql92,
)
from orbitmq.store.message_filter import MessageFilter

# (expression, properties, expected evaluate() result: True / False / None = unknown)
VALID_CASES: list[tuple[str, dict[str, str], bool | None]] = [
    # BETWEEN is inclusive; a non-number is neither inside nor outside; missing is unknown
    ("a BETWEEN 0 AND 3", {"a": "0"}, True),
    ("a BETWEEN 0 AND 3", {"a": "3"}, True),
    ("a BETWEEN 0 AND 3", {"a": "4"}, False),
    ("a BETWEEN 0 AND 3", {"a": "-1"}, False),
    ("a BETWEEN 0 AND 3", {"a": "1.5"}, True),
    ("a BETWEEN 0 AND 3", {}, None),
    ("a BETWEEN 0 AND 3", {"a": "x"}, False),
    ("a BETWEEN 5 AND 1", {"a": "3"}, False),
    ("a BETWEEN -2.5 AND -1", {"a": "-2"}, True),
    ("a NOT BETWEEN 0 AND 3", {"a": "4"}, True),
    ("a NOT BETWEEN 0 AND 3", {"a": "2"}, False),
    ("a NOT BETWEEN 0 AND 3", {}, None),
    ("a NOT BETWEEN 0 AND 3", {"a": "x"}, False),
    ("NOT (a BETWEEN 0 AND 3)", {"a": "x"}, True),
    # numeric comparisons: ints, decimals, negatives, exponents
    ("a = 1", {"a": "1"}, True),
    ("a = 1", {"a": "2"}, False),
    ("a = 1", {"a": "1.0"}, True),
    ("a = 1", {"a": "+1"}, True),
    ("a = 1000", {"a": "1e3"}, True),
    ("a = 1", {"a": " 1"}, False),
    ("a = 1", {"a": "1_0"}, False),
    ("a = 1", {"a": "x"}, False),
    ("a = 1", {}, None),
    ("a <> 1", {"a": "2"}, True),
    ("a <> 1", {"a": "1"}, False),
    ("a <> 1", {"a": "x"}, True),
    ("a <> 1", {}, None),
    ("a > 1", {"a": "2"}, True),
    ("a > 1", {"a": "1"}, False),
    ("a > 1", {"a": "x"}, False),
    ("a >= 1", {"a": "1"}, True),
    ("a >= 1", {"a": "0"}, False),
    ("a < 1", {"a": "0"}, True),
    ("a < 1", {"a": "1"}, False),
    ("a <= 1", {"a": "1"}, True),
    ("a <= 1", {"a": "2"}, False),
    ("a < 1", {"a": "nan"}, False),
    ("a > 1", {"a": "inf"}, False),
    ("a > 1.5", {"a": "1.6"}, True),
    ("a > 1.5", {"a": "1.5"}, False),
    ("a = 0.1", {"a": "0.1"}, True),
    ("a >= 2.25", {"a": "3"}, True),
    ("a < -1", {"a": "-2"}, True),
    ("a < -1", {"a": "-1"}, False),
    ("a = -0.5", {"a": "-0.5"}, True),
    ("a>-1", {"a": "0"}, True),
    ("a > 2e3", {"a": "2001"}, True),
    ("a > 9007199254740993", {"a": "9007199254740994"}, True),
    # strings: exact, case-sensitive, quotes escaped by doubling
    ("a = 'abc'", {"a": "abc"}, True),
    ("a = 'abc'", {"a": "ABC"}, False),
    ("a = 'abc'", {}, None),
    ("a <> 'abc'", {"a": "abd"}, True),
    ("a <> 'abc'", {"a": "abc"}, False),
    ("a = ''", {"a": ""}, True),
    ("a = 'it''s'", {"a": "it's"}, True),
    ("a = ''''", {"a": "'"}, True),
    ("a = 'x AND y = ''z'''", {"a": "x AND y = 'z'"}, True),
    ("a = '1'", {"a": "1.0"}, False),
    ("a = ' spaced  '", {"a": " spaced  "}, True),
    ("a = 'día'", {"a": "día"}, True),
    # IN / NOT IN
    ("a IN ('x', 'y')", {"a": "y"}, True),
    ("a IN ('x', 'y')", {"a": "z"}, False),
    ("a IN ('x', 'y')", {}, None),
    ("a IN ('x')", {"a": "x"}, True),
    ("a NOT IN ('x', 'y')", {"a": "z"}, True),
    ("a NOT IN ('x', 'y')", {"a": "x"}, False),
    ("a NOT IN ('x', 'y')", {}, None),
    ("a IN (1, 2)", {"a": "2.0"}, True),
    ("a IN (1, 'b')", {"a": "b"}, True),
    ("a IN (1, 2)", {"a": "x"}, False),
    ("a NOT IN (1, 2)", {"a": "x"}, True),
    # IS NULL / IS NOT NULL never unknown
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": ""}, False),
    ("a IS NOT NULL", {"a": "v"}, True),
    ("a IS NOT NULL", {}, False),
    ("NOT a IS NULL", {}, False),
    # booleans
    ("a = TRUE", {"a": "true"}, True),
    ("a = TRUE", {"a": "TRUE"}, True),
    ("a = TRUE", {"a": "false"}, False),
    ("a = FALSE", {"a": "False"}, True),
    ("a = TRUE", {"a": "yes"}, False),
    ("a = FALSE", {"a": "yes"}, False),
    ("a <> TRUE", {"a": "false"}, True),
    ("a <> TRUE", {"a": "true"}, False),
    ("a = TRUE", {}, None),
    # precedence: comparison > NOT > AND > OR
    ("a = 1 OR b = 2 AND c = 3", {"a": "1", "b": "0", "c": "0"}, True),
    ("a = 1 OR b = 2 AND c = 3", {"a": "0", "b": "2", "c": "0"}, False),
    ("a = 1 OR b = 2 AND c = 3", {"a": "0", "b": "2", "c": "3"}, True),
    ("(a = 1 OR b = 2) AND c = 3", {"a": "1", "b": "0", "c": "0"}, False),
    ("(a = 1 OR b = 2) AND c = 3", {"a": "1", "b": "0", "c": "3"}, True),
    ("b = 2 AND c = 3 OR a = 1", {"a": "1", "b": "0", "c": "0"}, True),
    ("NOT a = 1 AND b = 2", {"a": "2", "b": "2"}, True),
    ("NOT a = 1 AND b = 2", {"a": "1", "b": "2"}, False),
    ("NOT a = 1 AND b = 2", {"a": "2", "b": "3"}, False),
    ("NOT (a = 1 AND b = 2)", {"a": "2", "b": "3"}, True),
    ("NOT NOT a = 1", {"a": "1"}, True),
    ("NOT a = 1 OR b = 2", {"a": "1", "b": "2"}, True),
    ("((a = 1))", {"a": "1"}, True),
    ("a = 1 AND (b = 2 OR (c = 3 AND NOT d = 4))", {"a": "1", "b": "0", "c": "3", "d": "5"}, True),
    # NULL propagation (three-valued logic)
    ("NOT (a > 1)", {}, None),
    ("NOT (a > 1)", {"a": "0"}, True),
    ("a > 1 OR b = 'x'", {"b": "x"}, True),
    ("a > 1 OR b = 'x'", {"b": "y"}, None),
    ("a > 1 OR b = 'x'", {"a": "0", "b": "y"}, False),
    ("a > 1 OR b = 'x'", {}, None),
    ("a > 1 AND b = 'x'", {"b": "y"}, False),
    ("a > 1 AND b = 'x'", {"b": "x"}, None),
    ("a > 1 AND b = 'x'", {"a": "2", "b": "x"}, True),
    ("a IS NULL OR a > 1", {}, True),
    ("a IS NOT NULL AND a > 1", {}, False),
    # case-insensitive keywords, free whitespace
    ("a between 0 and 3 or b is not null", {"b": "v"}, True),
    ("a Not In ('x') AnD b = true", {"a": "y", "b": "TRUE"}, True),
    ("not a is null", {"a": "v"}, True),
    ("  a\n=\t1  ", {"a": "1"}, True),
    # property names: dots, dollars, underscores, keyword prefixes, RocketMQ system names
    ("TAGS = 'TagA'", {"TAGS": "TagA"}, True),
    ("KEYS IS NOT NULL", {"KEYS": "k1"}, True),
    ("order.region = 'eu'", {"order.region": "eu"}, True),
    ("$price > 10", {"$price": "11"}, True),
    ("_x1 = 1", {"_x1": "1"}, True),
    (
        "andy = 1 AND notes = 'n' AND isx IS NULL AND nullable = 0",
        {"andy": "1", "notes": "n", "nullable": "0"},
        True,
    ),
    ("a = 1", {"A": "1"}, None),
]


@pytest.mark.parametrize(("expression", "properties", "expected"), VALID_CASES)
def test_valid_expressions(expression: str, properties: dict[str, str], expected: bool | None) -> None:
    sql_filter = compile_sql92(expression)
    assert sql_filter.evaluate(properties) is expected
    assert sql_filter.matches_properties(properties) is (expected is True)
    validate_sql92(expression)


# (expression, column the error must name)
INVALID_CASES: list[tuple[str, int]] = [
    ("", 1),
    ("   ", 1),
    ("a >", 4),
    ("a = ", 5),
    ("a BETWEEN 1", 12),
    ("a BETWEEN 1 AND", 16),
    ("a BETWEEN 'x' AND 'y'", 11),
    ("a IN ()", 7),
    ("a IN ('x',)", 11),
    ("a IN ('x' 'y')", 11),
    ("a IN (TRUE)", 7),
    ("a > 'str'", 3),
    ("a <= 'str'", 3),
    ("a > TRUE", 3),
    ("a = NULL", 5),
    ("AND a = 1", 1),
    ("a = 1 AND", 10),
    ("a = 1 OR OR b = 2", 10),
    ("a = 'unterminated", 5),
    ("(a = 1", 7),
    ("a = 1)", 6),
    ("a == 1", 4),
    ("a != 1", 3),
    ("1a = 2", 1),
    ("'x' = a", 1),
    ("a = b", 5),
    ("a = 1 b = 2", 7),
    ("a = 1 andy = 2", 7),
    ("a IS", 5),
    ("a IS NOT", 9),
    ("in = 1", 1),
    ("a # 1", 3),
    ("a = .5", 5),
    ("a = 1; DROP TABLE t", 6),
    ("a" * (MAX_EXPRESSION_LENGTH - 5) + " = 1x", MAX_EXPRESSION_LENGTH),
    ("a = '" + "x" * MAX_EXPRESSION_LENGTH + "'", MAX_EXPRESSION_LENGTH + 1),
    ("NOT " * 200 + "a = 1", 261),
]


@pytest.mark.parametrize(("expression", "column"), INVALID_CASES, ids=lambda v: repr(v)[:40])
def test_invalid_expressions(expression: str, column: int) -> None:
    with pytest.raises(Sql92Error) as caught:
        compile_sql92(expression)
    error = caught.value
    message = str(error)
    assert message.startswith("invalid SQL92 expression ")
    assert repr(expression[:200]).rstrip("'\"") in message
    assert f"at column {column}:" in message
    assert error.column == column
    assert error.expression == expression
    assert isinstance(error, OrbitError)
    assert isinstance(error, ValueError)
    assert not error.retriable
    with pytest.raises(Sql92Error):
        validate_sql92(expression)


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("a >", "at column 4: expected a value"),
        ("a > 'str'", "operator '>'"),
        ("a <= TRUE", "operator '<='"),
        ("a = NULL", "IS NULL"),
        ("a = 'unterminated", "unterminated string"),
        ("AND a = 1", "found 'AND'"),
        ("a == 1", "expected a value, found '='"),
        ("1a = 2", "expected a property name, NOT or '('"),
        ("(a = 1", "expected ')'"),
        ("a BETWEEN 'x' AND 'y'", "expected a number"),
        ("a = 1 b", "expected AND, OR or the end of the expression, found 'b'"),
        ("", "empty"),
        ("x" * (MAX_EXPRESSION_LENGTH + 1), f"at most {MAX_EXPRESSION_LENGTH}"),
    ],
)
def test_error_messages_say_what_was_expected(expression: str, fragment: str) -> None:
    with pytest.raises(Sql92Error, match=re.escape(fragment)):
        compile_sql92(expression)


def test_longest_allowed_expression_compiles() -> None:
    expression = "a = '" + "x" * (MAX_EXPRESSION_LENGTH - 6) + "'"
    assert len(expression) == MAX_EXPRESSION_LENGTH
    assert compile_sql92(expression).matches_properties({"a": "x" * (MAX_EXPRESSION_LENGTH - 6)})


def test_over_long_expression_message_is_truncated() -> None:
    with pytest.raises(Sql92Error) as caught:
        compile_sql92("a = 1 OR " * 1000 + "a = 1")
    assert len(str(caught.value)) < 400


def test_non_string_expression_is_rejected() -> None:
    with pytest.raises(Sql92Error):
        compile_sql92(None)  # type: ignore[arg-type]


def test_filter_implements_message_filter_protocol() -> None:
    sql_filter: MessageFilter = compile_sql92("a = 1")
    assert sql_filter.needs_properties is True
    assert sql_filter.matches_tags_code(0) is True
    assert sql_filter.matches_tags_code(-123456) is True
    assert sql_filter.matches_properties({"a": "1"}) is True
    assert sql_filter.matches_properties({}) is False


def test_filter_attributes() -> None:
    sql_filter = compile_sql92("a = 1 AND (b.c IS NULL OR TAGS IN ('x'))")
    assert sql_filter.expression == "a = 1 AND (b.c IS NULL OR TAGS IN ('x'))"
    assert sql_filter.property_names == frozenset({"a", "b.c", "TAGS"})
    assert "a = 1" in repr(sql_filter)
    assert sql_filter == Sql92Filter("a = 1 AND (b.c IS NULL OR TAGS IN ('x'))")
    assert hash(sql_filter) == hash(Sql92Filter(sql_filter.expression))


def test_compile_is_cached() -> None:
    assert compile_sql92("cached = 'yes'") is compile_sql92("cached = 'yes'")
    assert compile_sql92("cached = 'yes'") is not compile_sql92("cached = 'no'")


def test_evaluation_is_fast() -> None:
    sql_filter = compile_sql92("a = 1 AND b > 2.5 AND c = 'x'")
    properties = {"a": "1", "b": "3.5", "c": "x", "d": "unrelated"}
    assert sql_filter.matches_properties(properties)
    started = time.perf_counter()
    for _ in range(10_000):
        sql_filter.matches_properties(properties)
    assert time.perf_counter() - started < 0.5
