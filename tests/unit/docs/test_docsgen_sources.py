"""Each reference page follows its source: a setting, an option, a metric or an error reason
added to the code shows up on the page with what a reader needs, and nothing is hand-written."""

from __future__ import annotations

import textwrap
from pathlib import Path

import click
import pytest
from pydantic import Field

from orbitmq.broker.settings import BrokerSettings
from orbitmq.docsgen import cli_page, errors_page, helm_page, metrics_page, settings_page
from orbitmq.docsgen.markdown import Anchors, prose
from orbitmq.v1.broker_pb2 import ErrorReason


class _LaterBrokerSettings(BrokerSettings):
    retention_hint_ms: int = Field(default=2_000, ge=5)
    """How long a hint is kept | at most (``<name>``)."""
    hint_mode: str = "fast"


def _broker_command() -> click.Group:
    @click.group()
    def main() -> None:
        """Root."""

    @main.command("broker")
    @click.option("--retention-hint-ms", type=int, help="Sets the hint.")
    @click.option("--hint-mode", help="Mode of hints.")
    def broker(retention_hint_ms: int | None, hint_mode: str | None) -> None:
        """Run it."""

    return main


def test_a_new_setting_shows_its_environment_variable_flag_rules_default_and_docstring() -> None:
    role = settings_page.Role(
        "Broker", lambda: _LaterBrokerSettings, lambda: "ORBITMQ_BROKER_", "broker", "broker/settings.py"
    )
    page = settings_page.render((role,), _broker_command())
    (row,) = [line for line in page.splitlines() if 'id="broker-retention-hint-ms"' in line]
    assert "`retention_hint_ms`" in row
    assert "`retention_hint_ms`<br>`$ORBITMQ_BROKER_RETENTION_HINT_MS`<br>" in row
    assert "[`--retention-hint-ms`](cli.md#orbitmq-broker--retention-hint-ms)" in row
    assert "`2000` (2 s)" in row
    assert "| integer, ≥ 5 |" in row
    assert r"How long a hint is kept \| at most (`<name>`)." in row
    # a field without a docstring is described by its flag's help
    (row,) = [line for line in page.splitlines() if 'id="broker-hint-mode"' in line]
    assert row.endswith('| `"fast"` | Mode of hints. |')
    # the model's own fields first, then the inherited ones (the broker's, then TLS and auth)
    assert page.index('id="broker-retention-hint-ms"') < page.index('id="broker-flush-mode"')
    assert 'id="broker-tls-cert"' in page


def test_a_new_option_shows_its_type_default_environment_variable_and_help() -> None:
    @click.group()
    def main() -> None:
        """Root help."""

    @main.group()
    def admin() -> None:
        """Admin help."""

    @admin.command("purge")
    @click.option("--older-than-ms", type=click.IntRange(1, 10), default=3, help="Cut <n> | more.")
    @click.option("--mode", type=click.Choice(["fast", "safe"]), envvar="ORBITMQ_PURGE_MODE", required=True)
    @click.option("--dry-run", is_flag=True)
    @click.argument("topic")
    def purge(older_than_ms: int, mode: str, dry_run: bool, topic: str) -> None:
        """Purge a topic.

        Second paragraph."""

    page = cli_page.render(main)
    assert "#### `orbitmq admin purge` {#orbitmq-admin-purge}" not in page  # depth follows the path
    assert "### `orbitmq admin purge` {#orbitmq-admin-purge}" in page
    assert "orbitmq admin purge [OPTIONS] TOPIC" in page
    assert "Purge a topic.\n\nSecond paragraph." in page
    assert "[`purge`](#orbitmq-admin-purge)" in page
    rows = {line.split('"')[1]: line for line in page.splitlines() if line.startswith('| <a id="')}
    assert rows["orbitmq-admin-purge--older-than-ms"].split(" | ")[1:] == [
        "integer, 1 ≤ x ≤ 10",
        "`3`",
        r"Cut &lt;n&gt; \| more. |",
    ]
    assert "one of `fast`, `safe`" in rows["orbitmq-admin-purge--mode"]
    assert "`--mode`<br>`$ORBITMQ_PURGE_MODE` |" in rows["orbitmq-admin-purge--mode"]
    assert "**Required.**" in rows["orbitmq-admin-purge--mode"]
    assert "| flag | off |" in rows["orbitmq-admin-purge--dry-run"]


def test_every_error_reason_has_a_section_with_its_cause_action_and_status() -> None:
    page = errors_page.render()
    for name, number in ErrorReason.items():
        anchor = name.lower().replace("_", "-")
        section = page.split(f"{{#{anchor}}}", 1)[1].split("\n### ", 1)[0]
        assert "**Cause.**" in section and "**What to do.**" in section, name
        assert f"| Number | {number} |" in section
    # the reason the guard raises through its own class is answered as that class says
    unauthenticated = page.split("{#unauthenticated}", 1)[1].split("\n### ", 1)[0]
    assert "| gRPC status | `UNAUTHENTICATED` |" in unauthenticated
    assert "`AuthenticationFailure`" in unauthenticated
    slave_read_only = page.split("{#slave-read-only}", 1)[1].split("\n### ", 1)[0]
    assert "| Producer | retried on a fresh route within `send_timeout_ms` |" in slave_read_only


def test_proto_comments_belong_to_the_value_below_them() -> None:
    text = textwrap.dedent(
        """\
        enum Other { A = 0; }
        enum ErrorReason {
          ERROR_REASON_UNSPECIFIED = 0;
          // Two lines
          // of meaning.
          FIRST = 1;
          SECOND = 2;
        }
        """
    )
    assert errors_page.proto_comments(text) == {"FIRST": "Two lines of meaning."}


def test_metric_help_texts_are_read_from_each_way_a_family_is_defined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "docsgen_metrics_sample.py").write_text(
        textwrap.dedent(
            """\
            from prometheus_client import Counter, Histogram
            from prometheus_client.core import GaugeMetricFamily

            SENT = Counter("orbitmq_sample_sent_total", "Messages sent", ["topic"])

            def _gauge(name, documentation, group, value):
                return GaugeMetricFamily(name, documentation, labels=["group"])

            def collect():
                yield _gauge("orbitmq_sample_waiting", "Deliveries waiting", "g", 1)
                for metric, tally, doc in (("orbitmq_sample_seconds", None, "Time to do it"),):
                    yield Histogram(metric, doc, labelnames=["broker"])
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert metrics_page.help_texts("docsgen_metrics_sample") == {
        "orbitmq_sample_sent_total": "Messages sent",
        "orbitmq_sample_waiting": "Deliveries waiting",
        "orbitmq_sample_seconds": "Time to do it",
    }


def test_the_metrics_page_lists_every_family_of_the_inventory_the_runtime_ones_included() -> None:
    from orbitmq_operator.monitoring.inventory import metric_families

    page = metrics_page.render()
    for name in metric_families():
        assert f'id="{name.replace("_", "-")}"' in page, name
    for name in ("orbitmq_process_threads", "orbitmq_asyncio_tasks", "orbitmq_server_table_entries"):
        assert f'id="{name.replace("_", "-")}"' in page


def test_every_module_defining_an_orbitmq_family_is_on_the_metrics_page() -> None:
    """A family defined in a module the inventory does not read would be missing from the page
    and from the dashboards' and alerts' checks: find such modules by their literals."""
    import ast

    from orbitmq_operator.monitoring.inventory import SOURCES

    services = Path(__file__).resolve().parents[3] / "services" / "orbitmq"
    constructors = {"Counter", "Gauge", "Histogram", "Summary", "Info"}
    defining = set()
    for path in services.rglob("*.py"):
        if "_pb2" in path.name or "bench" in path.parts or "docsgen" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            callee = getattr(node.func, "id", getattr(node.func, "attr", ""))
            first = node.args[0]
            if (callee in constructors or callee.endswith("MetricFamily")) and (
                isinstance(first, ast.Constant) and str(first.value).startswith("orbitmq_")
            ):
                module = path.relative_to(services.parent).with_suffix("").as_posix().replace("/", ".")
                defining.add(module)
    assert defining <= set(SOURCES)
    assert set(SOURCES) <= set(metrics_page.PROCESSES)


def test_values_comments_attach_to_the_key_right_below_them() -> None:
    text = textwrap.dedent(
        """\
        # The file's header, apart.

        # -- Name override.
        nameOverride: ""
        operator:
          # Replicas of the operator
          # (two elect one).
          replicas: 1

          # A comment before a blank line belongs to nothing.

          verbose: false
          list:
            # not a key
            - a: 1
        """
    )
    assert helm_page.values_comments(text) == {
        "nameOverride": "Name override.",
        "operator.replicas": "Replicas of the operator (two elect one).",
    }


def test_an_anchor_used_twice_on_a_page_is_refused() -> None:
    anchors = Anchors()
    anchors.add("broker-listen")
    with pytest.raises(ValueError, match="'broker-listen' is empty or used twice"):
        anchors.add("broker-listen")


def test_prose_escapes_what_markdown_would_read_as_markup_but_keeps_code_spans() -> None:
    assert prose("a | b <c> ``x | <y>`` *d* e_f") == r"a \| b &lt;c&gt; `x | <y>` \*d\* e\_f"
    assert prose(":class:`~orbitmq.common.tls.ServerTls` line\nbreak") == "`ServerTls` line break"


def test_a_server_flag_names_the_environment_variable_and_links_the_setting_it_sets() -> None:
    """``orbitmq broker --flush-mode`` has no click default or envvar of its own: the settings
    loader fills both, so the CLI page shows the setting's variable and links to it."""
    page = cli_page.render()
    (row,) = [line for line in page.splitlines() if 'id="orbitmq-broker--flush-mode"' in line]
    assert "`--flush-mode`<br>`$ORBITMQ_BROKER_FLUSH_MODE` |" in row
    assert "Setting [`flush_mode`](settings.md#broker-flush-mode)." in row
    (row,) = [line for line in page.splitlines() if 'id="orbitmq-broker--broker-id-from-hostname"' in line]
    assert "settings.md" not in row  # a flag of the command only, no setting behind it


def _undescribed(page: str) -> set[str]:
    """Anchors of the settings whose description cell is empty."""
    return {
        line.split('"')[1]
        for line in page.splitlines()
        if line.startswith('| <a id="') and line.endswith("|   |")
    }


def test_a_new_setting_comes_with_a_description() -> None:
    empty = _undescribed(settings_page.render())
    assert not empty, f"settings without a docstring: {sorted(empty)}"
    # a field with neither a docstring nor a flag (``orbitmq broker`` has no --hint-mode) is caught
    role = settings_page.Role(
        "Broker", lambda: _LaterBrokerSettings, lambda: "ORBITMQ_BROKER_", "broker", "broker/settings.py"
    )
    assert _undescribed(settings_page.render((role,))) == {"broker-hint-mode"}
