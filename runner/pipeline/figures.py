"""Where a run's figures come from: each counter the write gives the run summary (and so
its record in the history, its metrics and lineage events) and the commit's metadata is
computed here, from the result rows of the bucket writers (one row per touched
bucket, runner/write/writer.py RESULT_SCHEMA) and the stored files the write replaced.

Pure functions of the stages' results: the run summary is assembled from their outputs,
never filled in field by field as the run goes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pyspark.sql import Row

from runner.delta.log_entry import NewFile
from runner.delta.snapshot import DataFile, Group
from runner.spec.model import Target
from runner.summary import VerdictFigures, WriteFigures
from runner.write.bucket_write import replaced_files, written_files


def new_files(results: Sequence[Row]) -> list[NewFile]:
    return [f for r in results for f in written_files(r)]


def change_feed_needed(results: Sequence[Row], stored: Mapping[Group, Sequence[DataFile]]) -> bool:
    """Whether the commit records its changes in change data files (a table with Delta's
    change data feed): only when it replaces stored files or gives them deletion vectors.
    A commit that only adds files of new rows is read as inserts by every change feed
    reader (the Delta protocol), so its change files would only repeat them."""
    return bool(replaced_files(results, stored)) or any(r.deletion_vectors for r in results)


def change_files(
    results: Sequence[Row], stored: Mapping[Group, Sequence[DataFile]]
) -> list[NewFile]:
    """The change data files the commit references (see change_feed_needed)."""
    if not change_feed_needed(results, stored):
        return []
    return [NewFile(r.cdc_path, r.cdc_size, "") for r in results if r.cdc_path]


def changed(results: Sequence[Row]) -> list[Row]:
    """The result rows of buckets whose rows changed: the only ones the commit touches."""
    return [r for r in results if r.changed]


def write_figures(
    results: Sequence[Row], stored: Mapping[Group, Sequence[DataFile]], target: Target
) -> WriteFigures:
    """What the written buckets hold: rows by outcome, files, bytes, buckets and
    partitions, and a change feed's event counts."""
    changed_rows = changed(results)
    added = new_files(results)
    change_data = change_files(results, stored)
    figures = WriteFigures(
        inserted=sum(r.insert for r in results),
        updated=sum(r.update for r in results),
        unchanged=sum(r.unchanged for r in results),
        deleted=sum(r.deleted for r in results),
        duplicates_dropped=sum(r.duplicate for r in results),
        stale_skipped=sum(r.stale for r in results),
        deletes_missing=sum(r.delete_missing for r in results),
        files_added=len(added),
        files_removed=len(replaced_files(results, stored)),
        bytes_written=sum(f.size for f in [*added, *change_data]) + sum(r.dv_size for r in results),
        change_data_files=len(change_data),
        buckets_touched=len({(r.partition_path, r.bucket) for r in changed_rows}),
        partitions_touched=len({r.partition_path for r in changed_rows}),
        table_type=target.table_type,
        buckets_rewritten=len(
            {(r.partition_path, r.bucket) for r in changed_rows if r.rewritten} & set(stored)
        ),
        buckets_with_deletion_vectors=sum(1 for r in changed_rows if r.deletion_vectors),
        stored_files_searched=sum(r.stored_files for r in results),
        stored_files_ruled_out=sum(r.files_ruled_out for r in results),
    )
    if target.cdc is None:
        return figures
    return replace(
        figures,
        scd_type=target.scd.type,
        late_events=sum(r.late for r in results),
        superseded_events=sum(r.superseded for r in results),
        versions_closed=sum(r.closed for r in results),
    )


@dataclass(frozen=True)
class BatchFigures:
    """What a run's write path gives its summary and its commit: the batch's verdicts, the
    written buckets' figures (after a re-merge, its last round's), how the rows were
    written, and the schema rewrite done before the write (runner/pipeline/run.py)."""

    verdicts: VerdictFigures
    write: WriteFigures = field(default_factory=WriteFigures)
    schema_rewrites: tuple[dict[str, Any], ...] = ()  # runner/actions/schema_rewrite.py's
    rows_from: str | None = None  # bulk_insert: the source files, or Spark (and why)
    merged_on: str | None = None  # the driver, or Spark executors (and why)


# The figures a commit records in its commitInfo, beside the run's identity.
COMMITTED_FIGURES = (
    "rows_read",
    "rows_dropped",
    "rows_quarantined",
    "inserted",
    "updated",
    "unchanged",
    "deleted",
    "files_added",
    "files_removed",
    "bytes_written",
    "buckets_with_deletion_vectors",
)


def commit_metadata(identity: Mapping[str, Any], figures: BatchFigures) -> dict[str, Any]:
    """The commit's metadata: the run's identity (pipeline, run id, instant, operation,
    batch id), then its figures, in the order readers have always found them."""
    named = {**asdict(figures.verdicts), **asdict(figures.write)}
    return {**identity, **{name: named[name] for name in COMMITTED_FIGURES}}
