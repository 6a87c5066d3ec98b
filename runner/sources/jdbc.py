"""JDBC sources: a table or query, optionally only rows above the last checkpoint of a
column, optionally split over parallel range reads.

An incremental read first asks the database for the column's largest value above the
checkpoint (as text, so the value round-trips exactly) and then reads the rows in
(checkpoint, that value]. The batch is read twice (bucket counts, then the write) and the
upper bound keeps both reads equal while new rows arrive.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from runner.errors import UserError
from runner.sources.model import JdbcRead, SourcePlan
from runner.spec.model import JdbcSpec, Source
from runner.spec.secrets import resolve, scrub
from runner.spec.urls import url_endpoint

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Drivers a url prefix implies, and where Debian puts their jars.
KNOWN_DRIVERS = {
    "jdbc:postgresql:": ("org.postgresql.Driver", "/usr/share/java/postgresql.jar"),
}
_CHAIN_DEPTH = 20  # causes followed, at most


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
    """The driver's options: `${env:NAME}` references resolved, and a `user:password@` in
    the URL handed to the driver as its user and password (jdbc.user and jdbc.password win)."""
    database = url_endpoint(spec.url, plan.where)
    options = {
        "user": spec.user,
        "password": spec.password,
        "driver": spec.driver or _known(spec.url)[0],
        "fetchsize": str(spec.fetch_size),
    }
    resolved: dict[str, str] = resolve(
        {k: v for k, v in options.items() if v is not None}, where=plan.where
    )
    from_url = {"user": database.user, "password": database.password}
    resolved = {k: v for k, v in from_url.items() if v is not None} | resolved
    extra: dict[str, str] = resolve(dict(plan.source.options), where=plan.where)
    return {"url": database.url} | resolved | extra


def _load(spark: SparkSession, options: dict[str, str], plan: SourcePlan) -> DataFrame:
    with _database_errors(plan):
        return spark.read.format("jdbc").options(**options).load()


def _row(spark: SparkSession, spec: JdbcSpec, plan: SourcePlan, sql: str) -> tuple[Any, ...]:
    options = _connection(spec, plan) | {"query": sql}
    frame = _load(spark, options, plan)
    with _database_errors(plan):
        rows = frame.collect()
    return tuple(rows[0]) if rows else ()


def _scalar(spark: SparkSession, spec: JdbcSpec, plan: SourcePlan, sql: str) -> str | None:
    row = _row(spark, spec, plan, sql)
    return row[0] if row else None


@contextmanager
def _database_errors(plan: SourcePlan) -> Iterator[None]:
    """A failure of the database or its driver (refused connection, unknown host, login,
    SQL) as one line: the source, its URL as written (its password hidden), and what the
    database said."""
    try:
        yield
    except Exception as exc:
        url = scrub(plan.source.jdbc.url) if plan.source.jdbc else "?"
        raise UserError(f"{plan.where} (jdbc {url}): {database_says(exc)}") from None


def database_says(exc: BaseException) -> str:
    """What the database or its driver said, from the Java exception behind a Py4J error:
    the first java.sql.SQLException of the cause chain (PSQLException, ...), with the
    chain's last cause when it is another (UnknownHostException: the host), on one line;
    without a SQLException, the last cause; without a Java exception, the error's first
    line."""
    chain = _java_chain(exc)
    if not chain:
        lines = str(exc).strip().splitlines()
        return lines[0] if lines else type(exc).__name__
    sql = next((i for i, (_, is_sql, _) in enumerate(chain) if is_sql), None)
    last = chain[-1]
    if sql is None:
        return f"{last[0]}: {last[2]}"
    said = f"{chain[sql][0]}: {chain[sql][2]}"
    return said if sql == len(chain) - 1 else f"{said} (cause: {last[0]}: {last[2]})"


def _java_chain(exc: BaseException) -> list[tuple[str, bool, str]]:
    """(simple class name, is a java.sql.SQLException, message on one line) of each Java
    exception in the cause chain of a Py4J error; empty for any other error."""
    # a Py4J error holds it as java_exception; pyspark's converted errors (a SparkException
    # with an error class, as Spark 4.2 raises [FAILED_JDBC.CONNECTION]) as _origin
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    chain: list[tuple[str, bool, str]] = []
    while java is not None and len(chain) < _CHAIN_DEPTH:
        kinds, kind = [], java.getClass()
        while kind is not None:
            kinds.append(str(kind.getName()))
            kind = kind.getSuperclass()
        message = " ".join(str(java.getMessage() or "").split())
        chain.append(
            (str(java.getClass().getSimpleName()), "java.sql.SQLException" in kinds, message)
        )
        java = java.getCause()
    return chain


_PRIMARY_KEY = """SELECT kcu.column_name FROM information_schema.table_constraints tc
JOIN information_schema.key_column_usage kcu ON tc.constraint_name = kcu.constraint_name
  AND tc.table_schema = kcu.table_schema AND tc.table_name = kcu.table_name
WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_name = {table}
  AND ({schema} = '' OR tc.table_schema = {schema})
ORDER BY kcu.ordinal_position"""


def described_table(spark: SparkSession, source: Source) -> tuple[Any, tuple[str, ...]]:
    """A jdbc source's table: its columns as Spark reads them (a StructType), and its primary
    key's columns in order, as the database's information_schema tells (none without one)."""
    spec = source.jdbc
    assert spec is not None and spec.table is not None
    plan = SourcePlan(source)
    options = _connection(spec, plan)
    frame = _load(spark, options | {"dbtable": spec.table}, plan)
    schema, _, table = spec.table.rpartition(".")
    sql = _PRIMARY_KEY.format(
        table=_literal(table.strip('"`')), schema=_literal(schema.strip('"`'))
    )
    with _database_errors(plan):
        keys = _load(spark, options | {"query": sql}, plan).collect()
    return frame.schema, tuple(str(r[0]) for r in keys)
