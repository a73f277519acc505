"""The operator's RBAC covers what its code and kopf touch, and nothing wider."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from kopf._core.intents import registries
from lightkube.core.resource import NamespacedResource, Resource

import orbitmq_operator
from orbitmq_operator import rbac
from orbitmq_operator.peering import ClusterKopfPeering, KopfPeering
from orbitmq_operator.reconcile import apply

LIGHTKUBE_VERBS = {
    "get": {"get"},
    "list": {"list"},
    "watch": {"watch"},
    "create": {"create"},
    "patch": {"patch"},
    "apply": {"patch", "create"},  # server-side apply creates a missing object
    "delete": {"delete"},
    "replace": {"update"},
}
"""What a lightkube client method needs, in RBAC verbs."""


def modules() -> Iterator[ModuleType]:
    yield orbitmq_operator
    for info in pkgutil.walk_packages(orbitmq_operator.__path__, "orbitmq_operator."):
        if info.name != "orbitmq_operator.__main__":
            yield importlib.import_module(info.name)


def resource_classes(module: ModuleType) -> dict[str, type[Resource]]:
    """The lightkube resource classes a module imports or defines (lightkube.resources.*,
    create_namespaced_resource / create_global_resource)."""
    return {
        name: value
        for name, value in vars(module).items()
        if inspect.isclass(value) and issubclass(value, Resource) and hasattr(value, "_api_info")
    }


def key(resource: type[Resource]) -> tuple[str, str]:
    info = resource._api_info
    return info.resource.group, info.plural


def granted(rules: list[rbac.Rule]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


MODES = {
    "namespaces": granted(rbac.namespaced_rules() + rbac.cluster_rules()),
    "all-namespaces": granted(rbac.namespaced_rules(clusterwide=True) + rbac.cluster_rules(clusterwide=True)),
}
OTHER_MODES_PEERING = {"namespaces": ClusterKopfPeering, "all-namespaces": KopfPeering}


def test_the_code_uses_lightkube_resources() -> None:
    used = {key(r) for m in modules() for r in resource_classes(m).values()}
    assert {("apps", "statefulsets"), ("", "pods"), ("orbitmq.io", "orbitmqclusters")} <= used


@pytest.mark.parametrize("mode", MODES)
def test_every_lightkube_resource_of_the_operator_is_granted(mode: str) -> None:
    grants = MODES[mode]
    for module in modules():
        for name, resource in resource_classes(module).items():
            if resource is OTHER_MODES_PEERING[mode]:
                continue
            assert key(resource) in grants, f"{module.__name__}.{name} {key(resource)} has no rule ({mode})"


def static_calls() -> Iterator[tuple[str, str, type[Resource]]]:
    """``client.<method>(<Resource>, ...)`` calls whose resource is a class named in the module."""
    for module in modules():
        classes = resource_classes(module)
        tree = ast.parse(Path(module.__file__ or "").read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in LIGHTKUBE_VERBS
                and node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in classes
            ):
                yield f"{module.__name__}:{node.lineno}", node.func.attr, classes[node.args[0].id]


def test_static_client_calls_are_granted() -> None:
    calls = list(static_calls())
    assert len(calls) >= 5, calls  # the scan finds them at all
    for where, method, resource in calls:
        for mode, grants in MODES.items():
            if resource is OTHER_MODES_PEERING[mode]:
                continue
            missing = LIGHTKUBE_VERBS[method] - grants.get(key(resource), set())
            assert not missing, f"{where}: {method} {key(resource)} needs {missing} ({mode})"


@pytest.mark.parametrize("grants", MODES.values(), ids=MODES)
def test_applied_and_drained_kinds(grants: dict[tuple[str, str], set[str]]) -> None:
    for resource in apply.KINDS.values():  # listed by label, server-side applied
        assert {"list", "create", "patch"} <= grants[key(resource)], key(resource)
    for plural, group in (("statefulsets", "apps"), ("services", ""), ("poddisruptionbudgets", "policy")):
        assert "delete" in grants[(group, plural)]  # a drained group's objects
    assert "delete" not in grants[("", "configmaps")]
    assert {"list", "patch"} == grants[("", "persistentvolumeclaims")]
    assert {"list", "watch", "delete"} == grants[("", "pods")]
    assert {"create"} == grants[("", "events")]


def kopf_selectors() -> Iterator[tuple[str, str, str]]:
    """(group, plural, registry) of every resource kopf serves for the operator's handlers."""
    import orbitmq_operator.handlers  # noqa: F401  (registers them)

    registry = registries.get_default_registry()
    for name in ("_indexing", "_watching", "_spawning", "_changing"):
        for handler in getattr(registry, name).get_all_handlers():
            if not handler.fn.__module__.startswith("orbitmq_operator."):
                continue  # the e2e tests' own kopf operators share the default registry
            selector = handler.selector
            plural = selector.plural or selector.any_name
            yield selector.group or "", plural, name


@pytest.mark.parametrize("grants", MODES.values(), ids=MODES)
def test_kopf_can_serve_every_handler(grants: dict[tuple[str, str], set[str]]) -> None:
    served = list(kopf_selectors())
    assert ("", "pods", "_indexing") in served
    for group, plural, registry in served:
        verbs = grants.get((group, plural), set())
        assert {"list", "watch"} <= verbs, (group, plural)
        if registry in ("_changing", "_spawning"):  # finalizers, annotations, status
            assert "patch" in verbs, (group, plural)
            assert "patch" in grants.get((group, f"{plural}/status"), set()), (group, plural)


def test_peering_and_observation_per_mode() -> None:
    some, every = MODES["namespaces"], MODES["all-namespaces"]
    # read, watched and patched; never created: the chart owns the peering objects
    assert some[("kopf.dev", "kopfpeerings")] == {"get", "list", "watch", "patch"}
    assert ("kopf.dev", "clusterkopfpeerings") not in some
    assert every[("kopf.dev", "clusterkopfpeerings")] == {"get", "list", "watch", "patch"}
    assert ("kopf.dev", "kopfpeerings") not in every
    assert some[("", "namespaces")] == {"list", "watch"}
    assert ("", "namespaces") not in every  # kopf does not look at namespaces then
    for grants in (some, every):
        assert grants[("apiextensions.k8s.io", "customresourcedefinitions")] == {"list", "watch"}


@pytest.mark.parametrize("clusterwide", [False, True])
def test_no_wildcards_and_secrets_never_listed(clusterwide: bool) -> None:
    """Secrets (credentials, certificates) are read by name, never listed or watched (which
    would read every Secret of the namespace) nor deleted (owner references do that)."""
    for rule in rbac.namespaced_rules(clusterwide=clusterwide) + rbac.cluster_rules(clusterwide=clusterwide):
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], rule
        if "secrets" in rule["resources"]:
            assert rule["resources"] == ["secrets"], rule
            assert not {"list", "watch", "delete", "deletecollection"} & set(rule["verbs"]), rule
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])


def test_manifests_for_some_namespaces() -> None:
    out = rbac.rbac_manifests("ops", ["team-a", "team-b", "team-a"])
    kinds = [(m["kind"], m["metadata"]["name"], m["metadata"].get("namespace")) for m in out]
    assert kinds == [
        ("ServiceAccount", "orbitmq-operator", "ops"),
        ("ClusterRole", "orbitmq-operator", None),
        ("ClusterRole", "orbitmq-operator-cluster", None),
        ("ClusterRoleBinding", "orbitmq-operator-cluster", None),
        ("RoleBinding", "orbitmq-operator", "team-a"),
        ("RoleBinding", "orbitmq-operator", "team-b"),
    ]
    subject = {"kind": "ServiceAccount", "name": "orbitmq-operator", "namespace": "ops"}
    for binding in out[3:]:
        assert binding["subjects"] == [subject]
        assert binding["roleRef"]["kind"] == "ClusterRole"
    assert out[4]["roleRef"]["name"] == "orbitmq-operator"  # the namespaced rules, per namespace
    assert out[3]["roleRef"]["name"] == "orbitmq-operator-cluster"
    assert out[1]["rules"] == rbac.namespaced_rules()
    assert out[2]["rules"] == rbac.cluster_rules()


def test_manifests_for_all_namespaces() -> None:
    out = rbac.rbac_manifests("ops", None, name="omq", labels={"app.kubernetes.io/instance": "x"})
    assert [(m["kind"], m["metadata"]["name"]) for m in out] == [
        ("ServiceAccount", "omq"),
        ("ClusterRole", "omq"),
        ("ClusterRoleBinding", "omq"),
    ]
    assert out[1]["rules"] == rbac.namespaced_rules(clusterwide=True) + rbac.cluster_rules(clusterwide=True)
    assert out[0]["metadata"]["labels"] == {
        "app.kubernetes.io/name": "omq",
        "app.kubernetes.io/instance": "x",
    }
    assert out[2]["subjects"] == [{"kind": "ServiceAccount", "name": "omq", "namespace": "ops"}]
    with pytest.raises(ValueError):
        rbac.rbac_manifests("ops", [])


def test_namespaced_rules_name_only_namespaced_kinds() -> None:
    """A Role(Binding) cannot grant cluster-scoped kinds: none may hide among the namespaced rules."""
    cluster_scoped = {
        key(r)
        for m in modules()
        for r in resource_classes(m).values()
        if not issubclass(r, NamespacedResource)
    }
    namespaced = granted(rbac.namespaced_rules())
    assert cluster_scoped and not cluster_scoped & set(namespaced)
    assert ("", "namespaces") not in namespaced
    assert ("apiextensions.k8s.io", "customresourcedefinitions") not in namespaced
