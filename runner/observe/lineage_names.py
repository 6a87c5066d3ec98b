"""The names in a run's OpenLineage events: the job's, its parent's (the Airflow task that
started it) and its datasets'.

Datasets are each source and the target, as a namespace (the datasource) and a name (the
dataset in it), after OpenLineage's naming spec
(https://openlineage.io/docs/spec/naming): `file` and an absolute path for a local file or
table, `s3://bucket` and the key for an object store, `kafka://host:port` and the topic,
`postgres://host:port` and `database.table` for a JDBC table.

Only where the data is goes into a name: never a source's options, a user or a password. A
JDBC URL loses its user info and its parameters (the namespace is scheme, host and port); a
URI's `user:password@` is dropped. Values stay as the spec writes them: a `${env:NAME}` in a
host stays a reference.

The parent comes from the environment, as Airflow's OpenLineage provider hands it to what a
task starts: OPENLINEAGE_PARENT_ID and OPENLINEAGE_ROOT_PARENT_ID (`namespace/name/runId`,
what its `lineage_parent_id` and `lineage_root_parent_id` macros render, as dbt-ol reads
them), else the Spark properties it injects into a Spark job (spark.openlineage.parentRunId,
parentJobNamespace, parentJobName and their rootParent* fellows).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

import structlog

from runner.spec.model import JdbcSpec, KafkaSpec, Source

log = structlog.get_logger(__name__)

Dataset = tuple[str, str]  # (namespace, name)
PARENT_VARIABLE = "OPENLINEAGE_PARENT_ID"
ROOT_VARIABLE = "OPENLINEAGE_ROOT_PARENT_ID"
SPARK_PARENT = tuple(f"spark.openlineage.parent{k}" for k in ("JobNamespace", "JobName", "RunId"))
SPARK_ROOT = tuple(f"spark.openlineage.rootParent{k}" for k in ("JobNamespace", "JobName", "RunId"))

# An object store names a dataset by its object key (no leading slash); HDFS and local file
# systems by the absolute path (the naming spec; openlineage-python's naming helpers).
_ROOTED_SCHEMES = ("hdfs",)
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}
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


def source_datasets(source: Source) -> list[Dataset]:
    """The datasets a source reads: one per Kafka topic, one per table a JDBC query reads
    (or the source's name when the query cannot be read), else the path."""
    if source.kafka is not None:
        return kafka_datasets(source.kafka)
    if source.jdbc is not None:
        return jdbc_datasets(source.jdbc, source.name)
    return [path_dataset(source.path)]


def path_dataset(path: str) -> Dataset:
    """A file, directory, glob or table path: `file` and the path when local, else the URI's
    scheme and authority, and the path under it."""
    if "://" not in path:
        return "file", path
    parsed = urlparse(path)
    scheme = parsed.scheme.lower()
    if scheme == "file":
        return "file", unquote(parsed.path)
    scheme = _SCHEME_ALIASES.get(scheme, scheme)
    name = parsed.path if scheme in _ROOTED_SCHEMES else parsed.path.lstrip("/")
    return f"{scheme}://{_without_credentials(parsed.netloc)}", name or "/"


def kafka_datasets(kafka: KafkaSpec) -> list[Dataset]:
    """`kafka://` and the first bootstrap server; one dataset per topic, or the pattern."""
    first = kafka.bootstrap_servers.split(",")[0].strip()
    server = _without_credentials(first.split("://", 1)[-1])  # a listener's PROTOCOL:// prefix
    topics = kafka.topics or ((kafka.topic_pattern,) if kafka.topic_pattern else ())
    return [(f"kafka://{server}", topic) for topic in topics]


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


def _without_credentials(authority: str) -> str:
    """An authority without `user:password@` (an Azure `container@account` stays)."""
    userinfo, at, host = authority.rpartition("@")
    return host if at and ":" in userinfo else authority


@dataclass(frozen=True)
class Parent:
    """A parent (or root) job's run: the Airflow task (or DAG) run that started this one."""

    namespace: str
    name: str
    run_id: str  # a UUID


@dataclass(frozen=True)
class LineageJob:
    """What every event of one job carries besides the run: the job and its parents."""

    namespace: str
    name: str
    kind: str  # run, expansion, compaction, clean, restore
    description: str | None = None
    parent: Parent | None = None
    root: Parent | None = None


def parents(
    environ: Mapping[str, str], spark_conf: Mapping[str, str]
) -> tuple[Parent | None, Parent | None]:
    """The parent and root runs: from OPENLINEAGE_PARENT_ID / OPENLINEAGE_ROOT_PARENT_ID,
    else from the spark.openlineage.* properties; (None, None) without a parent."""
    if environ.get(PARENT_VARIABLE):
        parent = _from_id(PARENT_VARIABLE, environ[PARENT_VARIABLE])
        root = (
            _from_id(ROOT_VARIABLE, environ[ROOT_VARIABLE]) if environ.get(ROOT_VARIABLE) else None
        )
    else:
        parent = _from_conf(spark_conf, SPARK_PARENT)
        root = _from_conf(spark_conf, SPARK_ROOT)
    return (parent, root) if parent is not None else (None, None)


def _from_id(variable: str, value: str) -> Parent | None:
    """`namespace/name/runId` (a namespace may hold slashes, the run id is the last part)."""
    parts = value.strip().rsplit("/", 2)
    if len(parts) == 3 and all(parts) and _is_uuid(parts[2]):
        return Parent(*parts)
    log.warning(
        "lineage_parent_ignored",
        variable=variable,
        reason="expected namespace/name/runId with a UUID run id",
    )
    return None


def _from_conf(conf: Mapping[str, str], keys: tuple[str, ...]) -> Parent | None:
    namespace, name, run_id = (conf.get(key, "") for key in keys)
    if namespace and name and _is_uuid(run_id):
        return Parent(namespace, name, run_id)
    return None


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
