"""`runner restore`: one new version whose rows are the table's as of an older version, as
Delta's RESTORE, Hudi's savepoint restore and Paimon's rollback give their users when a bad
batch got in.

The plan (runner/actions/restore_plan.py, from the Delta log) names the files to remove
and to add back, the settings and schema as of then, every pipeline's checkpoints then and
the batches to mark undone. The execution writes nothing but, on a table with Delta's
change data feed, its change data files (`_change_data/`): the undo as rows, so that a
reader of the feed (`runner read --since`, delta-spark's readChangeFeed, a chained
pipeline's `delta` source) sees the rows that go as deleted, the rows that come back as
inserted, and a key whose row goes back to an older one as updated (pre- and post-image).
A version with change data files is read from them alone; without them its removes and
adds would read as whole files deleted and inserted, and rows brought back by dropping a
deletion vector would be missed.

Then one commit, through runner/delta/transaction.py under `RewriteRule`: if any other
writer committed since the plan read the table, nothing is committed and the restore says
to run again (and a writer that read the table before the restore fails its own commit: the
settings, the columns or its checkpoints changed). Its heartbeat (`_runner/in_flight/`)
keeps `runner clean` off its change data files; a failure before the commit removes them,
the table is as it was. No Spark: the restore reads the log, and the data files only for
the change data feed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import structlog

from runner import faults
from runner.actions.restore_plan import RestorePlan, plan_restore
from runner.actions.table_change import RewriteRule, TableChange
from runner.delta.arrow_read import kept_batches
from runner.delta.deletion_vectors import keep_mask
from runner.delta.log_entry import NewFile, check_log_writable
from runner.delta.restores import OPERATION, RESTORED_VERSION
from runner.delta.snapshot import DataFile, Group, open_table
from runner.delta.transaction import Commit
from runner.errors import UserError
from runner.index.naming import data_file_path, new_file_id
from runner.sources.checkpoint import RESTORED
from runner.spec.model import PipelineSpec
from runner.storage.meta_columns import CHANGE_DATA_DIR
from runner.storage.parquet_file import BucketFile
from runner.summary import ActionFigures, human_size
from runner.write.change_rows import change_rows, change_schema, unchanged_keys, without_keys

log = structlog.get_logger(__name__)

_WRITE_TOKEN = "0-0-0"  # the driver writes the change data files, one per bucket


@dataclass
class RestoreSummary:
    table: str
    dry_run: bool
    version_read: int
    to: int
    files_removed: int = 0
    files_added: int = 0
    rows_removed: int = 0
    rows_added: int = 0
    settings: dict[str, list[str | None]] = field(default_factory=dict)
    columns_dropped: list[str] = field(default_factory=list)
    columns_back: list[str] = field(default_factory=list)
    checkpoints: dict[str, Any] = field(default_factory=dict)  # those that change
    batches_undone: list[str] = field(default_factory=list)
    change_files: int = 0
    change_bytes: int = 0
    instant: str | None = None
    version: int | None = None  # committed
    seconds: float = 0.0

    @classmethod
    def of(cls, plan: RestorePlan, dry_run: bool) -> RestoreSummary:
        return cls(
            plan.snapshot.uri,
            dry_run,
            plan.version,
            plan.to,
            files_removed=len(plan.removed),
            files_added=len(plan.restored),
            rows_removed=plan.rows_removed,
            rows_added=plan.rows_added,
            settings=plan.settings,
            columns_dropped=list(plan.columns_dropped),
            columns_back=list(plan.columns_back),
            checkpoints=plan.checkpoints_changed,
            batches_undone=plan.undone_batches,
        )

    def record(self) -> ActionFigures:
        """Its record's figures: the files it took out and added back, its instant."""
        return ActionFigures(
            ActionFigures.committed_or_not(self.version),
            self.version,
            self.instant,
            files_added=self.files_added,
            files_removed=self.files_removed,
            bytes_written=self.change_bytes,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        if self.dry_run:
            head = (
                f"{self.table}: would restore version {self.to} (now version {self.version_read})"
            )
        elif self.version is None:
            head = f"{self.table}: nothing to restore: version {self.to} holds what it holds now"
            return head
        else:
            head = (
                f"{self.table}: restored version {self.to} as version {self.version} "
                f"(was version {self.version_read}) in {self.seconds:.1f}s"
            )
        lines = [
            head,
            f"  files        {self.files_removed} removed ({self.rows_removed:,} rows), "
            f"{self.files_added} added back ({self.rows_added:,} rows)",
        ]
        lines += [
            f"  setting      {k}: {now} -> {then}" for k, (now, then) in self.settings.items()
        ]
        if self.columns_dropped:
            lines.append(f"  columns      {', '.join(self.columns_dropped)} dropped (added since)")
        if self.columns_back:
            lines.append(f"  columns      {', '.join(self.columns_back)} back")
        for pipeline, points in self.checkpoints.items():
            where = (
                "starts from the beginning (no checkpoint then)"
                if points is None
                else f"checkpoints {points}"
            )
            lines.append(f"  pipeline     {pipeline}: {where}")
        if self.batches_undone:
            lines.append(
                f"  batches      {', '.join(self.batches_undone)} undone: each can run again "
                "with its --batch-id"
            )
        if self.change_files:
            lines.append(
                f"  change feed  {self.change_files} change data file(s), "
                f"{human_size(self.change_bytes)}"
            )
        return "\n".join(lines)


def restore_table(spec: PipelineSpec, to: str, dry_run: bool = False) -> RestoreSummary:
    """`runner restore`: plan from the Delta log; unless a dry run, commit the restore."""
    snapshot = open_table(spec.target.path)
    if snapshot is None:
        raise UserError(f"no table at {spec.target.path} yet: run the pipeline first")
    plan = plan_restore(snapshot, to)
    summary = RestoreSummary.of(plan, dry_run)
    log.info(
        "restore_planned",
        to=plan.to,
        version=plan.version,
        files_removed=summary.files_removed,
        files_added=summary.files_added,
    )
    if dry_run or not plan.changes_anything:
        return summary
    check_log_writable(snapshot.location, "runner restore")
    return run_restore(plan, summary)


def run_restore(plan: RestorePlan, summary: RestoreSummary) -> RestoreSummary:
    """Write the change data files (a table with a change feed), then commit the plan as
    the version after the one it read."""
    change = TableChange(plan.location, "restore")
    summary.instant = instant = change.instant
    with change.guarded():
        changes = _change_files(plan, instant) if plan.snapshot.has_change_feed else []
        summary.change_files = len(changes)
        summary.change_bytes = sum(f.size for f in changes)
        summary.version = change.commit(
            lambda: (plan.snapshot, _restoring(plan, instant, changes)), RewriteRule()
        )
    change.done("restore_committed", summary)
    return summary


def _restoring(plan: RestorePlan, instant: str, changes: list[NewFile]) -> Commit:
    return Commit(
        writer="restore",
        operation="RESTORE",
        metadata={
            "operation": OPERATION,
            "instant": instant,
            RESTORED_VERSION: plan.to,
            "read_version": plan.version,
            "files_removed": len(plan.removed),
            "files_added": len(plan.restored),
            "rows_removed": plan.rows_removed,
            "rows_added": plan.rows_added,
            RESTORED: plan.checkpoints,
            "batches_undone": plan.undone_batches,
        },
        removed=plan.removed,
        restored=plan.restored,
        change_files=tuple(changes),
        configuration=plan.configuration,
        schema_json=plan.schema_json,
        transactions=plan.batches,
    )


def _change_files(plan: RestorePlan, instant: str) -> list[NewFile]:
    """One change data file per bucket the restore changes: its rows that go and come back
    as the feed's events, in the schema as of the restored version."""
    fs, root = plan.location.filesystem()
    going: dict[Group, list[DataFile]] = defaultdict(list)
    coming: dict[Group, list[DataFile]] = defaultdict(list)
    for f in plan.removed:
        going[(f.partition_path, f.bucket)].append(f)
    for f in plan.restored:
        coming[(f.partition_path, f.bucket)].append(f)
    now = {f.path: f for f in plan.removed}
    then = {f.path: f for f in plan.restored}
    written = []
    for group in sorted({*going, *coming}):
        before = _rows(fs, root, plan.schema, going.get(group, []), then)
        after = _rows(fs, root, plan.schema, coming.get(group, []), now)
        written.append(_write_change_file((fs, root), group, instant, before, after, plan.schema))
    log.info("restore_change_files_written", files=len(written))
    return written


def _rows(
    fs: pafs.FileSystem,
    root: str,
    schema: pa.Schema,
    files: list[DataFile],
    other: dict[str, DataFile],
) -> pa.Table:
    """The live rows of `files`, but of a file that `other` holds too (with another deletion
    vector) only those the other's vector deletes."""
    parts: list[pa.Table] = []
    for f in files:
        parquet = pq.ParquetFile(f"{root}/{f.path}", filesystem=fs)
        rows = parquet.metadata.num_rows
        keep = keep_mask(fs, root, f.deletion_vector, rows)
        twin = other.get(f.path)
        if twin is not None:
            keep &= ~keep_mask(fs, root, twin.deletion_vector, rows)
        if np.any(keep):
            parts += kept_batches(parquet, keep, schema)
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _write_change_file(
    store: tuple[pafs.FileSystem, str],
    group: Group,
    instant: str,
    before: pa.Table,
    after: pa.Table,
    schema: pa.Schema,
) -> NewFile:
    """The bucket's change data file; written even without rows (a row that comes back as
    it went), since a version with change data files is read from them alone. `store`: the
    table's file system and root."""
    fs, root = store
    same = unchanged_keys(before, after)
    rows = change_rows(without_keys(before, same), without_keys(after, same), schema)
    pp, bucket = group
    relative = f"{CHANGE_DATA_DIR}/{data_file_path(pp, new_file_id(bucket), _WRITE_TOKEN, instant)}"
    out = BucketFile(fs, f"{root}/{relative}", change_schema(schema), key_filter=False)
    out.write(rows)
    out.metadata[b"runner.change_rows"] = str(rows.num_rows).encode()
    out.close()
    faults.maybe_fail("after_change_file")
    return NewFile(relative, out.size, "")
