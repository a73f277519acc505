"""A minimal PySpark application for the spark-operator tests: counts ``range(N)`` on the
executors and prints one JSON line; exits with ``--exit-code`` (a driver that fails on purpose).

Run by the driver through Spark's entrypoint (spark-jobs/docker/entrypoint.sh: locally, or in
a driver pod whose executors do the counting)."""

from __future__ import annotations

import argparse
import json
import sys

from pyspark.sql import SparkSession


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1000, help="how many numbers to count (default 1000)")
    parser.add_argument("--exit-code", type=int, default=0, help="exit status after the count (default 0)")
    args = parser.parse_args()
    spark = SparkSession.builder.appName("orbitmq-count-job").getOrCreate()
    try:
        counted = spark.range(args.rows).count()
        print(json.dumps({"counted": counted, "master": spark.sparkContext.master}), flush=True)
    finally:
        spark.stop()
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
