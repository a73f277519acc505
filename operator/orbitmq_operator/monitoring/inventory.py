"""The Prometheus metric families orbitmq defines, read from the source that defines them.

The families are spread over prometheus_client's ``Counter``/``Gauge``/``Histogram``/``Info`` and
custom collectors yielding ``*MetricFamily`` objects at scrape time. :func:`metric_families`
parses the defining modules (no process started, no broker state needed) and knows three shapes:
a direct call with the name as a string literal, a module-level helper whose parameter is passed
on as the name (the sidecar's ``_gauge``), and a ``for`` loop over literal tuples whose first item
is the name (the broker's latency histograms). Labels are read from a literal list, or from a
variable the module binds to one literal list (``labels = ["group", "topic"]``). A renamed
family or label changes the result, so the dashboard tests fail instead of the dashboards
silently showing nothing.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path

SOURCES = (
    "orbitmq.broker.metrics",
    "orbitmq.nameserver.servicer",
    "orbitmq.client.consumer_metrics",
    "orbitmq.sidecar.server",
    "orbitmq.proxy.metrics",
    "orbitmq.auth.audit",
    "orbitmq.common.runtime_metrics",
    "orbitmq_operator.metrics",
)
"""The modules that define every ``orbitmq_*`` family (DESIGN §9, docs/reference/metrics.md),
the threads, event-loop tasks and table sizes every server exports included."""

INFO_USERS = ("orbitmq_operator.handlers.failover",)
"""Modules that set an ``Info`` family's value: its labels are the keys of the dict they pass to
``<FAMILY>.info({...})`` (an ``Info`` declares none)."""

TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod", "service", "container", "endpoint"})
"""Labels Prometheus adds to every scraped series (``job``, ``instance``) and that the
prometheus-operator's ServiceMonitor/PodMonitor add in Kubernetes."""

_TYPES = {
    "Counter": "counter",
    "CounterMetricFamily": "counter",
    "Gauge": "gauge",
    "GaugeMetricFamily": "gauge",
    "Histogram": "histogram",
    "HistogramMetricFamily": "histogram",
    "Summary": "summary",
    "SummaryMetricFamily": "summary",
    "Info": "info",
    "InfoMetricFamily": "info",
}


@dataclass(frozen=True)
class MetricFamily:
    name: str
    """As exposed, without the type's suffixes (``orbitmq_messages_put``, not ``..._total``)."""
    type: str
    labels: tuple[str, ...]
    module: str

    def series(self) -> dict[str, frozenset[str]]:
        """Series names in the exposition -> the labels each carries (target labels aside)."""
        labels = frozenset(self.labels)
        if self.type == "counter":
            return {f"{self.name}_total": labels}
        if self.type == "histogram":
            return {
                f"{self.name}_bucket": labels | {"le"},
                f"{self.name}_sum": labels,
                f"{self.name}_count": labels,
            }
        if self.type == "summary":
            return {
                self.name: labels | {"quantile"},
                f"{self.name}_sum": labels,
                f"{self.name}_count": labels,
            }
        if self.type == "info":
            return {f"{self.name}_info": labels}
        return {self.name: labels}


def metric_families(
    modules: tuple[str, ...] = SOURCES, info_users: tuple[str, ...] = INFO_USERS
) -> dict[str, MetricFamily]:
    """Family name -> family, for every family the modules define."""
    families: dict[str, MetricFamily] = {}
    info_names: dict[str, str] = {}
    """Module-level variable -> the Info family it holds (``LAST_DECISION = Info("...")``)."""
    for module in modules:
        tree = ast.parse(_source(module))
        for family in _families_in(module, tree):
            if family.name in families and families[family.name] != family:
                raise ValueError(f"{family.name} defined twice, differently: {families[family.name]}")
            families[family.name] = family
        info_names.update(_info_variables(tree))
    for module in info_users:
        for variable, labels in _info_calls(ast.parse(_source(module))):
            if variable in info_names:
                family = families[info_names[variable]]
                merged = tuple(dict.fromkeys((*family.labels, *labels)))
                families[family.name] = MetricFamily(family.name, family.type, merged, family.module)
    return families


def series_labels(families: dict[str, MetricFamily] | None = None) -> dict[str, frozenset[str]]:
    """Every series name the processes expose -> its labels (target labels not included)."""
    out: dict[str, frozenset[str]] = {}
    for family in (families or metric_families()).values():
        out.update(family.series())
    return out


def _source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(module)
    return Path(spec.origin).read_text()


def _families_in(module: str, tree: ast.Module) -> list[MetricFamily]:
    lists = _ScopedLists(tree)
    helpers = _helpers(tree, lists)
    found: list[MetricFamily] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            kind = _callee(node)
            if kind in _TYPES and node.args and _is_name_literal(node.args[0]):
                found.append(_family(node.args[0].value, _TYPES[kind], _labels(node, lists), module))  # type: ignore[attr-defined]
            elif kind in helpers and node.args and _is_name_literal(node.args[0]):
                metric_type, labels = helpers[kind]
                found.append(_family(node.args[0].value, metric_type, labels, module))  # type: ignore[attr-defined]
        elif isinstance(node, ast.For):
            found.extend(_loop_families(node, module, lists))
    return found


class _ScopedLists:
    """What a variable holds where a family is made: a name bound, in the function around the
    call (or at module level), to one literal list of strings. A name bound there to two
    different lists, or to anything else too, is unknown (no labels)."""

    def __init__(self, tree: ast.Module) -> None:
        self._scope_of: dict[ast.AST, ast.AST] = {}
        self._bound: dict[ast.AST, dict[str, tuple[str, ...]]] = {}
        self._index(tree, tree)

    def _index(self, node: ast.AST, scope: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self._scope_of[child] = scope
            inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else scope
            self._index(child, inner)

    def labels(self, name: ast.Name) -> tuple[str, ...]:
        scope = self._scope_of.get(name)
        if scope is None:
            return ()
        if scope not in self._bound:
            self._bound[scope] = _literal_lists(scope, self._scope_of)
        return self._bound[scope].get(name.id, ())


def _literal_lists(scope: ast.AST, scope_of: dict[ast.AST, ast.AST]) -> dict[str, tuple[str, ...]]:
    bound: dict[str, tuple[str, ...] | None] = {}
    for node in ast.walk(scope):
        if not (
            isinstance(node, ast.Assign)
            and scope_of.get(node) is scope
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            continue
        name, value = node.targets[0].id, node.value
        strings = _strings(value) if isinstance(value, ast.List | ast.Tuple) else None
        bound[name] = None if strings is None or bound.get(name, strings) != strings else strings
    return {name: labels for name, labels in bound.items() if labels is not None}


def _strings(node: ast.List | ast.Tuple) -> tuple[str, ...] | None:
    if all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return tuple(e.value for e in node.elts)  # type: ignore[attr-defined]
    return None


def _info_variables(tree: ast.Module) -> dict[str, str]:
    out = {}
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call)
            and _TYPES.get(_callee(stmt.value)) == "info"
            and stmt.value.args
            and _is_name_literal(stmt.value.args[0])
        ):
            out[stmt.targets[0].id] = stmt.value.args[0].value.removesuffix("_info")  # type: ignore[attr-defined]
    return out


def _info_calls(tree: ast.Module) -> list[tuple[str, tuple[str, ...]]]:
    """``X.info({"k": ...})`` or ``module.X.info({...})`` -> (X, keys)."""
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "info"
            and node.args
            and isinstance(node.args[0], ast.Dict)
        ):
            owner = node.func.value
            name = (
                owner.id
                if isinstance(owner, ast.Name)
                else owner.attr
                if isinstance(owner, ast.Attribute)
                else ""
            )
            keys = tuple(
                k.value for k in node.args[0].keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
            )
            out.append((name, keys))
    return out


def _family(name: str, metric_type: str, labels: tuple[str, ...], module: str) -> MetricFamily:
    # prometheus_client strips a counter's "_total" (and an info's "_info") and exposes it again.
    if metric_type == "counter":
        name = name.removesuffix("_total")
    if metric_type == "info":
        name = name.removesuffix("_info")
    return MetricFamily(name, metric_type, labels, module)


def _helpers(tree: ast.Module, lists: _ScopedLists) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Module-level functions that construct a family named by their first parameter."""
    helpers = {}
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef) or not fn.args.args:
            continue
        param = fn.args.args[0].arg
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Call)
                and _callee(node) in _TYPES
                and node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id == param
            ):
                helpers[fn.name] = (_TYPES[_callee(node)], _labels(node, lists))
    return helpers


def _loop_families(loop: ast.For, module: str, lists: _ScopedLists) -> list[MetricFamily]:
    """``for name, ... in (("orbitmq_x", ...), ...): Family(name, ...)``."""
    if not isinstance(loop.target, ast.Tuple) or not isinstance(loop.iter, ast.Tuple | ast.List):
        return []
    targets = [t.id if isinstance(t, ast.Name) else None for t in loop.target.elts]
    found = []
    for node in (n for stmt in loop.body for n in ast.walk(stmt)):
        if not (isinstance(node, ast.Call) and _callee(node) in _TYPES and node.args):
            continue
        first = node.args[0]
        if not isinstance(first, ast.Name) or first.id not in targets:
            continue
        index = targets.index(first.id)
        for item in loop.iter.elts:
            if isinstance(item, ast.Tuple) and _is_name_literal(item.elts[index]):
                found.append(
                    _family(item.elts[index].value, _TYPES[_callee(node)], _labels(node, lists), module)  # type: ignore[attr-defined]
                )
    return found


def _callee(call: ast.Call) -> str:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return ""


def _is_name_literal(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("orbitmq_")
    )


def _labels(call: ast.Call, lists: _ScopedLists) -> tuple[str, ...]:
    """``labels=``/``labelnames=`` or the third positional argument, when a literal list or a
    variable bound to one (:class:`_ScopedLists`)."""
    node: ast.expr | None = None
    for keyword in call.keywords:
        if keyword.arg in ("labels", "labelnames"):
            node = keyword.value
    if node is None and len(call.args) >= 3:
        node = call.args[2]
    if isinstance(node, ast.List | ast.Tuple):
        return tuple(e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    if isinstance(node, ast.Name):
        return lists.labels(node)
    return ()
