"""The alert rules (orbitmq_operator.monitoring.alerts -> charts/orbitmq/rules/orbitmq-alerts.yaml).

The committed file is what the generator writes; every alert has its ``for:``, severity,
summary, templated description and runbook section; every series an expression reads is one
orbitmq's code defines (read from the defining modules, so a renamed family or label fails here)
or one of the few external series the module declares; ``promtool check rules`` accepts the file
and ``promtool test rules`` passes the hand-written unit tests in alerts_test.yaml, which show
each alert firing on a failing series and silent on healthy ones; and those unit tests can fail:
each alert made never or always firing breaks them.

promtool: ``$ORBITMQ_PROMTOOL``, else the test bed's (``scripts/k8s-testbed build`` caches one
in ``$ORBITMQ_K8S_CACHE/bin``), else ``promtool`` on PATH (Debian: ``apt-get install prometheus``).
Without one these tests fail, they do not skip.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import markdown
import pytest
import yaml

from orbitmq_operator.monitoring import alerts, inventory
from orbitmq_operator.monitoring.queries import check_promql, parse_duration

REPO_ROOT = Path(__file__).resolve().parents[3]
RULES_FILE = REPO_ROOT / "charts" / "orbitmq" / "rules" / "orbitmq-alerts.yaml"
UNIT_TESTS = Path(__file__).with_name("alerts_test.yaml")
RUNBOOK = REPO_ROOT / alerts.RUNBOOK
PROMTOOL_TIMEOUT_S = 120

RULES: list[dict[str, Any]] = [rule for group in alerts.rules()["groups"] for rule in group["rules"]]
NAMES = [rule["alert"] for rule in RULES]
SERIES = inventory.series_labels()
FAMILIES = inventory.metric_families()

ISSUE_ALERTS = {
    "a broker down": "OrbitMQBrokerDown",
    "a broker group without a master": "OrbitMQBrokerGroupWithoutMaster",
    "consumer lag growing for 10 min": "OrbitMQConsumerLagGrowing",
    "dead letters arriving": "OrbitMQDeadLetters",
    "replication lag above a bound": "OrbitMQReplicationLagHigh",
    "commit-log disk above 85 %": "OrbitMQCommitLogDiskFilling",
    "a queue lock flapping between clients": "OrbitMQQueueLockFlapping",
    "repeated failovers": "OrbitMQRepeatedFailovers",
    "the operator failing to reconcile": "OrbitMQOperatorReconcileFailing",
}
"""Issue 15 item 4, each with the alert that answers it."""
EXTERNAL_ONLY: set[str] = set()
"""Alerts backed only by series orbitmq does not define: none (the disk alert reads the
brokers' own ``orbitmq_store_disk_*_bytes``, not the kubelet's volume statistics)."""


# -- promtool ---------------------------------------------------------------------------------


def find_promtool() -> Path | None:
    override = os.environ.get("ORBITMQ_PROMTOOL")
    if override:
        return Path(override)
    cache = Path(os.environ.get("ORBITMQ_K8S_CACHE") or Path.home() / ".cache" / "orbitmq-k8s-testbed")
    cached = cache.expanduser() / "bin" / "promtool"
    if cached.is_file() and os.access(cached, os.X_OK):
        return cached
    found = shutil.which("promtool")
    return Path(found) if found else None


@pytest.fixture(scope="module")
def promtool() -> Path:
    found = find_promtool()
    if found is None or not (found.is_file() and os.access(found, os.X_OK)):
        pytest.fail(
            f"no promtool (tried $ORBITMQ_PROMTOOL={os.environ.get('ORBITMQ_PROMTOOL')!r}, the test "
            "bed's bin/promtool, PATH): run scripts/k8s-testbed build, or apt-get install prometheus, "
            "or point ORBITMQ_PROMTOOL at one",
            pytrace=False,
        )
    return found


def run_promtool(promtool: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
        check=False,
    )


def test_promtool_answers(promtool: Path) -> None:
    done = run_promtool(promtool, "--version")
    assert done.returncode == 0, done.stderr
    assert "promtool, version" in done.stdout + done.stderr


# -- the generated file -----------------------------------------------------------------------


def test_the_rules_file_is_fresh() -> None:
    assert RULES_FILE.read_text() == alerts.rules_yaml(), "stale: run scripts/gen-alerts"


def test_the_rules_file_reads_back_as_the_rules() -> None:
    assert yaml.safe_load(RULES_FILE.read_text()) == alerts.rules()


def test_the_issue_asks_for_these_alerts() -> None:
    missing = {what: name for what, name in ISSUE_ALERTS.items() if name not in NAMES}
    assert not missing


def test_alert_names_are_unique_and_say_orbitmq() -> None:
    assert len(NAMES) == len(set(NAMES))
    assert all(re.fullmatch(r"OrbitMQ[A-Z][A-Za-z]+", name) for name in NAMES), NAMES


@pytest.mark.parametrize("rule", RULES, ids=NAMES)
def test_every_alert_has_for_severity_summary_description_and_runbook(rule: dict[str, Any]) -> None:
    assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}
    assert parse_duration(rule["for"]) > 0
    assert rule["labels"] == {"severity": rule["labels"]["severity"]}
    assert rule["labels"]["severity"] in ("critical", "warning")
    annotations = rule["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    assert annotations["summary"] and "{{" not in annotations["summary"]
    assert re.search(r"\{\{ \$labels\.\w+ \}\}", annotations["description"]), "description names no label"
    assert annotations["runbook_url"] == f"{alerts.RUNBOOK}#{rule['alert'].lower()}"


def test_the_runbook_has_one_section_per_alert() -> None:
    """The how-to page has its own sections too (before you start, set up); every ``## OrbitMQ…``
    heading is an alert's, in the rules' order, so a renamed, added or dropped alert fails here."""
    sections = re.findall(r"^## (OrbitMQ\S*)$", RUNBOOK.read_text(), flags=re.MULTILINE)
    assert sections == NAMES


def test_each_runbook_url_lands_on_its_section_of_the_site() -> None:
    """The docs site (MkDocs, the ``toc`` extension of mkdocs.yml) gives each heading an id; an
    alert's ``runbook_url`` fragment must be its section's id, or the link opens the page's top."""
    html = markdown.markdown(RUNBOOK.read_text(), extensions=["toc"])
    ids = dict(re.findall(r'<h2 id="([^"]+)">(OrbitMQ\w+)</h2>', html))
    for rule in RULES:
        path, _, fragment = rule["annotations"]["runbook_url"].partition("#")
        assert path == alerts.RUNBOOK
        assert ids.get(fragment) == rule["alert"], f"{rule['alert']}: no section with id {fragment!r}"


@pytest.mark.parametrize("rule", RULES, ids=NAMES)
def test_descriptions_template_only_labels_the_alert_has(rule: dict[str, Any]) -> None:
    """A ``{{ $labels.x }}`` the expression's result lacks renders empty: the labels an
    expression keeps are those it groups by (or, without grouping, its series' labels)."""
    result = check_promql(rule["expr"])
    available = result.grouping | _created_labels(rule["expr"]) | inventory.TARGET_LABELS
    if not result.grouping:
        available |= set().union(*(_labels_of(m) for m in result.metrics))
    used = set(re.findall(r"\$labels\.(\w+)", rule["annotations"]["description"]))
    assert used <= available, f"{rule['alert']}: {used - available} not in the result"


# -- the expressions against the code's metric definitions -----------------------------------


def _labels_of(series: str) -> frozenset[str]:
    return SERIES.get(series) or alerts.EXTERNAL_SERIES.get(series) or frozenset()


def _created_labels(expr: str) -> set[str]:
    """Labels ``label_replace(v, "dst", "$1", "src", "regex")`` creates."""
    return set(re.findall(r'"(\w+)",\s*"\$\d+",\s*"\w+",', expr))


def _defining_source(series: str) -> str:
    """The source of the module defining the family, and of the orbitmq modules it imports from
    (label values may be an enum's, defined beside the state they describe: the lock events)."""
    for family in FAMILIES.values():
        if series in family.series():
            source = (REPO_ROOT / _module_path(family.module)).read_text()
            imported = re.findall(r"^\s*from (orbitmq(?:_operator)?\.[\w.]+) import", source, re.M)
            paths = [REPO_ROOT / _module_path(module) for module in imported]
            return "\n".join([source, *(path.read_text() for path in paths if path.is_file())])
    raise KeyError(series)


def _module_path(module: str) -> Path:
    root = "operator" if module.startswith("orbitmq_operator") else "services"
    return Path(root, *module.split(".")).with_suffix(".py")


@pytest.mark.parametrize("rule", RULES, ids=NAMES)
def test_every_series_and_label_an_expression_reads_exists(rule: dict[str, Any]) -> None:
    expr = rule["expr"]
    result = check_promql(expr)
    assert not result.problems, result.problems
    assert result.metrics, "reads no series"
    unknown = {m for m in result.metrics if m not in SERIES and m not in alerts.EXTERNAL_SERIES}
    assert not unknown, f"series no code defines (and not declared external): {unknown}"
    reads_ours = any(m.startswith("orbitmq_") for m in result.metrics)
    assert reads_ours != (rule["alert"] in EXTERNAL_ONLY), "reads none of orbitmq's series"
    for series, label, op, value in result.matchers:
        assert label in _labels_of(series) | inventory.TARGET_LABELS, f"{series} has no label {label}"
        if series in SERIES and op == "=":
            assert f'"{value}"' in _defining_source(series), f'{series}{{{label}="{value}"}}: no such value'
    known = set().union(*(_labels_of(m) for m in result.metrics)) | inventory.TARGET_LABELS
    assert result.grouping <= known, f"grouping by {result.grouping - known}"
    if any(m.endswith("_total") for m in result.metrics if m in SERIES):
        assert result.functions & {"rate", "increase"} or " offset " in expr, "a counter read raw"


def test_the_disk_alert_reads_the_brokers_own_disk_gauges() -> None:
    """Per broker process (a master and its slaves share a broker name, not a disk), from the
    broker's statvfs: it holds outside Kubernetes too and needs no kubelet scrape. The ratio is
    the one the broker acts on (its forcible cleaning and DISK_FULL refusals), so the alert's
    85 % is the broker's 85 %."""
    rule = next(r for r in RULES if r["alert"] == "OrbitMQCommitLogDiskFilling")
    result = check_promql(rule["expr"])
    assert result.metrics == {"orbitmq_store_disk_used_ratio"}
    assert {"broker", "instance"} <= result.grouping
    assert f"> {alerts.DISK_USED_BOUND}" in rule["expr"] and alerts.DISK_USED_BOUND == 0.85


def test_role_values_come_from_the_broker_roles() -> None:
    rule = next(r for r in RULES if r["alert"] == "OrbitMQBrokerGroupWithoutMaster")
    assert 'role=~"ASYNC_MASTER|SYNC_MASTER"' in rule["expr"]


def test_the_check_catches_a_renamed_family_or_label() -> None:
    """What the test above would say if the code renamed a family or a label."""
    renamed = check_promql('max by (broker) (orbitmq_broker_roles{role="SLAVE"})')
    assert "orbitmq_broker_roles" not in SERIES
    relabelled = check_promql('max by (broker) (orbitmq_broker_role{rol="SLAVE"})')
    assert [(s, lab) for s, lab, _, _ in relabelled.matchers if lab not in _labels_of(s)] == [
        ("orbitmq_broker_role", "rol")
    ]
    assert renamed.metrics == {"orbitmq_broker_roles"}


# -- promtool ---------------------------------------------------------------------------------


def test_promtool_check_rules_passes(promtool: Path) -> None:
    done = run_promtool(promtool, "check", "rules", RULES_FILE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(RULES)} rules found" in done.stdout


def test_promtool_check_rules_rejects_a_broken_expression(promtool: Path, tmp_path: Path) -> None:
    broken = alerts.rules()
    broken["groups"][0]["rules"][0]["expr"] = "max by (broker (orbitmq_broker_role)"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(broken))
    done = run_promtool(promtool, "check", "rules", path)
    assert done.returncode != 0, done.stdout


def test_promtool_unit_tests_pass(promtool: Path) -> None:
    done = run_promtool(promtool, "test", "rules", UNIT_TESTS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def _unit_tests() -> dict[str, Any]:
    return yaml.safe_load(UNIT_TESTS.read_text())


def test_the_unit_tests_read_the_generated_rules() -> None:
    files = [(UNIT_TESTS.parent / f).resolve() for f in _unit_tests()["rule_files"]]
    assert files == [RULES_FILE]


@pytest.mark.parametrize("rule", RULES, ids=NAMES)
def test_every_alert_has_a_firing_and_a_healthy_unit_test(rule: dict[str, Any]) -> None:
    """A test group feeding a failing series expects the alert (and not before its ``for:``);
    another, only healthy series, expects silence after at least the ``for:`` duration."""
    name, hold = rule["alert"], parse_duration(rule["for"])
    fires = silent = pending = False
    for group in _unit_tests()["tests"]:
        cases = [c for c in group.get("alert_rule_test", []) if c["alertname"] == name]
        if not cases:
            continue
        expected = [c for c in cases if c.get("exp_alerts")]
        fires |= bool(expected)
        pending |= bool(expected) and any(
            not c.get("exp_alerts") and parse_duration(c["eval_time"]) < parse_duration(e["eval_time"])
            for c in cases
            for e in expected
        )
        silent |= not expected and any(parse_duration(c["eval_time"]) >= hold for c in cases)
    assert fires, f"{name}: no unit test expects it to fire"
    assert pending, f"{name}: no unit test shows it silent before it fires"
    assert silent, f"{name}: no unit test shows it silent on healthy series"


def test_unit_tests_name_only_real_alerts() -> None:
    """promtool expects nothing from an alert name no rule has and passes; a typo would hide."""
    named = {c["alertname"] for g in _unit_tests()["tests"] for c in g.get("alert_rule_test", [])}
    assert named <= set(NAMES), named - set(NAMES)


# -- the unit tests can fail ------------------------------------------------------------------


def _mutated_run(
    promtool: Path,
    tmp_path: Path,
    name: str,
    expr: str | None = None,
    unit_tests: dict[str, Any] | None = None,
) -> subprocess.CompletedProcess[str]:
    """promtool test rules on copies: ``name``'s expression replaced by ``expr`` (if given), and
    only the test groups about ``name``."""
    document = alerts.rules()
    for group in document["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == name and expr is not None:
                rule["expr"] = expr
    rules_path = tmp_path / "rules.yaml"
    rules_path.write_text(yaml.safe_dump(document, sort_keys=False))
    tests = unit_tests or _unit_tests()
    groups = [g for g in tests["tests"] if any(c["alertname"] == name for c in g.get("alert_rule_test", []))]
    assert groups, name
    tests_path = tmp_path / "tests.yaml"
    tests_path.write_text(yaml.safe_dump({**tests, "rule_files": [str(rules_path)], "tests": groups}))
    return run_promtool(promtool, "test", "rules", tests_path)


def test_the_unmutated_copy_passes(promtool: Path, tmp_path: Path) -> None:
    """The harness of the tests below, unchanged, passes: their failures are the mutations'."""
    done = _mutated_run(promtool, tmp_path, "OrbitMQDeadLetters")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", NAMES)
def test_an_alert_that_never_fires_fails_its_unit_tests(promtool: Path, tmp_path: Path, name: str) -> None:
    done = _mutated_run(promtool, tmp_path, name, expr="vector(1) == 0")
    assert done.returncode != 0, done.stdout
    assert f"alertname: {name}" in done.stdout + done.stderr


@pytest.mark.parametrize("name", NAMES)
def test_an_alert_that_always_fires_fails_its_unit_tests(promtool: Path, tmp_path: Path, name: str) -> None:
    done = _mutated_run(promtool, tmp_path, name, expr="vector(1)")
    assert done.returncode != 0, done.stdout
    assert f"alertname: {name}" in done.stdout + done.stderr


def test_a_wrong_expectation_fails(promtool: Path, tmp_path: Path) -> None:
    """One expected label changed in a copy of the unit tests: promtool reports the mismatch."""
    tests = _unit_tests()
    case = next(
        c
        for g in tests["tests"]
        for c in g["alert_rule_test"]
        if c["alertname"] == "OrbitMQBrokerDown" and c["exp_alerts"]
    )
    case["exp_alerts"][0]["exp_labels"]["severity"] = "warning"
    done = _mutated_run(promtool, tmp_path, "OrbitMQBrokerDown", unit_tests=tests)
    assert done.returncode != 0, done.stdout
    assert 'severity="critical"' in done.stdout + done.stderr
