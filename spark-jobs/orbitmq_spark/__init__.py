"""A PySpark data source for orbitmq topics (Spark's Python Data Source API, PySpark >= 4.2).

    from orbitmq_spark import register
    register(spark)                     # the format name is "orbitmq"
    df = spark.read.format("orbitmq").option("namesrv", "127.0.0.1:9876").option("topic", "T").load()

Install with ``pip install 'orbitmq[spark]'``; options and the offsets JSON are described in
:mod:`orbitmq_spark.options`, reading and writing in :mod:`orbitmq_spark.source`.
"""

from __future__ import annotations

from typing import Any

from orbitmq_spark.options import OptionError
from orbitmq_spark.source import OrbitmqDataSource

__all__ = ["OptionError", "OrbitmqDataSource", "register"]


def register(spark: Any) -> None:
    """Register the ``orbitmq`` format with ``spark`` (a SparkSession)."""
    spark.dataSource.register(OrbitmqDataSource)
