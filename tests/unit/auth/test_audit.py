"""The audit trail: the JSON line each event logs, the counter it bumps (as a scrape of a real
registry shows it), and no secret written even when a reason quotes one."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from orbitmq.auth.audit import REDACTED, AuditEvent, counts, line, record, redact, register_metrics

SECRET = "s3cr3t-Key_value/42"


def _event(**changes: str) -> AuditEvent:
    fields = {
        "kind": "denied",
        "who": "alice",
        "source": "10.1.2.3:51234",
        "action": "Pub",
        "resource": "Topic:orders",
        "resource_type": "Topic",
        "decision": "Deny",
        "request_id": "req-7",
        "rpc": "/orbitmq.v1.Broker/SendMessage",
        "reason": "no entry matched",
    }
    fields.update(changes)
    return AuditEvent(**fields)  # type: ignore[arg-type]


def _audit_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, dict[str, str]]]:
    return [(r.levelno, json.loads(r.getMessage())) for r in caplog.records if r.name == "orbitmq.audit"]


def _scraped(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    """orbitmq_auth_decisions_total samples as /metrics would serve them."""
    found = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "orbitmq_auth_decisions_total":
                labels = sample.labels
                found[(labels["decision"], labels["action"], labels["resource_type"])] = sample.value
    return found


def test_a_denial_is_one_json_line_with_every_field(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="orbitmq.audit")
    record(_event())
    [(level, document)] = _audit_lines(caplog)
    assert level == logging.WARNING
    assert list(document) == [
        "ts",
        "kind",
        "who",
        "source",
        "rpc",
        "action",
        "resource",
        "resource_type",
        "decision",
        "request_id",
        "reason",
    ]
    assert document["kind"] == "denied"
    assert document["who"] == "alice"
    assert document["source"] == "10.1.2.3:51234"
    assert document["rpc"] == "/orbitmq.v1.Broker/SendMessage"
    assert (document["action"], document["resource"], document["resource_type"]) == (
        "Pub",
        "Topic:orders",
        "Topic",
    )
    assert (document["decision"], document["request_id"]) == ("Deny", "req-7")
    assert document["reason"] == "no entry matched"
    stamp = datetime.fromisoformat(document["ts"])
    assert document["ts"].endswith("Z") and abs((datetime.now(UTC) - stamp).total_seconds()) < 60


def test_the_time_stamp_is_utc_with_milliseconds() -> None:
    event = _event(kind="allowed_admin_change", action="Update", resource="Cluster:*", decision="Allow")
    stamp = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
    assert json.loads(line(event, stamp))["ts"] == "2026-01-02T03:04:05.678Z"


def test_admin_changes_log_at_info_refusals_at_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="orbitmq.audit")
    record(_event(kind="allowed_admin_change", decision="Allow"))
    record(_event(kind="authentication_failed", who="", reason="unknown access key"))
    assert [(level, doc["kind"]) for level, doc in _audit_lines(caplog)] == [
        (logging.INFO, "allowed_admin_change"),
        (logging.WARNING, "authentication_failed"),
    ]


def test_each_kind_counts_under_its_own_decision_label() -> None:
    registry = CollectorRegistry()
    register_metrics(registry)
    register_metrics(registry)  # a second guard on the same server: still one family
    before = _scraped(registry)
    record(_event(action="Sub", resource="Group:billing", resource_type="Group"))
    record(_event(action="Sub", resource="Group:billing", resource_type="Group"))
    record(_event(kind="authentication_failed", action="Sub", resource_type="Group"))
    record(_event(kind="allowed_admin_change", action="Update", resource_type="Cluster", decision="Allow"))
    after = _scraped(registry)
    grown = {labels: value - before.get(labels, 0) for labels, value in after.items()}
    assert {labels: n for labels, n in grown.items() if n} == {
        ("denied", "Sub", "Group"): 2,
        ("authentication_failed", "Sub", "Group"): 1,
        ("allowed", "Update", "Cluster"): 1,
    }
    assert counts()[("denied", "Sub", "Group")] == after[("denied", "Sub", "Group")]
    exposition = generate_latest(registry).decode()
    assert "# TYPE orbitmq_auth_decisions_total counter" in exposition
    assert 'orbitmq_auth_decisions_total{action="Sub",decision="denied",resource_type="Group"}' in exposition


def test_an_unknown_kind_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="'refused'"):
        _event(kind="refused")


@pytest.mark.parametrize(
    "reason",
    [
        f"signature mismatch: Signature={SECRET}",
        f'document {{"username": "bob", "password": "{SECRET}"}}',
        f"x-orbitmq-signature: {SECRET}",
        f"bad user: secretKey={SECRET}; retry",
        f"Authorization: MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature={SECRET}",
        f"token='{SECRET}'",
    ],
)
def test_no_field_of_a_logged_line_carries_a_secret(caplog: pytest.LogCaptureFixture, reason: str) -> None:
    caplog.set_level(logging.INFO, logger="orbitmq.audit")
    record(_event(kind="authentication_failed", reason=reason, who=f"secret_key={SECRET}"))
    [(_, document)] = _audit_lines(caplog)
    assert SECRET not in caplog.text
    assert all(SECRET not in value for value in document.values())
    assert REDACTED in document["reason"]


def test_redact_keeps_what_is_not_a_secret() -> None:
    text = "user alice denied Pub on Topic:orders from 10.0.0.1 (no entry matched)"
    assert redact(text) == text
    assert redact("secret=abc, topic=orders") == f"secret={REDACTED}, topic=orders"


def test_an_event_without_a_request_id_gets_one() -> None:
    first, second = _event(request_id=""), _event(request_id="")
    assert len(first.request_id) == 16 and first.request_id != second.request_id
    assert json.loads(line(first))["request_id"] == first.request_id
    assert _event().request_id == "req-7"  # the client's is kept
