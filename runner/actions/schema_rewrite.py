"""schema_evolution full: the table's files rewritten once in a new schema.

Delta renames and drops columns without rewriting files through column mapping, and widens
types through the typeWidening table feature; but Polars 2.1 refuses to read either table,
and delta-rs 1.6.6 reads a renamed column as nulls through `to_pyarrow_table()`
(docs/schema-evolution.md). `full` rewrites instead: every live row is read (deletion vectors
applied), its columns renamed, dropped or cast to their wider type, and written back into
its bucket and file groups; one version removes every old file and adds the new ones with
the new schema, changing no row (`dataChange: false`: incremental readers skip it). Every
reader reads the result as an ordinary table. The cost is one rewrite of the table per
change, reported in the run's summary.

A rewrite starts from the table as one version has it and commits only if no other writer
committed meanwhile (RewriteRule); a failure leaves the table as it was.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import structlog
from deltalake import Schema as DeltaSchema
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, from_arrow_type

from runner import faults
from runner.actions.table_change import RewriteRule, TableChange
from runner.delta.log_entry import NewFile
from runner.delta.schema_rewrite import SchemaRewrite
from runner.delta.snapshot import DataFile, TableSnapshot, open_table
from runner.delta.spark_read import let_spark_read, read_files
from runner.delta.table_setup import schema_features, with_features
from runner.delta.transaction import Commit
from runner.errors import RunnerError
from runner.index.naming import new_file_id
from runner.spec.model import Target
from runner.storage.key_filter import written_for
from runner.write.regroup_writer import (
    REGROUP_RESULT_SCHEMA,
    RegroupJob,
    regrouped,
    rows_per_group,
)
from runner.write.tombstones import refuse_tombstones

log = structlog.get_logger(__name__)


@dataclass
class RewriteSummary:
    changes: list[str]
    version: int | None = None
    files_read: int = 0
    files_written: int = 0
    bytes_written: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rewrite_table(
    spark: SparkSession, snapshot: TableSnapshot, target: Target, rewrite: SchemaRewrite
) -> tuple[TableSnapshot, RewriteSummary]:
    """Every live row of the table in the rewritten schema, committed as one version."""
    summary = RewriteSummary(rewrite.describe())
    files = snapshot.files()
    refuse_tombstones(
        snapshot,
        files,
        "a schema rewrite",
        "make the change once they have expired, or load a new table",
    )
    schema_json = _delta_schema(snapshot, rewrite)
    features = schema_features(snapshot, schema_json)
    change = TableChange(snapshot.location, "schema rewrite", spark, shown=snapshot.uri)
    instant = change.instant
    log.info(
        "schema_rewrite_started", table=snapshot.uri, changes=summary.changes, files=len(files)
    )
    let_spark_read(spark, snapshot.location)
    with change.guarded():
        added = _write(spark, snapshot, files, target, rewrite, instant)
        changes = Commit(
            writer="schema rewrite",
            operation="CHANGE COLUMN",
            metadata={
                "operation": "schema_rewrite",
                "instant": instant,
                "schema_changes": summary.changes,
                # a change feed reader maps older files' names (runner/delta/change_feed.py)
                "renamed": dict(rewrite.renames),
                "dropped": list(rewrite.drops),
                "files_read": len(files),
                "files_written": len(added),
            },
            added=tuple(added),
            removed=tuple(files),
            configuration=snapshot.configuration,
            schema_json=schema_json,
            protocol=with_features(snapshot, set(features)) if features else None,
            data_change=False,
        )
        summary.version = change.commit(lambda: (snapshot, changes), RewriteRule())
    summary.files_read, summary.files_written = len(files), len(added)
    summary.bytes_written = sum(f.size for f in added)
    change.done("schema_rewrite_committed", summary)
    latest = open_table(snapshot.location)
    assert latest is not None
    return latest, summary


def _write(
    spark: SparkSession,
    snapshot: TableSnapshot,
    files: list[DataFile],
    target: Target,
    rewrite: SchemaRewrite,
    instant: str,
) -> list[NewFile]:
    """The Spark job: the live rows of `files` in the new schema, into their own buckets,
    cut into file groups of about the target size as an overwrite expansion cuts them."""
    if not files:
        return []
    file_schema = rewrite.apply(snapshot.arrow_schema())
    columns = [
        F.col(f"`{f.name}`").cast(from_arrow_type(rewrite.widened[f.name]))
        if f.name in rewrite.widened
        else F.col(f"`{f.name}`")
        for f in snapshot.arrow_schema()
        if f.name not in rewrite.drops
    ]
    names = file_schema.names
    rows = read_files(spark, snapshot, files).select(
        *[c.alias(n) for c, n in zip(columns, names, strict=True)]
    )
    groups = {(f.partition_path, f.bucket) for f in files}
    frame = regrouped(spark, rows, len(groups))
    live = sum(f.live_records for f in files)
    per_group = rows_per_group(files, live, target.group_bytes)
    file_ids = {g: new_file_id(g[1]) for g in groups}
    job = RegroupJob(
        *(snapshot.location, instant, file_schema, file_ids, faults.requested(), per_group),
        key_filters=written_for(target.table_type),
    )
    results = frame.mapInArrow(job, from_arrow_schema(REGROUP_RESULT_SCHEMA)).collect()
    written = sum(r.num_records for r in results)
    if written != live:
        raise RunnerError(
            f"the schema rewrite wrote {written} rows for {live} read; nothing was committed"
        )
    return [NewFile(r.path, r.size, r.stats) for r in results]


def _delta_schema(snapshot: TableSnapshot, rewrite: SchemaRewrite) -> str:
    """The table's Delta schema after the rewrite: fields renamed (their metadata kept),
    dropped, or given their wider type."""
    schema = json.loads(snapshot.table.schema().to_json())
    fields = []
    for f in schema["fields"]:
        if f["name"] in rewrite.drops:
            continue
        if f["name"] in rewrite.widened:
            wider = pa.schema([pa.field(f["name"], rewrite.widened[f["name"]])])
            f["type"] = json.loads(DeltaSchema.from_arrow(wider).to_json())["fields"][0]["type"]
        f["name"] = rewrite.renames.get(f["name"], f["name"])
        fields.append(f)
    schema["fields"] = fields
    return json.dumps(schema)
