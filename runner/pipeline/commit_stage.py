"""The commit stage: one Delta version with the run's new files, the stored files they
replace, the new deletion vectors, the run's figures and its source checkpoints.

The table is created by the first run that commits, and the columns a batch adds are
added first. How a commit resolves a conflict with another writer is the transaction's
rule (runner/delta/); a run adds its own: another run of the same pipeline must not have
moved the source checkpoints it read from.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import structlog
from pyspark.sql import Row

from runner.actions.table_change import TableChange, ToCommit
from runner.delta.log_entry import NewFile
from runner.delta.schema import SchemaPlan
from runner.delta.schema_evolution import delta_type
from runner.delta.snapshot import DataFile, Group, TableSnapshot, open_table
from runner.delta.table_config import table_settings
from runner.delta.table_setup import (
    TableFeaturesWanted,
    create_table,
    enable_change_feed,
    evolve_schema,
)
from runner.delta.transaction import (
    BucketClash,
    Commit,
    Resolver,
    batch_committed,
    changed_buckets,
    commit,
)
from runner.errors import CommitConflictError
from runner.pipeline.context import RunContext
from runner.pipeline.figures import (
    BatchFigures,
    change_feed_needed,
    change_files,
    changed,
    commit_metadata,
    new_files,
)
from runner.pipeline.inputs import Inputs
from runner.sources.checkpoint import FIELD as CHECKPOINT_FIELD
from runner.sources.checkpoint import StartingPoints, last_checkpoints
from runner.spec.model import PipelineSpec
from runner.write.bucket_write import new_deletion_vectors, replaced_files

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Written:
    """What the write stage produced: one result row per touched bucket, and the stored
    files each bucket was merged with (what its new files replace)."""

    results: tuple[Row, ...]
    stored: Mapping[Group, Sequence[DataFile]]


@dataclass(frozen=True)
class Committed:
    version: int | None  # None: nothing changed, nothing committed
    columns_added: tuple[str, ...] = ()  # the schema changes made: SchemaChange.describe()


def identity(ctx: RunContext, operation: str | None = None) -> dict[str, Any]:
    """Who committed: the commit metadata's first fields."""
    return {
        "pipeline": ctx.spec.name,
        "run_id": ctx.run_id,
        "instant": ctx.instant,
        "operation": operation or ctx.target.operation,
        "batch_id": ctx.options.batch_id,
    }


@dataclass(frozen=True)
class Prepared:
    """A commit ready for the transaction, on the snapshot it was built for."""

    snapshot: TableSnapshot
    changes: Commit
    columns_added: tuple[str, ...]


def prepare_commit(
    ctx: RunContext,
    snapshot: TableSnapshot | None,
    schema: SchemaPlan,
    inputs: Inputs,
    written: Written,
    figures: BatchFigures,
) -> Prepared | None:
    """The version a run commits: its new files, the stored files they replace, the new
    deletion vectors, its figures and checkpoints; None when no row changed and no
    checkpoint moved. The table is created (or its new columns added) first."""
    checkpoints, moved = inputs.checkpoints()
    results, stored = written.results, written.stored
    if not changed(results) and not moved:
        if ctx.app_id is not None and snapshot is not None:
            return _batch_only(ctx, snapshot, figures)
        log.info("nothing_to_commit")
        return None
    snapshot, columns_added = _table_to_commit_to(ctx, snapshot, schema)
    metadata = commit_metadata(identity(ctx), figures)
    if schema.changes:
        metadata["schema_changes"] = [c.to_dict() for c in schema.changes]
    if checkpoints is not None:
        # in the same commit as the data: a crash can neither skip nor re-read input
        metadata[CHECKPOINT_FIELD] = checkpoints
        metadata["checkpoint_origin"] = inputs.points.origin
    changes = Commit(
        writer="run",
        operation="WRITE",
        metadata=metadata,
        added=tuple(new_files(results)),
        change_files=tuple(recorded_changes(results, stored)),
        removed=tuple(replaced_files(results, stored)),
        deletion_vectors=tuple(new_deletion_vectors(results, stored)),
        buckets=frozenset((r.partition_path, r.bucket) for r in changed(results)),
        schema=schema.file_schema,
        app_id=ctx.app_id,
    )
    return Prepared(snapshot, changes, columns_added)


def _batch_only(ctx: RunContext, snapshot: TableSnapshot, figures: BatchFigures) -> Prepared:
    """A batch with an id that changed no row is still recorded: a version with its app
    transaction and figures but no file, so that running the batch again does nothing."""
    log.info("batch_recorded_unchanged", batch_id=ctx.options.batch_id)
    changes = Commit(
        writer="run",
        operation="WRITE",
        metadata=commit_metadata(identity(ctx), figures),
        app_id=ctx.app_id,
        data_change=False,
    )
    return Prepared(snapshot, changes, ())


def recorded_changes(
    results: Sequence[Row], stored: Mapping[Group, Sequence[DataFile]]
) -> list[NewFile]:
    """The change data files the commit references. A write whose touched buckets were all
    new wrote none; if a re-merge then found another writer's files in some of them, the
    commit would have to record the other buckets' inserts too: it stops instead."""
    files = change_files(results, stored)
    if files and any(r.path and not r.cdc_path for r in changed(results)):
        raise CommitConflictError(
            "another writer created files in buckets this run created too, on a table with a "
            "change data feed; nothing of this run was committed: run it again"
        )
    return files


def unused_change_files(
    results: Sequence[Row], stored: Mapping[Group, Sequence[DataFile]]
) -> list[str]:
    """Change data files written but not committed: the commit only added new rows."""
    if change_feed_needed(results, stored):
        return []
    return [r.cdc_path for r in results if r.cdc_path]


def commit_run(
    ctx: RunContext,
    change: TableChange,
    inputs: Inputs,
    prepare: Callable[[], Prepared | None],
    resolver: Resolver | None = None,
) -> tuple[int | None, Prepared | None]:
    """One Delta version through the table change, under the run's conflict rule; with a
    `resolver`, a clash on the same buckets is answered by it (the run's re-merge). The
    version (None: nothing to commit) and what was prepared."""
    prepared: Prepared | None = None

    def to_commit() -> ToCommit:
        nonlocal prepared
        prepared = prepare()
        return (prepared.snapshot, prepared.changes) if prepared is not None else None

    rule = RunRule(checkpoint_guard(ctx.spec, inputs.points))
    version = change.commit(to_commit, rule, resolver)
    return version, prepared


def log_commit(version: int | None, figures: BatchFigures) -> None:
    """The commit's log event, with the figures of what was committed (after a re-merge,
    the last round's)."""
    if version is not None:
        log.info(
            "commit_done",
            version=version,
            files_added=figures.write.files_added,
            files_removed=figures.write.files_removed,
        )


def _table_to_commit_to(
    ctx: RunContext, snapshot: TableSnapshot | None, schema: SchemaPlan
) -> tuple[TableSnapshot, tuple[str, ...]]:
    """The table, created by the run's first commit; with the batch's schema changes made
    (new columns and fields, widened types) and listed (a re-merge after another writer's
    commit finds them made already)."""
    target = ctx.target
    if snapshot is None:
        features = TableFeaturesWanted(
            deletion_vectors=target.table_type == "MERGE_ON_READ",
            change_feed=target.change_data_feed,
        )
        create_table(ctx.table, ctx.spec.name, schema.file_schema, table_settings(target), features)
        created = open_table(ctx.table)
        assert created is not None
        return created, ()
    if target.change_data_feed and not snapshot.has_change_feed:
        snapshot = enable_change_feed(snapshot)
    if not schema.changes or _has_schema(snapshot, schema):
        return snapshot, ()
    return evolve_schema(snapshot, schema), tuple(c.describe() for c in schema.changes)


def _has_schema(snapshot: TableSnapshot, schema: SchemaPlan) -> bool:
    """The table has the run's schema already (a re-merge after the run changed it)."""
    return not _columns_not_in(schema.file_schema, snapshot.arrow_schema())


def _columns_not_in(columns: pa.Schema, other: pa.Schema) -> list[str]:
    """The columns `other` lacks or holds in another Delta type."""
    return [
        f.name
        for f in columns
        if f.name not in other.names or delta_type(other.field(f.name).type) != delta_type(f.type)
    ]


def create_empty_table(ctx: RunContext, schema: SchemaPlan) -> TableSnapshot:
    """The table as a first run's commit creates it (version 0: its schema and settings),
    with no rows: for a first run that has only its starting points to record."""
    created, _ = _table_to_commit_to(ctx, None, schema)
    log.info("table_created", version=created.version)
    return created


def commit_checkpoints_only(ctx: RunContext, snapshot: TableSnapshot, inputs: Inputs) -> int:
    """A start with nothing to read yet is still recorded, so the next run keeps it: one
    the user chose, or one taken from what a source holds now (Kafka's `latest`)."""
    checkpoints, _ = inputs.checkpoints()
    points = inputs.points
    metadata = {
        **identity(ctx, "checkpoint"),
        CHECKPOINT_FIELD: checkpoints,
        "checkpoint_origin": points.origin,
    }
    del metadata["batch_id"]  # a checkpoint-only commit belongs to no batch
    changes = Commit(writer="run", operation="WRITE", metadata=metadata)
    version = commit(snapshot, changes, RunRule(checkpoint_guard(ctx.spec, points)))
    assert version is not None, "only a resolver leaves nothing to commit"
    log.info("checkpoints_recorded", version=version, origin=points.origin)
    return version


def checkpoint_guard(
    spec: PipelineSpec, points: StartingPoints
) -> Callable[[TableSnapshot], str | None] | None:
    """Refuses to commit on top of another run of this pipeline that moved its checkpoints
    after this run read them: both would have read the same input."""
    if not any(s.incremental for s in spec.sources):
        return None

    def check(latest: TableSnapshot) -> str | None:
        _, version = last_checkpoints(latest, spec.name)
        if version == points.commit_version:
            return None
        return (
            f"another run of pipeline {spec.name} committed version {version} with new source "
            "checkpoints while this run read the same sources; committing too would ingest "
            "that input twice, so nothing of this run was committed: run it again"
        )

    return check


def refuse_new_columns(latest: TableSnapshot, schema: SchemaPlan) -> None:
    """A re-merge rewrites the other writer's rows with this run's columns: if it added
    columns or changed types meanwhile, their values would be lost or not fit, so the run
    stops instead."""
    added = _columns_not_in(latest.arrow_schema(), schema.file_schema)
    if added:
        raise CommitConflictError(
            f"another writer committed version {latest.version} with new or changed "
            f"column(s) {', '.join(added)} in buckets this run rewrites; nothing of this run "
            "was committed: run it again (its input must then have those columns)"
        )


# Versions a run's commit may be overtaken by before it gives up (no conflict among them).
COMMIT_ATTEMPTS = 5


@dataclass(frozen=True)
class RunRule:
    """A run's commit goes on unless the settings changed (its files follow the old layout),
    `still_valid` objects (its checkpoints went stale), its batch was committed, or buckets
    it writes changed (a stored file given a deletion vector counts as read: no delete is
    lost); after `max_attempts` overtaken attempts it gives up."""

    still_valid: Callable[[TableSnapshot], str | None] | None = None
    max_attempts: int = COMMIT_ATTEMPTS

    def conflict(
        self, changes: Commit, read: TableSnapshot, latest: TableSnapshot, attempt: int
    ) -> CommitConflictError | None:
        if latest.configuration != read.configuration:
            return CommitConflictError(
                f"the settings of {read.uri} changed while this run wrote (version "
                f"{latest.version}, for example a bucket expansion); its files follow the "
                "old layout, so nothing of this run was committed: run the pipeline again"
            )
        changed = _columns_changed(read, latest)
        if changed:
            return CommitConflictError(
                f"another writer renamed, dropped or retyped column(s) {', '.join(changed)} "
                f"of {read.uri} while this run wrote (version {latest.version}); its files "
                "have the old columns, so nothing of this run was committed: run the "
                "pipeline again"
            )
        problem = self.still_valid(latest) if self.still_valid else None
        if problem:
            return CommitConflictError(problem)
        if changes.app_id and batch_committed(latest.table, changes.app_id):
            return CommitConflictError(
                f"batch {changes.app_id} was committed by another run meanwhile (version "
                f"{latest.version}); nothing of this run was committed"
            )
        clashes = changed_buckets(changes, latest)
        if clashes:
            return BucketClash(clashes, latest)
        if attempt >= self.max_attempts:
            return CommitConflictError(
                f"{read.uri} kept changing: {self.max_attempts} commit attempts were overtaken "
                "by other writers; nothing was committed: run the pipeline again"
            )
        return None


def _columns_changed(read: TableSnapshot, latest: TableSnapshot) -> list[str]:
    """The columns of `read`'s schema that `latest` lacks or types otherwise (a column
    another writer added is no change: older files read it as null)."""
    if latest.version == read.version:
        return []
    now = {f["name"]: f["type"] for f in json.loads(latest.table.schema().to_json())["fields"]}
    before = json.loads(read.table.schema().to_json())["fields"]
    # inside a struct, list or map, changes are added fields or widenings (Delta's type
    # widening), which read older files as they are
    return [
        f["name"]
        for f in before
        if f["name"] not in now
        or (isinstance(f["type"], str) and now[f["name"]] != f["type"])
        or (isinstance(f["type"], dict) and not isinstance(now[f["name"]], dict))
    ]
