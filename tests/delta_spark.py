"""delta-spark, Spark's own Delta reader, as the reference reader of runner-written tables.

delta-spark implements the whole Delta protocol (deletion vectors included), so a test can
read a table the runner wrote with `read_with_delta_spark(spark, path)` and compare rows.

The jars come from Maven Central through Maven (Debian: package `maven`; `./dev test`
installs it as root with apt-get): `delta_jars()` copies them once into
`~/.cache/runner/jars/delta-<version>_<scala>/` ($RUNNER_JAR_CACHE or $XDG_CACHE_HOME move
it) and afterwards only checks that they are there. Without Maven or the network it returns
[] and the tests that need it skip, saying why (`needs_delta_spark`). On a machine with no
Maven, copying the two jars into that directory by hand works too.

The shared `spark` fixture (tests/conftest.py) starts its one session with these jars and
`SPARK_CONF`: a session extension is a static conf, so it cannot be added later.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyspark
import pytest

from runner.errors import EnvironmentProblem
from runner.jvm.maven import cache_root, ensure_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# delta-spark 4.4.0 accepts pyspark 4.0.1 to 4.2.0; since Delta 4.1.0 its jars carry the Spark
# line they were built for (delta-spark_4.2_2.13), and they need delta-storage and Delta
# Kernel's jars besides. Scala 2.13 like pyspark's own jars; delta-spark's other runtime
# dependencies (scala-library, antlr4-runtime 4.13.1) ship with pyspark.
DELTA_VERSION = "4.4.0"
SCALA_VERSION = "2.13"
SPARK_LINE = ".".join(pyspark.__version__.split(".")[:2])
ARTIFACTS = (
    f"io.delta:delta-spark_{SPARK_LINE}_{SCALA_VERSION}:{DELTA_VERSION}",
    f"io.delta:delta-storage:{DELTA_VERSION}",
)
EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
SPARK_CONF = {
    # Required: without it delta-spark reads a table with deletion vectors WITHOUT applying
    # them (deleted rows come back, no error); the extension's planner rule adds the filter.
    "spark.sql.extensions": EXTENSION,
    # delta-spark refuses every read unless spark.sql.catalog.spark_catalog is set (to
    # DeltaCatalog). Path reads need no catalog: switch the check off rather than replace the
    # session catalog that the rest of the suite uses.
    "spark.databricks.delta.requiredSparkConfsCheck.enabled": "false",
    # Delta rebuilds a table's state from its log in 50 partitions by default: on local[2]
    # and tests' small logs, 2 make a first read of a table seconds faster.
    "spark.databricks.delta.snapshotPartitions": "2",
}


def jar_dir() -> Path:
    return cache_root() / f"delta-{DELTA_VERSION}_{SPARK_LINE}_{SCALA_VERSION}"


@functools.cache
def _resolve() -> tuple[tuple[str, ...], str | None]:
    """(jar paths, None) or ((), why not). Runs Maven at most once per test session."""
    try:
        return tuple(ensure_jars(jar_dir().name, ARTIFACTS)), None
    except EnvironmentProblem as exc:
        return (), (
            f"delta-spark {DELTA_VERSION} jars are not in {jar_dir()} and cannot be fetched: "
            f"{exc} (`./dev test` installs Maven when run as root with apt-get)"
        )


def delta_jars() -> list[str]:
    """delta-spark's jars (fetched once into the cache), or [] when they cannot be had."""
    return list(_resolve()[0])


def delta_spark_problem() -> str | None:
    """Why delta_jars() is empty, or None."""
    return _resolve()[1]


def delta_spark_ready(spark: SparkSession) -> str | None:
    """Why this session cannot read Delta with delta-spark, or None."""
    problem = delta_spark_problem()
    if problem:
        return problem
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    if EXTENSION not in [e.strip() for e in extensions.split(",")]:
        return (
            f"the SparkSession was started without {EXTENSION} "
            "(tests/delta_spark.py SPARK_CONF): delta-spark would ignore deletion vectors"
        )
    return None


@pytest.fixture
def needs_delta_spark(spark: SparkSession) -> SparkSession:
    """The shared session, able to read Delta with delta-spark; skips saying why not."""
    problem = delta_spark_ready(spark)
    if problem:
        pytest.skip(f"delta-spark reference reader unavailable: {problem}")
    return spark


def read_with_delta_spark(
    spark: SparkSession, path: str | os.PathLike[str]
) -> list[dict[str, Any]]:
    """The table's current rows as delta-spark reads them (deletion vectors applied)."""
    problem = delta_spark_ready(spark)
    if problem:  # a read without the extension returns deleted rows: never do it silently
        raise RuntimeError(f"cannot read with delta-spark: {problem}")
    frame = spark.read.format("delta").load(str(path))
    return [row.asDict(recursive=True) for row in frame.collect()]
