"""SQL92 conditions over message properties (RocketMQ's ``MessageSelector.bySql``).

A consumer may subscribe with a condition such as ``region = 'eu' AND (price > 10.5 OR vip = TRUE)``;
the broker compiles it once (:func:`compile_sql92`, cached) and evaluates the compiled
:class:`Sql92Filter` against each message's properties. The text is parsed by a real LALR parser
(``lark``, grammar below) and turned into a tree of small closures, so evaluating a message never
touches the parser and never calls :func:`eval`.

Grammar (keywords are case-insensitive)::

    condition  := or_expr
    or_expr    := and_expr ( OR and_expr )*
    and_expr   := not_expr ( AND not_expr )*
    not_expr   := NOT not_expr | '(' or_expr ')' | predicate
    predicate  := name ( '=' | '<>' | '>' | '>=' | '<' | '<=' ) literal
                | name [NOT] BETWEEN number AND number
                | name [NOT] IN '(' item ( ',' item )* ')'      item := string | number
                | name IS [NOT] NULL
    name       := [A-Za-z_$][A-Za-z0-9_.$]*        (any property, ``TAGS`` and ``KEYS`` included)
    literal    := string | number | TRUE | FALSE
    string     := '...'                             ('' inside a string is one quote)
    number     := -?digits[.digits][e[+-]digits]

So ``NOT`` binds tighter than ``AND``, which binds tighter than ``OR``, and a comparison binds
tighter than ``NOT`` (``NOT a = 1 AND b = 2`` is ``(NOT (a = 1)) AND (b = 2)``). The left side of a
predicate is always a property and the right side always a literal. Strings and booleans can only
be compared with ``=`` and ``<>``; ``'<'`` and friends with a string literal, a comparison with
``NULL`` (use ``IS [NOT] NULL``), an empty expression or one longer than
:data:`MAX_EXPRESSION_LENGTH` characters raise :class:`Sql92Error` naming the column at fault.

Semantics. Property values travel as strings. Against a numeric literal the value is converted to a
number (an integer, or a float when it has a fraction or an exponent); against ``TRUE``/``FALSE``
the value ``true``/``false`` (any case) is the boolean; against a string literal the strings are
compared exactly. A value that does not convert is never equal to the literal and never ordered
against it: ``=``, ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN`` and ``NOT BETWEEN`` are false for it,
and ``<>`` (the negation of ``=``) is true. ``a IN (x, y)`` is ``a = x OR a = y`` and ``NOT IN``
its negation.

Three-valued logic. A predicate over a property the message does not carry is *unknown* (``None``),
not false, and the connectives follow SQL/JMS: ``unknown AND false`` is false, ``unknown OR true``
is true, ``NOT unknown`` is unknown; only ``IS [NOT] NULL`` looks at absence itself and is never
unknown. A message matches only when the whole condition is true, so an unknown result does not
match. This is the JMS message-selector semantics RocketMQ inherited: without it ``NOT (a > 1)``
would select every message lacking ``a``, i.e. negating a condition would silently widen it to
messages the condition says nothing about. ``a > 1 OR b = 'x'`` still matches a message with only
``b = 'x'``, because one true branch is enough.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Iterable, Mapping

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from orbitmq.common.errors import OrbitError

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "Sql92Error",
    "Sql92Filter",
    "compile_sql92",
    "validate_sql92",
]

MAX_EXPRESSION_LENGTH = 4096
"""Longest expression accepted (RocketMQ subscriptions are small; this bounds parse cost)."""

MAX_NESTING_DEPTH = 64
"""Deepest nesting of NOT/AND/OR accepted (bounds recursion at compile and evaluation time)."""

_COMPILE_CACHE_SIZE = 1024

# Keywords are regexes that refuse to match the start of a longer name, so "andy" or "notes" is
# a property, never AND/NOT followed by a name; NAME in turn refuses a whole keyword, so a keyword
# where a name is expected ("AND a = 1") is reported as the keyword, not taken for a property.
_GRAMMAR = r"""
?start: or_expr

?or_expr: and_expr (_OR and_expr)*
?and_expr: not_expr (_AND not_expr)*
?not_expr: _NOT not_expr                                  -> not_
         | _LPAR or_expr _RPAR
         | predicate

?predicate: NAME CMP_OP literal                           -> compare
          | NAME _BETWEEN NUMBER _AND NUMBER              -> between
          | NAME _NOT _BETWEEN NUMBER _AND NUMBER         -> not_between
          | NAME _IN _LPAR _in_items _RPAR                -> in_
          | NAME _NOT _IN _LPAR _in_items _RPAR           -> not_in
          | NAME _IS NULL                                 -> is_null
          | NAME _IS _NOT NULL                            -> is_not_null

_in_items: _in_item (_COMMA _in_item)*
_in_item: STRING | NUMBER
literal: STRING | NUMBER | TRUE | FALSE | NULL

_OR.2: /OR(?![A-Za-z0-9_.$])/i
_AND.2: /AND(?![A-Za-z0-9_.$])/i
_NOT.2: /NOT(?![A-Za-z0-9_.$])/i
_BETWEEN.2: /BETWEEN(?![A-Za-z0-9_.$])/i
_IN.2: /IN(?![A-Za-z0-9_.$])/i
_IS.2: /IS(?![A-Za-z0-9_.$])/i
NULL.2: /NULL(?![A-Za-z0-9_.$])/i
TRUE.2: /TRUE(?![A-Za-z0-9_.$])/i
FALSE.2: /FALSE(?![A-Za-z0-9_.$])/i

NAME: /(?!(?:AND|OR|NOT|BETWEEN|IN|IS|NULL|TRUE|FALSE)(?![A-Za-z0-9_.$]))[A-Za-z_$][A-Za-z0-9_.$]*/i
STRING: /'(?:[^']|'')*'/
NUMBER: /-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/
CMP_OP: /<>|>=|<=|=|>|</
_LPAR: "("
_RPAR: ")"
_COMMA: ","

%ignore /\s+/
"""

# Friendly names for lark terminals, in the order they are listed in "expected ..." messages.
_TERMINAL_NAMES: dict[str, str] = {
    "NAME": "a property name",
    "CMP_OP": "a comparison operator",
    "_BETWEEN": "BETWEEN",
    "_IN": "IN",
    "_IS": "IS",
    "_NOT": "NOT",
    "NULL": "NULL",
    "_LPAR": "'('",
    "_AND": "AND",
    "_OR": "OR",
    "_COMMA": "','",
    "_RPAR": "')'",
    "$END": "the end of the expression",
}
_VALUE_TERMINALS = frozenset({"STRING", "NUMBER", "TRUE", "FALSE"})

# A property value converts to a number only when it is exactly a decimal number: no spaces,
# underscores, "nan" or "inf" (which Python's int()/float() would otherwise accept).
_NUMERIC_VALUE = re.compile(r"[+-]?(?:[0-9]+(\.[0-9]*)?|(\.)[0-9]+)([eE][+-]?[0-9]+)?")

_ORDERING = {
    "=": operator.eq,
    "<>": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}

Truth = bool | None
Evaluator = Callable[[Mapping[str, str]], Truth]


class Sql92Error(OrbitError, ValueError):
    """An invalid SQL92 filter expression; ``column`` (1-based) points at the fault."""

    retriable = False

    def __init__(self, expression: str, column: int, reason: str) -> None:
        self.expression = expression
        self.column = column
        self.reason = reason
        super().__init__(f"invalid SQL92 expression {_shown(expression)} at column {column}: {reason}")


def _shown(expression: str) -> str:
    """The expression as quoted in error messages (long ones cut, so messages stay readable)."""
    if len(expression) > 200:
        return repr(expression[:200] + "...")
    return repr(expression)


@functools.cache
def _parser() -> Lark:
    # Built on first use: processes that never see a SQL92 subscription don't pay for it.
    return Lark(_GRAMMAR, parser="lalr", lexer="contextual", propagate_positions=True)


# --- numbers and booleans ------------------------------------------------------------------------


def _to_number(value: str) -> int | float | None:
    match = _NUMERIC_VALUE.fullmatch(value)
    if match is None:
        return None
    if match.group(1) is None and match.group(2) is None and match.group(3) is None:
        return int(value)
    return float(value)


def _literal_number(text: str) -> int | float:
    number = _to_number(text)
    assert number is not None, text  # the grammar's NUMBER is a subset of _NUMERIC_VALUE
    return number


def _to_bool(value: str) -> bool | None:
    lowered = value.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    return None


# --- evaluator constructors ----------------------------------------------------------------------
# Each returns a closure properties -> True / False / None (unknown); results are always exactly
# one of those three objects, so the connectives can test with "is".


def _compare_number(name: str, op: str, literal: int | float) -> Evaluator:
    compare = _ORDERING[op]
    if_not_a_number = op == "<>"

    def evaluate(properties: Mapping[str, str]) -> Truth:
        value = properties.get(name)
        if value is None:
            return None
        number = _to_number(value)
        if number is None:
            return if_not_a_number
        return compare(number, literal)

    return evaluate


def _compare_string(name: str, equal: bool, literal: str) -> Evaluator:
    def evaluate(properties: Mapping[str, str]) -> Truth:
        value = properties.get(name)
        if value is None:
            return None
        return (value == literal) is equal

    return evaluate


def _compare_bool(name: str, equal: bool, literal: bool) -> Evaluator:
    def evaluate(properties: Mapping[str, str]) -> Truth:
        value = properties.get(name)
        if value is None:
            return None
        return (_to_bool(value) is literal) is equal

    return evaluate


def _between(name: str, low: int | float, high: int | float, negated: bool) -> Evaluator:
    def evaluate(properties: Mapping[str, str]) -> Truth:
        value = properties.get(name)
        if value is None:
            return None
        number = _to_number(value)
        if number is None:
            return False  # neither inside nor outside: a non-number is not ordered
        return (low <= number <= high) is not negated

    return evaluate


def _in(name: str, items: Iterable[str | int | float], negated: bool) -> Evaluator:
    strings = frozenset(i for i in items if isinstance(i, str))
    numbers = frozenset(i for i in items if not isinstance(i, str))

    def evaluate(properties: Mapping[str, str]) -> Truth:
        value = properties.get(name)
        if value is None:
            return None
        if value in strings:
            return not negated
        if numbers:
            number = _to_number(value)
            if number is not None and number in numbers:
                return not negated
        return negated

    return evaluate


def _is_null(name: str, negated: bool) -> Evaluator:
    def evaluate(properties: Mapping[str, str]) -> Truth:
        return (properties.get(name) is None) is not negated

    return evaluate


def _not(operand: Evaluator) -> Evaluator:
    def evaluate(properties: Mapping[str, str]) -> Truth:
        result = operand(properties)
        return None if result is None else not result

    return evaluate


def _and(operands: list[Evaluator]) -> Evaluator:
    def evaluate(properties: Mapping[str, str]) -> Truth:
        unknown = False
        for operand in operands:
            result = operand(properties)
            if result is False:
                return False
            if result is None:
                unknown = True
        return None if unknown else True

    return evaluate


def _or(operands: list[Evaluator]) -> Evaluator:
    def evaluate(properties: Mapping[str, str]) -> Truth:
        unknown = False
        for operand in operands:
            result = operand(properties)
            if result is True:
                return True
            if result is None:
                unknown = True
        return None if unknown else False

    return evaluate


# --- parse tree -> evaluator ---------------------------------------------------------------------


class _Compiler:
    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.names: set[str] = set()

    def error(self, column: int, reason: str) -> Sql92Error:
        return Sql92Error(self.expression, column, reason)

    def compile(self, node: Tree, depth: int = 0) -> Evaluator:
        if depth > MAX_NESTING_DEPTH:
            column = node.meta.start_pos + 1 if not node.meta.empty else 1
            raise self.error(column, f"nested deeper than {MAX_NESTING_DEPTH} levels")
        kind = node.data
        args = node.children
        if kind == "or_expr":
            return _or([self.compile(child, depth + 1) for child in args])
        if kind == "and_expr":
            return _and([self.compile(child, depth + 1) for child in args])
        if kind == "not_":
            return _not(self.compile(args[0], depth + 1))
        name = str(args[0])
        self.names.add(name)
        if kind == "compare":
            return self.comparison(name, args[1], args[2])
        if kind in ("between", "not_between"):
            low, high = (_literal_number(str(bound)) for bound in args[1:3])
            return _between(name, low, high, negated=kind == "not_between")
        if kind in ("in_", "not_in"):
            items = [self.in_item(item) for item in args[1:]]
            return _in(name, items, negated=kind == "not_in")
        if kind in ("is_null", "is_not_null"):
            return _is_null(name, negated=kind == "is_not_null")
        raise AssertionError(f"unexpected parse node {kind!r}")  # pragma: no cover - grammar bug

    def comparison(self, name: str, op: Token, literal: Tree) -> Evaluator:
        value: Token = literal.children[0]
        operator_text = str(op)
        if value.type == "NUMBER":
            return _compare_number(name, operator_text, _literal_number(str(value)))
        if value.type == "NULL":
            raise self.error(
                value.column,
                f"comparison with NULL is never true; use IS NULL or IS NOT NULL instead of '{op}'",
            )
        if operator_text not in ("=", "<>"):
            kind = "a string" if value.type == "STRING" else "a boolean"
            raise self.error(
                op.column, f"operator '{op}' cannot compare with {kind} literal; only '=' and '<>' can"
            )
        equal = operator_text == "="
        if value.type == "STRING":
            return _compare_string(name, equal, _unquote(str(value)))
        return _compare_bool(name, equal, value.type == "TRUE")

    @staticmethod
    def in_item(item: Token) -> str | int | float:
        if item.type == "STRING":
            return _unquote(str(item))
        return _literal_number(str(item))


def _unquote(text: str) -> str:
    return text[1:-1].replace("''", "'")


# --- parse errors --------------------------------------------------------------------------------


def _expected_phrase(terminals: Iterable[str]) -> str:
    names = set(terminals)
    phrases: list[str] = []
    values = names & _VALUE_TERMINALS
    if values == {"NUMBER"}:
        phrases.append("a number")
    elif values == {"STRING", "NUMBER"}:
        phrases.append("a string or a number")
    elif values:
        phrases.append("a value")
        names.discard("NULL")
    phrases.extend(phrase for terminal, phrase in _TERMINAL_NAMES.items() if terminal in names)
    if not phrases:  # pragma: no cover - every terminal is named above
        return "something else"
    if len(phrases) == 1:
        return phrases[0]
    return ", ".join(phrases[:-1]) + " or " + phrases[-1]


def _token_shown(token: Token) -> str:
    if token.type == "$END":
        return "the end of the expression"
    return repr(str(token))


def _parse_error(expression: str, error: UnexpectedInput) -> Sql92Error:
    if isinstance(error, UnexpectedToken):
        token = error.token
        expected = error.accepts or error.expected
        if token.type == "$END":
            return Sql92Error(expression, len(expression) + 1, f"expected {_expected_phrase(expected)}")
        column = token.start_pos + 1 if token.start_pos is not None else error.column
        return Sql92Error(
            expression,
            column,
            f"expected {_expected_phrase(expected)}, found {_token_shown(token)}",
        )
    if isinstance(error, UnexpectedCharacters):
        column = error.pos_in_stream + 1
        if error.char == "'":
            return Sql92Error(expression, column, "unterminated string literal (close it with ')")
        return Sql92Error(
            expression,
            column,
            f"unexpected character {error.char!r}; expected {_expected_phrase(error.allowed or ())}",
        )
    column = getattr(error, "pos_in_stream", None)  # pragma: no cover - other lark errors
    return Sql92Error(expression, (column or 0) + 1, str(error))  # pragma: no cover


# --- public API ----------------------------------------------------------------------------------


class Sql92Filter:
    """A compiled SQL92 condition; implements ``orbitmq.store.message_filter.MessageFilter``.

    Prefer :func:`compile_sql92`, which caches compiled filters by expression.
    """

    needs_properties = True

    __slots__ = ("_evaluate", "expression", "property_names")

    def __init__(self, expression: str) -> None:
        if not isinstance(expression, str):
            raise Sql92Error(repr(expression), 1, f"expected a string, not {type(expression).__name__}")
        if len(expression) > MAX_EXPRESSION_LENGTH:
            raise Sql92Error(
                expression,
                MAX_EXPRESSION_LENGTH + 1,
                f"expression is {len(expression)} characters long; at most {MAX_EXPRESSION_LENGTH} allowed",
            )
        if not expression.strip():
            raise Sql92Error(expression, 1, "expected a condition, found an empty expression")
        try:
            tree = _parser().parse(expression)
        except UnexpectedInput as error:
            raise _parse_error(expression, error) from None
        compiler = _Compiler(expression)
        self._evaluate: Evaluator = compiler.compile(tree)
        self.expression = expression
        self.property_names: frozenset[str] = frozenset(compiler.names)

    def evaluate(self, properties: Mapping[str, str]) -> bool | None:
        """True, False, or None when the result is unknown (it depends on a missing property)."""
        return self._evaluate(properties)

    def matches_properties(self, properties: Mapping[str, str] | None) -> bool:
        """Whether the message matches: the condition is true (unknown does not match)."""
        return self._evaluate(properties or {}) is True

    def matches_tags_code(self, code: int) -> bool:
        """SQL92 filters decide on properties only; every tag hash passes the first stage."""
        return True

    def __repr__(self) -> str:
        return f"Sql92Filter({self.expression!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sql92Filter):
            return NotImplemented
        return self.expression == other.expression

    def __hash__(self) -> int:
        return hash((Sql92Filter, self.expression))


@functools.lru_cache(maxsize=_COMPILE_CACHE_SIZE)
def _compile_cached(expression: str) -> Sql92Filter:
    return Sql92Filter(expression)


def compile_sql92(expression: str) -> Sql92Filter:
    """Compile ``expression`` (cached: brokers see the same subscription on every pull).

    Raises :class:`Sql92Error` for an invalid, empty or over-long expression.
    """
    if not isinstance(expression, str) or len(expression) > MAX_EXPRESSION_LENGTH:
        return Sql92Filter(expression)  # raises; over-long texts are kept out of the cache
    return _compile_cached(expression)


def validate_sql92(expression: str) -> None:
    """Raise :class:`Sql92Error` if ``expression`` is not a valid SQL92 filter."""
    compile_sql92(expression)
