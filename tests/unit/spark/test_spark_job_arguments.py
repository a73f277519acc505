"""The Spark jobs' contract with a scheduler, without a SparkSession: every argument error
(argparse's own included) ends with the JSON summary line and exit status 2, ``--namesrv``
defaults to ``ORBITMQ_NAMESRV``, and a local run's driver binds to 127.0.0.1 unless told
otherwise (:func:`orbitmq_spark.jobkit.local_bind_settings`)."""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from orbitmq_spark.jobkit import local_bind_settings, run_job

JOBS = Path(__file__).resolve().parents[3] / "spark-jobs" / "jobs"

# Each job with arguments that parse, so one can be dropped or spoiled at a time.
VALID = {
    "lag_report": ["--output", "/tmp/lag", "--group", "billing"],
    "archive": ["--topic", "Orders", "--output", "/tmp/archive"],
    "stream_copy": ["--topic", "Orders", "--output", "/tmp/copy", "--checkpoint", "/tmp/ckpt"],
    "redistribute_backlog": ["--topic", "Orders", "--group", "billing", "--target", "Orders-wide"],
}


@functools.cache
def _job(name: str) -> ModuleType:
    """The job's file as a module (as spark-submit runs it, a file and not a package member)."""
    spec = importlib.util.spec_from_file_location(f"spark_job_{name}", JOBS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _refused(name: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    """Parse ``argv`` with the job's parser, expecting a refusal: (its JSON line, its stderr)."""
    with pytest.raises(SystemExit) as ended:
        _job(name).parse_args(argv)
    out, err = capsys.readouterr()
    assert ended.value.code == 2, (out, err)
    line = json.loads(out.strip().splitlines()[-1])
    assert line["job"] == name and line["ok"] is False and line["status"] == "error", line
    return line, err


@pytest.mark.parametrize("name", sorted(VALID))
def test_a_missing_argument_ends_with_the_json_error_line(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORBITMQ_NAMESRV", "127.0.0.1:9876")
    line, err = _refused(name, VALID[name][2:], capsys)  # the first option left out
    assert VALID[name][0] in line["error"] and "required" in line["error"]
    assert f"{name}.py: error:" in err and "usage:" in err


@pytest.mark.parametrize("name", sorted(VALID))
def test_a_malformed_argument_ends_with_the_json_error_line(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line, _ = _refused(name, ["--namesrv", "no-port", *VALID[name]], capsys)
    assert "--namesrv" in line["error"] and "'no-port'" in line["error"]


def test_a_check_after_parsing_and_an_unknown_option_end_with_the_json_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line, _ = _refused("archive", ["--namesrv", "h:1", *VALID["archive"], "--min-partitions", "0"], capsys)
    assert "--min-partitions" in line["error"] and "1 or more" in line["error"]
    line, _ = _refused("lag_report", ["--namesrv", "h:1", *VALID["lag_report"], "--colour"], capsys)
    assert "--colour" in line["error"]


@pytest.mark.parametrize("name", sorted(VALID))
def test_namesrv_defaults_to_orbitmq_namesrv(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBITMQ_NAMESRV", "10.0.0.1:9876, 10.0.0.2:9876")
    assert _job(name).parse_args(VALID[name]).namesrv == "10.0.0.1:9876;10.0.0.2:9876"
    given = _job(name).parse_args(["--namesrv", "h:1", *VALID[name]])
    assert given.namesrv == "h:1"  # the flag wins over the environment


def test_no_namesrv_anywhere_or_a_bad_one_in_the_environment_is_refused_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ORBITMQ_NAMESRV", raising=False)
    line, _ = _refused("lag_report", VALID["lag_report"], capsys)
    assert "--namesrv" in line["error"] and "ORBITMQ_NAMESRV is not set" in line["error"]
    monkeypatch.setenv("ORBITMQ_NAMESRV", "h:99999")
    line, _ = _refused("archive", VALID["archive"], capsys)
    assert "ORBITMQ_NAMESRV" in line["error"] and "'h:99999'" in line["error"]


def test_the_summary_line_says_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_job("lag_report", lambda: {"job": "lag_report", "status": "ok", "rows": 3}, ()) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {
        "job": "lag_report",
        "ok": True,
        "status": "ok",
        "rows": 3,
    }


LOOPBACK = {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}


@pytest.mark.parametrize(
    ("master", "conf", "env", "expected"),
    [
        ("local[2]", {}, {}, LOOPBACK),
        ("local", {}, {}, LOOPBACK),
        ("local-cluster[2,1,1024]", {}, {}, LOOPBACK),
        (None, {}, {}, LOOPBACK),  # plain python: PySpark's default master is local[*]
        ("local[2]", {"spark.driver.bindAddress": "0.0.0.0"}, {}, {}),
        ("local[2]", {"spark.driver.host": "10.1.2.3"}, {}, {}),
        ("local[2]", {}, {"SPARK_LOCAL_IP": "10.1.2.3"}, {}),
        ("local[2]", {}, {"SPARK_LOCAL_HOSTNAME": "spark-host"}, {}),
        ("local[2]", {}, {"SPARK_LOCAL_IP": ""}, LOOPBACK),  # set but empty: not an address
        ("k8s://https://kubernetes.default.svc", {}, {}, {}),
        ("spark://master:7077", {}, {}, {}),
        ("yarn", {}, {}, {}),
    ],
)
def test_a_local_run_binds_the_driver_to_loopback_unless_told_otherwise(
    master: str | None, conf: dict[str, str], env: dict[str, str], expected: dict[str, str]
) -> None:
    assert local_bind_settings(master, conf, env) == expected
