"""JDBC sources: a table or query, optionally only rows above the last checkpoint of a
column, optionally split over parallel range reads.

An incremental read first asks the database for the column's largest value above the
checkpoint (as text, so the value round-trips exactly) and then reads the rows in
(checkpoint, that value]. The batch is read twice (bucket counts, then the write) and the
upper bound keeps both reads equal while new rows arrive.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from runner.errors import UserError
from runner.sources.model import JdbcRead, SourcePlan
from runner.spec.model import JdbcSpec, Source
from runner.spec.secrets import resolve

# Drivers a url prefix implies, and where Debian puts their jars.
KNOWN_DRIVERS = {
    "jdbc:postgresql:": ("org.postgresql.Driver", "/usr/share/java/postgresql.jar"),
}


def driver_jars(sources: tuple[Source, ...]) -> list[str]:
    """The JDBC driver jars the sources need, from the spec or a well-known path; Spark
    must have them on its class path when it starts."""
    jars = []
    for source in sources:
        if source.jdbc is None:
            continue
        jar = source.jdbc.jar or _known(source.jdbc.url)[1]
        if jar is None:
            continue
        if not os.path.exists(jar):
            raise UserError(
                f"source '{source.name}': the JDBC driver jar {jar} does not exist; set "
                "jdbc.jar to the driver's jar (on Debian: apt-get install "
                "libpostgresql-jdbc-java gives /usr/share/java/postgresql.jar)"
            )
        if jar not in jars:
            jars.append(jar)
    return jars


def _known(url: str) -> tuple[str | None, str | None]:
    for prefix, known in KNOWN_DRIVERS.items():
        if url.startswith(prefix):
            return known
    return None, None


def plan_jdbc(spark: SparkSession, plan: SourcePlan) -> SourcePlan:
    """The plan with its read fixed: the checkpoint bounds (an incremental source asks the
    database for the column's largest value) and the range partitioning."""
    source = plan.source
    spec = source.jdbc
    assert spec is not None, "the loader requires jdbc: for format jdbc"
    relation = f"({spec.query}) runner_query" if spec.query else spec.table
    column = source.incremental.column if source.incremental else None
    condition = []
    until, nothing_new, details = plan.until, plan.nothing_new, dict(plan.details)
    if column:
        if plan.since is not None:
            condition.append(f"{column} > {_literal(plan.since)}")
        top = _scalar(
            spark,
            spec,
            plan,
            f"SELECT CAST(MAX({column}) AS VARCHAR(200)) FROM {relation}{_where(condition)}",
        )
        until = top if top is not None else plan.since
        nothing_new = top is None
        details["column"] = column
        condition.append(f"{column} <= {_literal(top)}" if top is not None else "1 = 0")
    select = f"(SELECT * FROM {relation}{_where(condition)}) runner_source"
    partitioning: dict[str, str] = {}
    if spec.partition_column:
        lower, upper = spec.lower_bound, spec.upper_bound
        if lower is None or upper is None:
            bounds = _row(
                spark,
                spec,
                plan,
                f"SELECT CAST(MIN({spec.partition_column}) AS VARCHAR(200)), "
                f"CAST(MAX({spec.partition_column}) AS VARCHAR(200)) FROM {select}",
            )
            lower = lower if lower is not None else bounds[0]
            upper = upper if upper is not None else bounds[1]
        if lower is not None and upper is not None:
            partitioning = {
                "partitionColumn": spec.partition_column,
                "lowerBound": str(lower),
                "upperBound": str(upper),
                "numPartitions": str(spec.num_partitions),
            }
    return replace(
        plan,
        until=until,
        nothing_new=nothing_new,
        details=details,
        jdbc=JdbcRead(select, partitioning),
    )


def read_jdbc(spark: SparkSession, plan: SourcePlan) -> DataFrame:
    """Read what plan_jdbc fixed."""
    assert plan.jdbc is not None and plan.source.jdbc is not None, "plan_jdbc comes first"
    options = _connection(plan.source.jdbc, plan) | {"dbtable": plan.jdbc.select}
    return _load(spark, options | dict(plan.jdbc.partitioning), plan)


def _where(conditions: list[str]) -> str:
    return f" WHERE {' AND '.join(conditions)}" if conditions else ""


def _literal(value: Any) -> str:
    """A checkpoint as an SQL string literal: the database casts it to the column's type."""
    return "'" + str(value).replace("'", "''") + "'"


def _connection(spec: JdbcSpec, plan: SourcePlan) -> dict[str, str]:
    driver = spec.driver or _known(spec.url)[0]
    options = {
        "url": spec.url,
        "user": spec.user,
        "password": spec.password,
        "driver": driver,
        "fetchsize": str(spec.fetch_size),
    }
    resolved: dict[str, str] = resolve(
        {k: v for k, v in options.items() if v is not None}, where=plan.where
    )
    extra: dict[str, str] = resolve(dict(plan.source.options), where=plan.where)
    return resolved | extra


def _load(spark: SparkSession, options: dict[str, str], plan: SourcePlan) -> DataFrame:
    try:
        return spark.read.format("jdbc").options(**options).load()
    except Exception as exc:  # the driver's own errors: wrong url, login, SQL
        first = str(exc).strip().splitlines()[0]
        url = plan.source.jdbc.url if plan.source.jdbc else "?"
        raise UserError(f"{plan.where} (jdbc {url}): {first}") from None


def _row(spark: SparkSession, spec: JdbcSpec, plan: SourcePlan, sql: str) -> tuple[Any, ...]:
    options = _connection(spec, plan) | {"query": sql}
    rows = _load(spark, options, plan).collect()
    return tuple(rows[0]) if rows else ()


def _scalar(spark: SparkSession, spec: JdbcSpec, plan: SourcePlan, sql: str) -> str | None:
    row = _row(spark, spec, plan, sql)
    return row[0] if row else None
