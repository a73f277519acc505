"""What the spark-submit jobs under ``spark-jobs/jobs/`` share: argument types that name the
rule a bad value breaks, and their contract with a scheduler (a SparkApplication, cron): exit
status 2 for bad arguments or names the cluster does not know, 1 for any other failure, 0 with
a JSON summary as the last stdout line; a failure's JSON line says ``"status": "error"``.

Here rather than beside the jobs, so a job is one file to ``spark-submit`` (this package is
installed with the ``orbitmq[spark]`` extra wherever the jobs run).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from orbitmq.common.names import validate_group_name, validate_topic_name
from orbitmq.common.namesrv_list import NamesrvListError, parse_namesrv_list


class UsageError(Exception):
    """Bad arguments, or a topic or group the cluster does not know: exit status 2."""


def name_arg(kind: str, check: Callable[[str], str]) -> Callable[[str], str]:
    """An argparse type checking a name with orbitmq's own rule (argparse names ``kind``)."""

    def parse(text: str) -> str:
        try:
            return check(text.strip())
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = kind
    return parse


topic_arg = name_arg("topic", validate_topic_name)
group_arg = name_arg("group", validate_group_name)


def namesrv_arg(text: str) -> str:
    """argparse type of ``--namesrv``: ``host:port;host:port`` (``,`` works too)."""
    try:
        return ";".join(parse_namesrv_list(text))
    except NamesrvListError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def run_job(
    job: str,
    run: Callable[[], dict[str, Any]],
    failures: tuple[type[BaseException], ...],
    describe: Callable[[BaseException], str] = str,
) -> int:
    """Run a job's body and keep the contract above; ``failures`` are the errors that end it
    with status 1 (anything else is a bug and keeps its traceback)."""
    try:
        summary = run()
    except UsageError as error:
        return _failed(job, describe(error), 2)
    except failures as error:
        return _failed(job, describe(error), 1)
    print(json.dumps(summary))
    return 0


def _failed(job: str, message: str, status: int) -> int:
    print(f"{job}.py: error: {message}", file=sys.stderr)
    print(json.dumps({"job": job, "status": "error", "error": message}))
    return status
