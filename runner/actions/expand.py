"""Bucket expansion: plan it from the Delta log, rewrite the regrown partitions, one commit.

multiple_rehash (N to k*N): pmod(h, k*N) mod N == pmod(h, N), so old bucket b holds exactly
the rows of new buckets b, b+N, ..., b+(k-1)N. Each old bucket file is read by one Spark task
and written into its new buckets by that task: the table's rows never cross a shuffle.
overwrite (any N to any M): the rows are reshuffled by their new bucket.

Either way the new files, the removal of the old ones and the new bucket counts are ONE
Delta version: delta-rs has no call that commits a metaData action with files, so
runner/delta/transaction.py writes that entry itself; its ExpansionRule moves it on top of
another writer's commit only when that writer changed neither the metadata nor any file of
the regrown partitions. Writers that read the old layout fail their own commit (the
settings changed) and are told to run again. A failure before it leaves the table as it was.

A bucket split alone (runner/actions/expansion_split.py) is the same rehash on the files of
one bucket: bucket b at modulus M into b and b+M at 2M, one commit with the new layout; its
conflict rule looks at the files of the split buckets only.

Plan (`plan_expansion`, `plan_split`, from the Delta log, no Spark) and execute
(`run_expansion`) are separate steps; `expand_table` is the command's call and
`expand_if_due` the run's after-commit step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import structlog
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from runner import faults
from runner.actions.expansion_plan import (
    SPLIT,
    ExpansionPlan,
    buckets_over,
    check_expandable,
    layout_dict,
    plan_expansion,
)
from runner.actions.expansion_split import plan_hot_splits, plan_split
from runner.actions.rehash_bitmaps import (
    bitmap_frame,
    bitmaps_by_file,
    new_bucket_column,
    rounds,
    task_files,
)
from runner.actions.table_change import TableChange
from runner.delta.log_entry import NewFile
from runner.delta.snapshot import DataFile, Group, TableSnapshot, open_table
from runner.delta.spark_read import let_spark_read, read_files, table_reading_jars
from runner.delta.table_config import check_table_settings
from runner.delta.transaction import Commit
from runner.errors import CommitConflictError, RunnerError, UserError
from runner.index.layout import LAYOUT_KEYS
from runner.index.naming import new_file_id
from runner.jvm.session import spark_session
from runner.progress import Progress
from runner.spec.model import PipelineSpec, Target
from runner.storage.key_filter import written_for
from runner.storage.location import locate
from runner.storage.meta_columns import BUCKET
from runner.summary import ActionFigures, human_size
from runner.write.regroup_writer import (
    REGROUP_RESULT_SCHEMA,
    RegroupJob,
    RehashJob,
    regrouped,
    rows_per_group,
)

log = structlog.get_logger(__name__)


# A rehash's rows stay out of Spark: each task reads an old bucket's file and writes its
# rows into the new buckets itself; what crosses Spark's exchange is, per file, which rows
# go to which new bucket (runner/actions/rehash_bitmaps.py).
_NO_ROWS_SHUFFLED = "none: each old bucket's file is split where it is read"


@dataclass
class ExpandSummary:
    table: str
    policy: str
    instant: str
    version: int | None = None
    partitions: int = 0
    buckets_split: int = 0
    rows: int = 0
    files_read: int = 0
    bytes_read: int = 0
    files_written: int = 0
    bytes_written: int = 0
    shuffle: bool = False
    seconds: float = 0.0  # from the command's start (Spark's start included) to the commit
    spark_start_seconds: float = 0.0
    buckets_after: dict[str, Any] = field(default_factory=dict)

    def record(self) -> ActionFigures:
        return ActionFigures.rewrite(self, self.instant)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        what = (
            f"  buckets      {self.buckets_split} split alone, {self.rows:,} rows moved"
            if self.policy == SPLIT
            else f"  partitions   {self.partitions} regrown, {self.rows:,} rows moved"
        )
        return "\n".join(
            [
                f"expanded {self.table} ({self.policy}): committed version {self.version}",
                what,
                f"  files        {self.files_read} read ({human_size(self.bytes_read)}), "
                f"{self.files_written} written ({human_size(self.bytes_written)})",
                f"  shuffle      {'all rows (overwrite)' if self.shuffle else _NO_ROWS_SHUFFLED}",
                f"  time         {self.seconds:.1f}s"
                + (
                    f" ({self.spark_start_seconds:.1f}s of it Spark's start)"
                    if self.spark_start_seconds
                    else ""
                ),
            ]
        )


def run_expansion(
    spark: SparkSession,
    snapshot: TableSnapshot,
    target: Target,
    plan: ExpansionPlan,
    started: float | None = None,
    spark_start: float = 0.0,
) -> ExpandSummary:
    """Rewrite the plan's partitions into their new buckets and commit them in one version.
    Its seconds count from `started` (time.perf_counter(): the command's start, so that
    the summary and the run history give one time), `spark_start` of them Spark's start."""
    change = TableChange(snapshot.location, "expansion", spark, shown=snapshot.uri)
    if started is not None:
        change = replace(change, started=started)
    let_spark_read(spark, snapshot.location)
    summary = ExpandSummary(snapshot.uri, plan.policy, change.instant)
    summary.spark_start_seconds = round(spark_start, 3)
    summary.shuffle = plan.policy == "overwrite"
    summary.buckets_after = layout_dict(plan.layout_after)
    log.info("expansion_started", table=snapshot.uri, policy=plan.policy, instant=summary.instant)
    job = _rewrite_job(snapshot, target, plan, summary.instant)
    # the commit moves on top of another writer's only if that one changed neither the
    # table's metadata nor any file of the regrown partitions (of the split buckets)
    rule = ExpansionRule(
        frozenset(c.partition_path for c in plan.parts),
        frozenset((s.partition_path, s.bucket) for s in plan.splits) if plan.splits else None,
    )
    with change.guarded():
        added = _rewrite(spark, snapshot, target, plan, job)
        summary.version = change.commit(
            lambda: (snapshot, _relayout(snapshot, plan, added, summary.instant)), rule
        )
    files = plan.files
    summary.partitions = len(plan.changes)
    summary.buckets_split = len(plan.splits)
    summary.rows = plan.rows  # as many as written: _rewrite checks
    summary.files_read = len(files)
    summary.bytes_read = sum(f.size for f in files)
    summary.files_written = len(added)
    summary.bytes_written = sum(f.size for f in added)
    change.done("expansion_committed", summary)
    return summary


def _rewrite_job(
    snapshot: TableSnapshot, target: Target, plan: ExpansionPlan, instant: str
) -> RehashJob | RegroupJob:
    """What each writer task runs: a rehash (multiple_rehash, split) splits old bucket files,
    an overwrite regroups shuffled rows. With file groups (not a change feed's table), a
    rehash gives each old group its own group in every new bucket, and an overwrite cuts
    each new bucket into groups of about the target size (runner/write/regroup_writer.py)."""
    file_ids = {g: new_file_id(g[1]) for g in plan.new_buckets()}
    schema, fault = snapshot.arrow_schema(), faults.requested()
    group_bytes = target.group_bytes
    if plan.policy != "overwrite":
        return RehashJob(
            *(snapshot.location, instant, schema, file_ids, fault, group_bytes is not None),
            key_filters=written_for(target.table_type),
        )
    rows = sum(f.num_records for f in plan.files)
    per_group = rows_per_group(plan.files, rows, group_bytes)
    return RegroupJob(
        *(snapshot.location, instant, schema, file_ids, fault, per_group),
        key_filters=written_for(target.table_type),
    )


def _rewrite(
    spark: SparkSession,
    snapshot: TableSnapshot,
    target: Target,
    plan: ExpansionPlan,
    job: RehashJob | RegroupJob,
) -> list[NewFile]:
    """The Spark job: the plan's rows in their new bucket files, every row written once."""
    if not plan.files:  # a split of a bucket that holds no file: only the layout changes
        return []
    if isinstance(job, RehashJob):
        results = [
            result
            for files in rounds(plan.files)
            for result in _rehash_round(spark, snapshot, target, plan, job, files)
        ]
    else:
        frame = regroup_frame(spark, snapshot, target, plan)
        results = frame.mapInArrow(job, from_arrow_schema(REGROUP_RESULT_SCHEMA)).collect()
    written_rows = sum(r.num_records for r in results)
    if written_rows != plan.rows:
        raise RunnerError(
            f"expansion wrote {written_rows} rows for {plan.rows} read; nothing was committed"
        )
    return [NewFile(r.path, r.size, r.stats) for r in results]


def _rehash_round(
    spark: SparkSession,
    snapshot: TableSnapshot,
    target: Target,
    plan: ExpansionPlan,
    job: RehashJob,
    files: list[DataFile],
) -> list[Row]:
    """A rehash of some whole old buckets: their bitmaps to the driver (one Spark job),
    then a writer task per core, each with about as many bytes of old buckets to split."""
    bitmaps = bitmap_frame(spark, snapshot, target, plan, files).toArrow()
    tasks = task_files(files, spark.sparkContext.defaultParallelism)
    job = replace(job, tasks=tuple(map(tuple, tasks)), bitmaps=bitmaps_by_file(bitmaps, tasks))
    frame = spark.range(0, len(tasks), 1, len(tasks))
    return frame.mapInArrow(job, from_arrow_schema(REGROUP_RESULT_SCHEMA)).collect()


def _relayout(
    snapshot: TableSnapshot, plan: ExpansionPlan, added: list[NewFile], instant: str
) -> Commit:
    """The new bucket layout, the regrown partitions' (split buckets') old files out and
    the new ones in, as one version that changes no row (runner/delta/transaction.py
    writes it)."""
    configuration = {
        k: v for k, v in snapshot.configuration.items() if k not in LAYOUT_KEYS
    } | plan.layout_after.to_configuration()
    return Commit(
        writer="expansion",
        operation="RUNNER EXPAND",
        metadata={
            "operation": "expand",
            "policy": plan.policy,
            "instant": instant,
            "buckets_before": layout_dict(plan.layout_before),
            "buckets_after": layout_dict(plan.layout_after),
            "files_read": len(plan.files),
            "files_written": len(added),
            **({"split": [s.name for s in plan.splits]} if plan.splits else {}),
        },
        added=tuple(added),
        removed=tuple(plan.files),
        configuration=configuration,
        data_change=False,
    )


def regroup_frame(
    spark: SparkSession, snapshot: TableSnapshot, target: Target, plan: ExpansionPlan
) -> DataFrame:
    """An overwrite's rows, each with its new `_bucket`, shuffled by (partition path, new
    bucket) and sorted by key."""
    rows = read_files(spark, snapshot, plan.files)
    rows = rows.withColumn(BUCKET, new_bucket_column(rows, target, plan))
    return regrouped(spark, rows, len(plan.new_buckets()))


@dataclass(frozen=True)
class ExpansionRequest:
    """What `runner expand` asks for: the new count (None: the spec's, or the table's
    times the policy's factor), the policy (None: the spec's), the partitions (none: all),
    whether only to plan, and the buckets to split alone (`--bucket PARTITION/BUCKET`)."""

    buckets: int | None
    policy: str | None = None
    partitions: Sequence[str] = ()
    dry_run: bool = False
    split: Sequence[str] = ()


def plan_request(
    snapshot: TableSnapshot, target: Target, request: ExpansionRequest
) -> ExpansionPlan:
    """The request's plan: the named buckets split alone; under the policy split (the
    request's, else the spec's) with no new count, the buckets past
    index.expansion.max_bucket_bytes split alone; else the partitions regrown."""
    if request.split:
        if request.buckets or request.policy or request.partitions:
            raise UserError(
                "--bucket splits the buckets it names: leave out --buckets, --policy and "
                "--partition (or run them as an expansion of their own)"
            )
        return plan_split(snapshot, request.split)
    expansion = target.index.expansion
    if (request.policy or expansion.policy) == SPLIT and request.buckets is None:
        if not expansion.max_bucket_bytes:
            raise UserError(
                "the policy split splits the buckets past index.expansion.max_bucket_bytes, "
                "which the spec does not set: set it, or name buckets with --bucket"
            )
        plan = plan_hot_splits(snapshot, expansion.max_bucket_bytes, request.partitions)
        if plan is None:
            raise UserError(
                f"nothing to do: no bucket of {snapshot.uri} holds more than "
                f"index.expansion.max_bucket_bytes ({human_size(expansion.max_bucket_bytes)})"
            )
        return plan
    if request.policy == SPLIT:
        raise UserError(
            "--policy split splits buckets past index.expansion.max_bucket_bytes and takes no "
            "--buckets; leave out one of the two"
        )
    return plan_expansion(snapshot, target, request.buckets, request.policy, request.partitions)


def expand_table(
    spec: PipelineSpec,
    request: ExpansionRequest,
    spark: SparkSession | None = None,
    console_progress: bool = False,
    started: float | None = None,
) -> tuple[ExpansionPlan, ExpandSummary | None]:
    """`runner expand`: plan from the Delta log; unless a dry run, do it with `spark`, or a
    session it starts, showing its progress (runner/progress.py: a line rewritten in place
    when `console_progress`, else log events). Its time counts from `started`
    (time.perf_counter(); default: now), the caller's start."""
    started = time.perf_counter() if started is None else started
    target = spec.target
    snapshot = open_table(target.path)
    if snapshot is None:
        raise UserError(f"no table at {target.path} yet: run the pipeline first")
    check_table_settings(spec.file, target, snapshot)
    plan = plan_request(snapshot, target, request)
    log.info(
        "expansion_planned",
        **{k: v for k, v in plan.to_dict().items() if k not in ("partitions", "splits")},
    )
    if request.dry_run:
        return plan, None
    with Progress.start("expand", spec.name, tty=console_progress):
        starting = time.perf_counter()
        spark = spark or spark_session(
            spec.spark, f"{spec.name}-expand", jars=table_reading_jars(snapshot.location)
        )
        spark_start = time.perf_counter() - starting
        return plan, run_expansion(spark, snapshot, target, plan, started, spark_start)


def automatic(target: Target) -> bool:
    expansion = target.index.expansion
    return expansion.policy != "none" and bool(expansion.max_bucket_bytes)


def check_automatic_expansion(target: Target) -> None:
    """Before a run: the automatic expansion after its commit must be possible at all."""
    if not automatic(target):
        return
    table = locate(target.path)
    check_expandable(table)
    table_reading_jars(table)  # refuses when Spark could not read the table


def expand_if_due(spark: SparkSession, spec: PipelineSpec) -> ExpandSummary | None:
    """After a commit: grow, by the spec's policy and factor, the partitions whose largest
    bucket file passed index.expansion.max_bucket_bytes; under the policy split, split
    alone each bucket whose live bytes passed it."""
    expansion = spec.target.index.expansion
    if not automatic(spec.target):
        return None
    snapshot = open_table(spec.target.path)
    if snapshot is None:
        return None
    assert expansion.max_bucket_bytes, "automatic() said it is set"
    if expansion.policy == SPLIT:
        plan = plan_hot_splits(snapshot, expansion.max_bucket_bytes)
        if plan is None:
            return None
        log.info("split_due", buckets=[s.name for s in plan.splits])
        return run_expansion(spark, snapshot, spec.target, plan)
    hot = buckets_over(snapshot, expansion.max_bucket_bytes)
    if not hot:
        return None
    log.info("expansion_due", partitions=hot, max_bucket_bytes=expansion.max_bucket_bytes)
    plan = plan_expansion(snapshot, spec.target, None, expansion.policy, hot)
    return run_expansion(spark, snapshot, spec.target, plan)


@dataclass(frozen=True)
class ExpansionRule:
    """An expansion's commit goes on unless the settings or the schema changed, or any file
    of `partitions` (the ones it regrows) did, or of `buckets` when given (the buckets a
    split rewrites, in those partitions): a deletion vector added meanwhile changes a file
    as much as replacing it."""

    partitions: frozenset[str]
    buckets: frozenset[Group] | None = None

    def conflict(
        self, changes: Commit, read: TableSnapshot, latest: TableSnapshot, attempt: int
    ) -> CommitConflictError | None:
        if latest.configuration != read.configuration or (
            latest.table.schema().to_json() != read.table.schema().to_json()
        ):
            return CommitConflictError(
                f"another writer changed the settings or schema of {latest.uri} (version "
                f"{latest.version}) during the expansion; nothing was committed: run it again"
            )
        now = {
            (f.path, f.deletion_vector)
            for f in latest.files()
            if f.partition_path in self.partitions
            and (self.buckets is None or (f.partition_path, f.bucket) in self.buckets)
        }
        if now != {(f.path, f.deletion_vector) for f in changes.removed}:
            return CommitConflictError(
                f"another writer changed files of the partitions being expanded (version "
                f"{latest.version} of {latest.uri}); nothing was committed: run the expansion again"
            )
        return None
