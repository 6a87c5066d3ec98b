"""The names in a run's OpenLineage events: the job's, its parent's (the Airflow task that
started it) and its datasets'.

Datasets are each source and the target, as a namespace (the datasource) and a name (the
dataset in it), after OpenLineage's naming spec
(https://openlineage.io/docs/spec/naming): `file` and an absolute path for a local file or
table, `s3://bucket` and the key for an object store (runner/sources/dataset_names.py),
`kafka://host:port` and the topic, `postgres://host:port` and `database.table` for a JDBC
table (each source kind names its own: runner/sources/kinds/).

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

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from runner.sources.dataset_names import Dataset as Dataset  # the events' dataset type
from runner.sources.kinds import kind_of
from runner.spec.model import Source

log = structlog.get_logger(__name__)

PARENT_VARIABLE = "OPENLINEAGE_PARENT_ID"
ROOT_VARIABLE = "OPENLINEAGE_ROOT_PARENT_ID"
SPARK_PARENT = tuple(f"spark.openlineage.parent{k}" for k in ("JobNamespace", "JobName", "RunId"))
SPARK_ROOT = tuple(f"spark.openlineage.rootParent{k}" for k in ("JobNamespace", "JobName", "RunId"))


def source_datasets(source: Source) -> list[Dataset]:
    """The datasets a source reads, as its kind names them (runner/sources/kinds/): one per
    Kafka topic, one per table a JDBC query reads (or the source's name when the query
    cannot be read), else the path."""
    return kind_of(source).datasets(source)


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
