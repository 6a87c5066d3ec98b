"""The jdbc kind: a database table or query through Spark's JDBC reader
(runner/sources/jdbc.py). What it reads is fixed once Spark runs: the database is asked
for the incremental column's largest value past the checkpoint, and the batch, read twice,
is cached (the table changes between the reads). Its driver jar goes on Spark's class path.

Its lineage datasets are the JDBC URL's scheme, host and port, and `database.table` for
the table or each table its query reads; user info and URL parameters are left out.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from runner.sources.dataset_names import Dataset
from runner.sources.jdbc import driver_jars, plan_jdbc, read_jdbc
from runner.sources.kinds.base import SourceKind, where
from runner.sources.model import InputSchema, SourcePlan
from runner.spec.model import JdbcSpec, Source

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# A JDBC subprotocol whose OpenLineage scheme is another word.
_JDBC_SCHEMES = {"postgresql": "postgres"}
# sqlglot's dialect for the tables a JDBC query reads, by JDBC subprotocol.
_SQL_DIALECTS = {
    "postgresql": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
    "sqlserver": "tsql",
    "oracle": "oracle",
    "redshift": "redshift",
    "snowflake": "snowflake",
}
# SQL Server's way of naming the database: a `;databaseName=` property of the URL.
_DATABASE_PROPERTY = re.compile(r"(?i)[;:](?:databaseName|database)=([^;]+)")


def jdbc_datasets(jdbc: JdbcSpec, source_name: str) -> list[Dataset]:
    """The JDBC URL's scheme, host and port; `database.table` for the table, or for each
    table the query reads."""
    subprotocol, authority, database = _jdbc_parts(jdbc.url)
    scheme = _JDBC_SCHEMES.get(subprotocol, subprotocol)
    namespace = f"{scheme}://{authority}"
    if jdbc.table:
        tables = [jdbc.table]
    else:
        tables = query_tables(jdbc.query or "", _SQL_DIALECTS.get(subprotocol)) or [source_name]
    return [(namespace, f"{database}.{table}" if database else table) for table in tables]


def query_tables(query: str, dialect: str | None) -> list[str]:
    """The tables a query reads, as it names them (catalog.schema.table), CTEs left out, in
    alphabetical order; empty when sqlglot cannot read the query."""
    import sqlglot
    from sqlglot import exp

    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # its warnings are not the user's
    try:
        tree = sqlglot.parse_one(query, read=dialect)
    except Exception:  # an unreadable query still has its source's name
        return []
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    tables: list[str] = []
    for table in tree.find_all(exp.Table):
        if not table.name or (table.name in ctes and not table.db):
            continue
        name = ".".join(part for part in (table.catalog, table.db, table.name) if part)
        if name not in tables:
            tables.append(name)
    return sorted(tables)


def _jdbc_parts(url: str) -> tuple[str, str, str]:
    """(subprotocol, host:port, database) of a JDBC URL; user info and parameters left out.

    jdbc:postgresql://host:5432/db?..., jdbc:mysql://user:pw@host/db,
    jdbc:sqlserver://host:1433;databaseName=db;..., jdbc:oracle:thin:@//host:1521/service,
    jdbc:oracle:thin:@host:1521:SID.
    """
    rest = url[len("jdbc:") :] if url.lower().startswith("jdbc:") else url
    subprotocol, _, rest = rest.partition(":")
    if "//" in rest:
        rest = rest.split("//", 1)[1]
    head = re.split(r"[?;]", rest, maxsplit=1)[0]
    if "@" in head:  # user info, up to the last @: a password may hold a / or an @
        rest = rest[head.rindex("@") + 1 :]
    authority = re.split(r"[/;?]", rest, maxsplit=1)[0]
    after = rest[len(authority) :]
    database = ""
    if after.startswith("/"):
        database = re.split(r"[;?&]", after[1:], maxsplit=1)[0]
    elif authority.count(":") == 2 and "[" not in authority:  # Oracle's host:port:SID
        authority, _, database = authority.rpartition(":")
    found = _DATABASE_PROPERTY.search(after)
    if found and not database:
        database = found[1]
    return subprotocol.lower(), authority, database


class Jdbc(SourceKind):
    format = "jdbc"
    spec_section = "jdbc"
    pins_batch = "a JDBC source"

    def plan(self, source: Source, since: Any, skip: frozenset[str]) -> SourcePlan:
        return SourcePlan(source, since=since)

    def plan_live(self, spark: SparkSession, plan: SourcePlan) -> SourcePlan:
        return plan_jdbc(spark, plan)

    def read(self, spark: SparkSession, plan: SourcePlan) -> DataFrame:
        return read_jdbc(spark, plan)

    def first_read(self, source: Source) -> str:
        return "every row"

    def datasets(self, source: Source) -> list[Dataset]:
        assert source.jdbc is not None, "the loader requires jdbc: for format jdbc"
        return jdbc_datasets(source.jdbc, source.name)

    def jars(self, source: Source, under_spark_submit: bool) -> list[str]:
        return driver_jars((source,))

    def input_schema(self, source: Source) -> InputSchema:
        return InputSchema(None, f"{where(source)} is jdbc, whose columns Spark decodes")


KIND = Jdbc()
