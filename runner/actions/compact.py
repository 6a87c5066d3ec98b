"""`runner compact`: fold each bucket's files and deletion vectors into sorted base files, one
per file group of the target size.

On a MERGE_ON_READ table a bucket gathers delta files and deletion vectors run after run;
readers pay for each. Compaction reads a bucket's live rows, sorts them by key and cuts them
into file groups of `index.file_group_bytes` (small neighbours merged, large groups cut);
one Delta version removes the old files and adds the new ones (`dataChange: false`: no row
changes, incremental readers skip it).

A writer may commit to a bucket while compaction reads it. The commit goes through
runner/delta/transaction.py under its CompactionRule: a bucket whose files or deletion
vectors changed meanwhile is dropped from this compaction (its new file deleted), so no
delete is lost and no deleted row comes back; the other buckets are committed on top of
the writer's version.

Plan (`plan_compaction`, from the Delta log, no Spark) and execute (`run_compaction`:
the Spark job, then the commit) are separate steps; `compact_table` is the command's call
and `compact_if_due` the run's after-commit step.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import structlog
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from runner import faults
from runner.actions.table_change import TableChange
from runner.delta.log_entry import NewFile, check_log_writable
from runner.delta.snapshot import DataFile, Group, TableSnapshot, open_table
from runner.delta.table_config import check_table_settings
from runner.delta.transaction import BucketClash, Commit, Resolver, changed_buckets
from runner.errors import CommitConflictError, UserError
from runner.index.naming import commits_among
from runner.jvm.session import spark_session
from runner.progress import Progress
from runner.spec.model import CompactionSpec, PipelineSpec
from runner.storage.key_filter import written_for
from runner.summary import ActionFigures, human_size
from runner.write.compact_writer import BUCKETS_SCHEMA, CompactJob
from runner.write.file_groups import FileGroup, file_groups
from runner.write.regroup_writer import REGROUP_RESULT_SCHEMA
from runner.write.uncommitted import remove_files

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class BucketState:
    """A bucket's live files, and whether compaction is worth it."""

    group: Group
    files: tuple[DataFile, ...]
    group_bytes: int | None = None  # its file groups' target size; None: one per bucket

    @cached_property
    def units(self) -> list[FileGroup]:
        """Its file groups (runner/write/file_groups.py), or the bucket as one."""
        groups = file_groups(self.files)
        return groups if self.group_bytes else [FileGroup("", self.files, None)]

    @property
    def deleted_rows(self) -> int:
        return sum(f.deleted_records for f in self.files)

    @property
    def stored_rows(self) -> int:
        return sum(f.num_records for f in self.files)

    def needs_compaction(self) -> bool:
        """A file group with delta files (or a bucket whose files overlap: one unit), deleted
        rows, a group of more than twice the target size (written under a larger one), or
        two neighbouring groups far below it (together at most half of it): a split's two
        halves, and groups a little past the target, are left alone."""
        units, target = self.units, self.group_bytes
        sizes_off = target is not None and (
            any(u.size > 2 * target for u in units)
            or any(a.size + b.size <= target // 2 for a, b in itertools.pairwise(units))
        )
        return any(len(u.files) > 1 for u in units) or self.deleted_rows > 0 or sizes_off

    def past(self, limits: CompactionSpec) -> bool:
        return (
            max(commits_among(f.path for f in u.files) for u in self.units)
            >= limits.max_delta_files
            or self.deleted_rows > limits.max_deleted_fraction * self.stored_rows
        )

    def job_row(self) -> dict[str, Any]:
        """Its row for the compaction job (runner/write/compact_writer.py BUCKETS_SCHEMA)."""
        logged = [
            {
                "path": f.path,
                "deletionVector": f.deletion_vector.to_log() if f.deletion_vector else None,
            }
            for f in self.files
        ]
        return {
            "partition_path": self.group[0],
            "bucket": self.group[1],
            "file_id": self.units[0].file_id or self.files[0].file_id,
            "files": json.dumps(logged),
            "bytes_per_row": sum(f.size for f in self.files) / max(self.stored_rows, 1),
        }


@dataclass
class CompactSummary:
    table: str
    dry_run: bool
    buckets: int = 0  # folded (or, dry run, to fold)
    files_read: int = 0
    bytes_read: int = 0
    rows: int = 0  # live rows kept
    deleted_rows: int = 0  # rows deletion vectors deleted, now gone from the files
    files_written: int = 0
    bytes_written: int = 0
    buckets_dropped: list[str] = field(default_factory=list)  # changed by a writer meanwhile
    version: int | None = None
    seconds: float = 0.0

    def record(self) -> ActionFigures:
        return ActionFigures.rewrite(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        if not self.buckets and not self.buckets_dropped:
            return f"{self.table}: nothing to compact (every bucket is one file, no deleted rows)"
        verb = "would fold" if self.dry_run else "folded"
        lines = [
            f"{self.table}: {verb} {self.buckets} bucket(s): {self.files_read} file(s), "
            f"{human_size(self.bytes_read)}, {self.rows:,} live and {self.deleted_rows:,} "
            "deleted rows"
        ]
        if not self.dry_run:
            head = (
                f"committed version {self.version}"
                if self.version is not None
                else ("nothing committed")
            )
            lines.append(
                f"  {head}: {self.files_written} file(s), {human_size(self.bytes_written)} "
                f"written in {self.seconds:.1f}s"
            )
        if self.buckets_dropped:
            lines.append(
                f"  {len(self.buckets_dropped)} bucket(s) left as they are: a writer changed "
                f"them during the compaction ({', '.join(self.buckets_dropped[:5])})"
            )
        return "\n".join(lines)


def plan_compaction(
    snapshot: TableSnapshot,
    partitions: Sequence[str] = (),
    limits: CompactionSpec | None = None,
    group_bytes: int | None = None,
) -> list[BucketState]:
    """The buckets to fold: every bucket with a file group of several files, deleted rows
    or small neighbouring groups (in `partitions` when given), or with `limits`, only those
    past a threshold. `group_bytes`: the file groups' target size (None: a bucket is one)."""
    known = {f.partition_path for f in snapshot.files()}
    unknown = [p for p in partitions if p not in known]
    if unknown:
        raise UserError(
            f"--partition {', '.join(unknown)}: no such partition in {snapshot.uri} (its "
            f"partitions: {', '.join(sorted(known)[:10]) or 'none'})"
        )
    buckets = [
        BucketState(group, tuple(files), group_bytes)
        for group, files in sorted(snapshot.files_by_group().items())
        if not partitions or group[0] in partitions
    ]
    if limits is not None:
        return [b for b in buckets if b.past(limits)]
    return [b for b in buckets if b.needs_compaction()]


def compact_table(
    spec: PipelineSpec,
    partitions: Sequence[str] = (),
    dry_run: bool = False,
    spark: SparkSession | None = None,
    console_progress: bool = False,
    only_due: bool = False,
) -> CompactSummary:
    """Plan from the Delta log; unless dry_run (or nothing to do), start Spark and fold.

    `only_due`: only buckets past target.compaction's thresholds (the after-commit run).
    Its progress shows as runner/progress.py says: a line rewritten in place when
    `console_progress`, else log events."""
    target = spec.target
    snapshot = open_table(target.path)
    if snapshot is None:
        raise UserError(f"no table at {target.path} yet: run the pipeline first")
    check_table_settings(spec.file, target, snapshot)
    limits = target.compaction if only_due else None
    buckets = plan_compaction(snapshot, partitions, limits, target.group_bytes)
    summary = CompactSummary(target.path, dry_run)
    _count_inputs(summary, buckets)
    log.info("compaction_planned", buckets=summary.buckets, files=summary.files_read)
    if dry_run or not buckets:
        return summary
    check_log_writable(snapshot.location, "runner compact")  # before any work
    with Progress.start("compact", spec.name, tty=console_progress):
        spark = spark or spark_session(spec.spark, f"{spec.name}-compact")
        return run_compaction(
            spark, snapshot, buckets, summary, target.group_bytes, written_for(target.table_type)
        )


def _count_inputs(summary: CompactSummary, buckets: Sequence[BucketState]) -> None:
    summary.buckets = len(buckets)
    summary.files_read = sum(len(b.files) for b in buckets)
    summary.bytes_read = sum(f.size for b in buckets for f in b.files)
    summary.rows = sum(f.live_records for b in buckets for f in b.files)
    summary.deleted_rows = sum(b.deleted_rows for b in buckets)


def run_compaction(
    spark: SparkSession,
    snapshot: TableSnapshot,
    buckets: list[BucketState],
    summary: CompactSummary,
    group_bytes: int | None = None,
    key_filters: bool = True,
) -> CompactSummary:
    """Fold `buckets` in one Spark job and commit them; `group_bytes`: the target size of
    the file groups their rows are cut into (None: one file per bucket); `key_filters`:
    the new files carry them (runner/storage/key_filter.py)."""
    change = TableChange(snapshot.location, "compaction", spark, shown=snapshot.uri)
    _count_inputs(summary, buckets)
    rows = [b.job_row() for b in buckets]
    shuffle = int(spark.conf.get("spark.sql.shuffle.partitions") or "8")
    frame = spark.createDataFrame(rows, from_arrow_schema(BUCKETS_SCHEMA))
    frame = frame.repartition(max(1, min(len(rows), shuffle)))
    job = CompactJob(
        *(snapshot.location, change.instant, snapshot.arrow_schema(), faults.requested()),
        *(group_bytes, key_filters),
    )
    with change.guarded():
        results = frame.mapInArrow(job, from_arrow_schema(REGROUP_RESULT_SCHEMA)).collect()
        written: dict[Group, list[Any]] = {}
        for r in results:  # one row per file group written
            written.setdefault((r.partition_path, r.bucket), []).append(r)
        if sum(r.num_records for r in results) != summary.rows:
            raise CommitConflictError(
                f"compaction wrote {sum(r.num_records for r in results)} rows for "
                f"{summary.rows} live rows read; nothing was committed"
            )
        summary.version = _commit(change, snapshot, buckets, written, summary)
    change.done("compaction_done", summary)
    return summary


def _commit(
    change: TableChange,
    snapshot: TableSnapshot,
    buckets: list[BucketState],
    written: dict[Group, list[Any]],
    summary: CompactSummary,
) -> int | None:
    """One version: every folded bucket's files out, its new file in. Buckets a writer
    changed since they were read are dropped (their new files removed), not committed."""
    instant = change.instant
    pending = {b.group: b for b in buckets}

    def folding() -> Commit:
        return Commit(
            writer="compaction",
            operation="OPTIMIZE",
            metadata={"operation": "compact", "instant": instant, "buckets": len(pending)},
            added=tuple(
                NewFile(r.path, r.size, r.stats)
                for g, rows in written.items()
                if g in pending
                for r in rows
                if r.path
            ),
            removed=tuple(f for b in pending.values() for f in b.files),
            buckets=frozenset(pending),
            data_change=False,
        )

    def drop(clash: BucketClash) -> Commit | None:
        for group in clash.buckets:
            del pending[group]
            summary.buckets_dropped.append(f"{group[0] or '<root>'}#{group[1]}")
            remove_files(clash.latest.location, [r.path for r in written[group] if r.path])
        log.info("compaction_buckets_dropped", on_version=clash.latest.version, left=len(pending))
        return folding() if pending else None

    version = change.commit(
        lambda: (snapshot, folding()) if pending else None, CompactionRule(), Resolver(drop)
    )
    if version is not None:
        committed = folding()  # what is left in `pending` after drops
        summary.files_written = len(committed.added)
        summary.bytes_written = sum(f.size for f in committed.added)
    _count_inputs(summary, list(pending.values()))
    return version


def compact_if_due(spark: SparkSession, spec: PipelineSpec) -> CompactSummary | None:
    """After a run's commit: fold the buckets past target.compaction's thresholds."""
    target = spec.target
    if target.table_type != "MERGE_ON_READ" or not target.compaction.after_commit:
        return None
    done = compact_table(spec, spark=spark, only_due=True)
    return done if done.buckets else None


@dataclass(frozen=True)
class CompactionRule:
    """A compaction's commit goes on unless the settings changed; buckets whose files or
    deletion vectors changed clash (its resolver drops them)."""

    def conflict(
        self, changes: Commit, read: TableSnapshot, latest: TableSnapshot, attempt: int
    ) -> CommitConflictError | None:
        if latest.configuration != read.configuration:
            return CommitConflictError(
                f"the settings of {latest.uri} changed during the compaction (version "
                f"{latest.version}); nothing was committed: run it again"
            )
        clashes = changed_buckets(changes, latest)
        return BucketClash(clashes, latest) if clashes else None
