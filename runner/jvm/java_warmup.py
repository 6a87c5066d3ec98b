"""First uses a small run's JVM makes while Spark starts, instead of in the run's plan.

A cold JVM initialises Spark's SQL parser (its ANTLR tables), the function registry,
Hadoop's configuration and file system, the JSON schema reader, and the code generator
with Janino (which compile a file source's row projection even with code generation off)
the first time a query needs them: a few tenths of a second of a small run's plan and keys
stages. None of them needs the SparkContext, so a thread starts them as soon as Py4J's
gateway is up, while the main thread waits for Spark's start, and the JVM does both at
once on 2 cores (plan + keys 1.15-1.34 s -> 0.93-0.99 s in a throwaway script with the
quick JIT: docs/performance.md, "Small runs"). Nothing of a run depends on it: a failure
is logged and ignored.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import structlog

log = structlog.get_logger(__name__)

# How long the thread waits for the gateway before it gives up (a JVM that never starts).
GATEWAY_WAIT_SECONDS = 60.0


def warm_up_while_starting(row_sources: bool) -> threading.Thread:
    """Start the warm-up thread; call just before SparkSession.builder.getOrCreate().
    `row_sources`: the run reads JSON or CSV, whose reader compiles a row projection
    (a parquet or ORC source's vectorized reader does not, and the compilation would only
    take the second core from the plan: 1.79 -> 1.95 s for 1,000 parquet rows, against
    2.19 -> 1.92 s for 6 JSON rows)."""
    thread = threading.Thread(
        target=_warm_up, args=(row_sources,), name="runner-jvm-warm-up", daemon=True
    )
    thread.start()
    return thread


def _warm_up(row_sources: bool) -> None:
    from pyspark import SparkContext

    deadline = time.monotonic() + GATEWAY_WAIT_SECONDS
    while SparkContext._jvm is None:
        if time.monotonic() > deadline:
            return
        time.sleep(0.01)
    try:
        _first_uses(SparkContext._jvm, row_sources)
    except Exception as exc:  # an optimisation only: the run reports real errors itself
        log.debug("jvm_warm_up_failed", error=str(exc))


def _first_uses(jvm: Any, row_sources: bool) -> None:
    spark_sql = jvm.org.apache.spark.sql
    parser = getattr(getattr(spark_sql.catalyst.parser, "CatalystSqlParser$"), "MODULE$")
    parser.parseTableSchema("id long, name string, at timestamp, amount decimal(10,2)")
    parser.parseExpression(
        "CASE WHEN a IS NULL OR CAST(a AS STRING) = '' THEN 'x' ELSE concat('k=', a) END"
    )
    spark_sql.catalyst.analysis.FunctionRegistry.builtin()
    spark_sql.types.DataType.fromJson(
        '{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,"metadata":{}}]}'
    )
    jvm.org.apache.hadoop.fs.FileSystem.getLocal(jvm.org.apache.hadoop.conf.Configuration())
    if not row_sources:
        return
    # Spark's code generator and Janino, as a JSON or CSV reader's row projection uses them
    codegen = spark_sql.catalyst.expressions.codegen
    nil = getattr(getattr(jvm.scala.collection.immutable, "Nil$"), "MODULE$")
    getattr(getattr(codegen, "GenerateUnsafeProjection$"), "MODULE$").generate(nil)
