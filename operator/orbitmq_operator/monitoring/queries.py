"""A dashboard's queries, Grafana's variable substitution, and a light PromQL check.

- :func:`panel_queries` / :func:`variable_queries` list what a dashboard (its JSON model) asks
  Prometheus;
- :func:`substitute_grafana_variables` turns a panel's expression into the PromQL Grafana sends:
  ``$__rate_interval``, ``$__interval``, ``$__range`` (and their ``_s``/``_ms`` forms) and template
  variables (``$var``, ``${var}``), multi-value selections as the Prometheus data source formats
  them (``(a|b)``, each value regex-escaped);
- :func:`check_promql` is a tokenizer-level check (balanced brackets, known functions, durations
  in range selectors) that also reports the series names, label matchers and grouping labels an
  expression uses, so a test can hold them against :mod:`.inventory`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# -- listing ----------------------------------------------------------------------------------


def _panels(dashboard: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    out = []
    for panel in dashboard.get("panels") or []:
        out.append(panel)
        out.extend(panel.get("panels") or [])  # a collapsed row holds its panels
    return out


def panel_queries(dashboard: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL expression) of every query of every panel, in order."""
    return [
        (panel.get("title", ""), target["expr"])
        for panel in _panels(dashboard)
        for target in panel.get("targets") or []
        if target.get("expr") and not target.get("hide")
    ]


def variable_queries(dashboard: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(variable name, query) of the dashboard's query variables (``label_values(...)``)."""
    out = []
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable.get("query")
            out.append((variable["name"], query["query"] if isinstance(query, dict) else query))
    return out


def panel_titles(dashboard: Mapping[str, Any]) -> list[str]:
    return [panel.get("title", "") for panel in _panels(dashboard) if panel.get("type") != "row"]


# -- Grafana's variables ----------------------------------------------------------------------

_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")


def parse_duration(text: str) -> float:
    """Seconds of a Prometheus/Grafana duration such as ``15s``, ``1m30s`` or ``1h``."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    """The shortest exact Prometheus duration (``60`` -> ``1m``, ``90`` -> ``90s``, ``0.5`` -> ``500ms``)."""
    ms = round(seconds * 1000)
    for unit in ("y", "w", "d", "h", "m", "s"):
        size = round(_DURATION_UNITS[unit] * 1000)
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def regex_escape(value: str) -> str:
    """The Prometheus data source's escaping of one value of a multi-value variable
    (``prometheusSpecialRegexEscape``): backslashes doubled twice, regex metacharacters
    escaped with a doubled backslash (the value lands inside a PromQL string literal)."""
    value = value.replace("\\", "\\\\\\\\")
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(0), value)


def builtin_variables(
    scrape_interval: str = "15s", interval: str = "15s", range_: str = "1h"
) -> dict[str, str]:
    """Grafana's global variables for a time range and scrape interval.

    ``$__rate_interval`` is ``max($__interval + scrape interval, 4 * scrape interval)`` (Grafana's
    definition; ``$__interval`` is at least the scrape interval); ``$__range`` is the range in
    whole seconds.
    """
    scrape = parse_duration(scrape_interval)
    step = max(parse_duration(interval), scrape)
    seconds = parse_duration(range_)
    return {
        "__interval": format_duration(step),
        "__interval_ms": str(round(step * 1000)),
        "__rate_interval": format_duration(max(step + scrape, 4 * scrape)),
        "__range": f"{round(seconds)}s",
        "__range_s": str(round(seconds)),
        "__range_ms": str(round(seconds * 1000)),
    }


_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)(?::(\w+))?\}|\[\[(\w+)\]\]")


def substitute_grafana_variables(
    expr: str,
    variables: Mapping[str, str | Sequence[str]],
    *,
    scrape_interval: str = "15s",
    interval: str = "15s",
    range_: str = "1h",
) -> str:
    """``expr`` as Grafana's Prometheus data source sends it.

    ``variables`` maps a template variable's name to its value: a ``str`` is put in as is (a
    single-value variable, or a multi-value variable's "All", whose ``allValue`` is ``.*`` in our
    dashboards); a list is a multi-value selection, each value regex-escaped and several joined
    as ``(a|b)``. Grafana's ``$__*`` variables come from :func:`builtin_variables` unless given.
    An unknown variable raises :class:`KeyError` (Grafana would send it literally and Prometheus
    refuse it).
    """
    values: dict[str, str | Sequence[str]] = {
        **builtin_variables(scrape_interval, interval, range_),
        **variables,
    }

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(4)
        fmt = match.group(3)
        if name not in values:
            raise KeyError(f"unknown Grafana variable ${name} in {expr!r}")
        value = values[name]
        if isinstance(value, str):
            return value
        if fmt == "raw":
            return ",".join(value)
        if fmt not in (None, "regex", "pipe"):
            raise ValueError(f"unsupported variable format {fmt!r} in {expr!r}")
        escaped = list(value) if fmt == "pipe" else [regex_escape(v) for v in value]
        if fmt == "pipe" or len(escaped) == 1:
            return "|".join(escaped)
        return "(" + "|".join(escaped) + ")"

    return _VARIABLE.sub(replace, expr)


# -- a light PromQL check ---------------------------------------------------------------------

FUNCTIONS = frozenset(
    {
        "abs",
        "absent",
        "absent_over_time",
        "acos",
        "acosh",
        "asin",
        "asinh",
        "atan",
        "atanh",
        "ceil",
        "changes",
        "clamp",
        "clamp_max",
        "clamp_min",
        "cos",
        "cosh",
        "count_over_time",
        "day_of_month",
        "day_of_week",
        "day_of_year",
        "days_in_month",
        "deg",
        "delta",
        "deriv",
        "double_exponential_smoothing",
        "exp",
        "floor",
        "histogram_avg",
        "histogram_count",
        "histogram_fraction",
        "histogram_quantile",
        "histogram_stddev",
        "histogram_stdvar",
        "histogram_sum",
        "holt_winters",
        "hour",
        "idelta",
        "increase",
        "info",
        "irate",
        "label_join",
        "label_replace",
        "last_over_time",
        "ln",
        "log10",
        "log2",
        "mad_over_time",
        "max_over_time",
        "min_over_time",
        "minute",
        "month",
        "pi",
        "predict_linear",
        "present_over_time",
        "quantile_over_time",
        "rad",
        "rate",
        "resets",
        "round",
        "scalar",
        "sgn",
        "sin",
        "sinh",
        "sort",
        "sort_by_label",
        "sort_by_label_desc",
        "sort_desc",
        "sqrt",
        "stddev_over_time",
        "stdvar_over_time",
        "sum_over_time",
        "tan",
        "tanh",
        "time",
        "timestamp",
        "vector",
        "year",
    }
)
AGGREGATIONS = frozenset(
    {
        "avg",
        "bottomk",
        "count",
        "count_values",
        "group",
        "limit_ratio",
        "limitk",
        "max",
        "min",
        "quantile",
        "stddev",
        "stdvar",
        "sum",
        "topk",
    }
)
_GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2"})

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    |(?P<duration>(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w|y))+)(?![\w.])
    |(?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<ident>[a-zA-Z_][a-zA-Z0-9_:]*)
    |(?P<match>=~|!~|!=|==|>=|<=|=)
    |(?P<op>[-+*/%^<>,:])
    |(?P<open>[(\[{])
    |(?P<close>[)\]}])""",
    re.VERBOSE,
)


@dataclass
class PromQL:
    """What :func:`check_promql` found in one expression."""

    metrics: set[str] = field(default_factory=set)
    matchers: list[tuple[str, str, str, str]] = field(default_factory=list)
    """(series name, label, operator, value) of every label matcher."""
    grouping: set[str] = field(default_factory=set)
    """Labels named in ``by``/``without``/``on``/``ignoring``/``group_left``/``group_right``."""
    functions: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)


def _tokens(expr: str, problems: list[str]) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr):
        match = _TOKEN.match(expr, pos)
        if match is None:
            problems.append(f"unexpected {expr[pos]!r} at {pos}")
            pos += 1
            continue
        kind = match.lastgroup or ""
        if kind != "ws":
            out.append((kind, match.group(0)))
        pos = match.end()
    return out


def check_promql(expr: str) -> PromQL:
    """Tokenize ``expr`` (Grafana variables already substituted) and check its shape."""
    result = PromQL()
    problems = result.problems
    tokens = _tokens(expr, problems)
    stack: list[str] = []
    pairs = {"(": ")", "[": "]", "{": "}"}
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        after = tokens[i + 1] if i + 1 < len(tokens) else ("", "")
        if kind == "ident" and text in _GROUPING:
            if after[1] == "(":
                i += 2
                while i < len(tokens) and tokens[i][1] != ")":
                    if tokens[i][0] == "ident":
                        result.grouping.add(tokens[i][1])
                    elif tokens[i][1] != ",":
                        problems.append(f"{text}(...) holds {tokens[i][1]!r}")
                    i += 1
                if i == len(tokens):
                    problems.append(f"unclosed {text}(")
            elif text not in ("group_left", "group_right"):
                problems.append(f"{text} without a label list")
        elif kind == "ident" and text in AGGREGATIONS:
            result.functions.add(text)
            if after[1] != "(" and after[1] not in ("by", "without"):
                problems.append(f"aggregation {text} not followed by ( or by/without")
        elif kind == "ident" and after[1] == "(":
            result.functions.add(text)
            if text not in FUNCTIONS:
                problems.append(f"unknown function {text}")
        elif kind == "ident" and text not in _KEYWORDS:
            result.metrics.add(text)
            if after[1] == "{":
                i = _matchers(tokens, i + 2, text, result)
        elif kind == "open" and text == "{":
            problems.append("a selector without a metric name")
            i = _matchers(tokens, i + 1, "", result)
        elif kind == "open" and text == "[":
            end = _range_end(tokens, i)
            if end is None:
                problems.append(f"range selector without a duration at token {i}")
                stack.append(text)
            else:
                i = end + 1
                continue
        elif kind == "open":
            stack.append(text)
        elif kind == "close" and (not stack or pairs[stack.pop()] != text):
            problems.append(f"unbalanced {text!r}")
        i += 1
    if stack:
        problems.append(f"unclosed {''.join(stack)!r}")
    return result


def _range_end(tokens: list[tuple[str, str]], i: int) -> int | None:
    """Index of the ``]`` closing ``[duration]`` or ``[duration:]``/``[duration:step]`` at ``i``."""
    kinds = [tokens[k] if k < len(tokens) else ("", "") for k in range(i + 1, i + 5)]
    if kinds[0][0] != "duration":
        return None
    if kinds[1][1] == "]":
        return i + 2
    if kinds[1][1] == ":" and kinds[2][1] == "]":
        return i + 3
    if kinds[1][1] == ":" and kinds[2][0] == "duration" and kinds[3][1] == "]":
        return i + 4
    return None


def _matchers(tokens: list[tuple[str, str]], i: int, metric: str, result: PromQL) -> int:
    """Read ``label op "value", ...}`` from token ``i``; returns the index of the ``}``."""
    while i < len(tokens) and tokens[i][1] != "}":
        if (
            i + 2 < len(tokens)
            and tokens[i][0] == "ident"
            and tokens[i + 1][0] == "match"
            and tokens[i + 2][0] == "string"
        ):
            label, op, value = tokens[i][1], tokens[i + 1][1], tokens[i + 2][1][1:-1]
            result.matchers.append((metric, label, op, value))
            if op in ("=~", "!~"):
                try:
                    re.compile(value.encode().decode("unicode_escape"))
                except re.error as error:
                    result.problems.append(f"bad regex {value!r} for {label}: {error}")
            i += 3
            if i < len(tokens) and tokens[i][1] == ",":
                i += 1
        else:
            result.problems.append(f"bad label matcher at {tokens[i][1]!r}")
            i += 1
    if i == len(tokens):
        result.problems.append("unclosed {")
    return i
