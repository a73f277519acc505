"""What the spark-submit jobs under ``spark-jobs/jobs/`` share: argument types that name the
rule a bad value breaks, the SparkSession they start, and their contract with a scheduler (a
SparkApplication, cron): exit status 2 for bad arguments (argparse's own errors included) or
names the cluster does not know, 1 for any other failure, 0 on success; stdout always ends with
one JSON summary line, ``{"job": ..., "ok": true, "status": "ok", ...}`` or ``{"job": ...,
"ok": false, "status": "error", "error": ...}``.

Here rather than beside the jobs, so a job is one file to ``spark-submit`` (this package is
installed with the ``orbitmq[spark]`` extra wherever the jobs run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from orbitmq.common.names import validate_group_name, validate_topic_name
from orbitmq.common.namesrv_list import NAMESRV_ENV, NamesrvListError, parse_namesrv_list


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


class JobArgumentParser(argparse.ArgumentParser):
    """argparse for a job: ``prog`` is ``<job>.py``; a bad or missing argument ends like any
    refused run (the message on stderr, the JSON error line on stdout, exit status 2), and
    :meth:`add_namesrv` adds ``--namesrv`` with ``ORBITMQ_NAMESRV`` as its default."""

    def __init__(self, job: str, description: str) -> None:
        super().__init__(prog=f"{job}.py", description=description)
        self.job = job
        self._namesrv_added = False

    def add_namesrv(self) -> None:
        self.add_argument(
            "--namesrv",
            type=namesrv_arg,
            default=None,
            help=f"name servers 'host:port;host:port' (default: ${NAMESRV_ENV})",
        )
        self._namesrv_added = True

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed = super().parse_args(args, namespace)
        if self._namesrv_added and parsed.namesrv is None:
            parsed.namesrv = self._namesrv_from_env()
        return parsed

    def _namesrv_from_env(self) -> str:
        text = os.environ.get(NAMESRV_ENV, "").strip()
        if not text:
            self.error(
                f"argument --namesrv: not given and {NAMESRV_ENV} is not set "
                "(name servers 'host:port;host:port')"
            )
        try:
            return namesrv_arg(text)
        except argparse.ArgumentTypeError as error:
            self.error(f"{NAMESRV_ENV} (the default of --namesrv): {error}")

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        sys.exit(_failed(self.job, message, 2))


LOCAL_ADDRESS = "127.0.0.1"
DRIVER_ADDRESS_SETTINGS = ("spark.driver.bindAddress", "spark.driver.host")
DRIVER_ADDRESS_ENV = ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME")


def local_bind_settings(
    master: str | None, conf: Mapping[str, str], env: Mapping[str, str]
) -> dict[str, str]:
    """The driver-address settings a job adds to its SparkSession: ``127.0.0.1`` for a local
    master (``local``, ``local[N]``, ``local-cluster[...]``; no master is local too), unless the
    run was told an address (either setting in ``conf``, or ``SPARK_LOCAL_IP`` /
    ``SPARK_LOCAL_HOSTNAME`` in ``env``). Spark's own default is the first non-loopback
    address of the host, which a sandbox or a container may not let it bind; a local run's
    executors are in the driver's JVM or on the same host, so the loopback address serves them."""
    if not (master or "local").startswith("local"):
        return {}
    if any(key in conf for key in DRIVER_ADDRESS_SETTINGS) or any(
        env.get(name) for name in DRIVER_ADDRESS_ENV
    ):
        return {}
    return dict.fromkeys(DRIVER_ADDRESS_SETTINGS, LOCAL_ADDRESS)


def spark_session(app: str, settings: Mapping[str, str] | None = None) -> Any:
    """The job's SparkSession, named ``app``, with ``settings`` and :func:`local_bind_settings`."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    # The JVM first (spark-submit's, or a new one): its conf holds --master and every --conf,
    # which decide whether the local defaults apply; the builder's settings would override them.
    SparkContext._ensure_initialized()
    submitted = dict(SparkConf().getAll())
    builder = SparkSession.builder.appName(app)
    chosen = {**local_bind_settings(submitted.get("spark.master"), submitted, os.environ), **(settings or {})}
    for key, value in chosen.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


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
    print(json.dumps({"job": job, "ok": True, **summary}))
    return 0


def _failed(job: str, message: str, status: int) -> int:
    print(f"{job}.py: error: {message}", file=sys.stderr)
    print(json.dumps({"job": job, "ok": False, "status": "error", "error": message}), flush=True)
    return status
