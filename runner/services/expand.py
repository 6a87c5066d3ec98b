"""Bucket expansion: plan it from the Delta log, rewrite the regrown partitions, one commit.

multiple_rehash (N to k*N): pmod(h, k*N) mod N == pmod(h, N), so old bucket b holds exactly
the rows of new buckets b, b+N, ..., b+(k-1)N. Each old bucket file is read by one Spark task
and written into its new buckets by that task: the table's rows never cross a shuffle.
overwrite (any N to any M): the rows are reshuffled by their new bucket.

Either way the new files, the removal of the old ones and the new bucket counts are ONE
Delta version (see table/layout_commit.py). A failure before it leaves the table as it was.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import structlog
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from runner import faults, s3_connector
from runner.delta.layout_commit import check_expandable, commit_relayout
from runner.delta.log_entry import NewFile
from runner.delta.snapshot import DataFile, TableSnapshot, open_table
from runner.delta.spark_read import ROW_INDEX, SOURCE_FILE, read_files
from runner.delta.table_config import check_table_settings
from runner.errors import RunnerError, UserError
from runner.index.bucket import layout_bucket_column
from runner.index.layout import PARTITION_BUCKETS, BucketLayout
from runner.index.naming import new_file_id, new_instant
from runner.session import spark_session, under_spark_submit
from runner.spec.model import PipelineSpec, Target
from runner.storage.in_flight import in_flight
from runner.storage.location import TableLocation, locate, writing
from runner.storage.meta_columns import BUCKET, PARTITION_PATH, RECORD_KEY
from runner.summary import human_size
from runner.write import tombstones
from runner.write.regroup_writer import (
    FILE_HASH,
    REGROUP_RESULT_SCHEMA,
    RegroupJob,
    RehashJob,
)
from runner.write.uncommitted import remove_uncommitted

log = structlog.get_logger(__name__)

POLICIES = ("multiple_rehash", "overwrite")
# Spark may split a large file between read tasks; a rehash needs each old bucket file read
# whole by one task (its rows alone make up its new buckets). Files are split only when
# longer than min(maxPartitionBytes, max(openCostInBytes, bytes per core)): raising both
# settings to the largest file's size rules that out, and small files still share tasks.
_DEFAULT_MAX_PARTITION_BYTES = 128 << 20


def _whole_file_reads(largest_file: int) -> dict[str, str]:
    return {
        "spark.sql.files.maxPartitionBytes": str(max(largest_file, _DEFAULT_MAX_PARTITION_BYTES)),
        "spark.sql.files.openCostInBytes": str(max(largest_file, 1)),
    }


@dataclass(frozen=True)
class PartitionChange:
    partition_path: str
    buckets_before: int
    buckets_after: int
    files: tuple[DataFile, ...]

    @property
    def rows(self) -> int:
        return sum(f.live_records for f in self.files)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class ExpansionPlan:
    table: str
    version: int
    policy: str
    layout_before: BucketLayout
    layout_after: BucketLayout
    changes: tuple[PartitionChange, ...]

    @property
    def files(self) -> list[DataFile]:
        return [f for c in self.changes for f in c.files]

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "policy": self.policy,
            "buckets_before": _layout_dict(self.layout_before),
            "buckets_after": _layout_dict(self.layout_after),
            "partitions": [
                {
                    "partition": c.partition_path,
                    "buckets_before": c.buckets_before,
                    "buckets_after": c.buckets_after,
                    "files_read": len(c.files),
                    "rows": c.rows,
                    "bytes_read": c.bytes,
                }
                for c in self.changes
            ],
            "files_read": len(self.files),
            "bytes_read": sum(c.bytes for c in self.changes),
            "rows": sum(c.rows for c in self.changes),
            # the rows are copied, not changed: about as many bytes come out as go in
            "bytes_written_estimate": sum(c.bytes for c in self.changes),
            "shuffle": self.policy == "overwrite",
        }

    def render(self) -> str:
        d = self.to_dict()
        how = "a full reshuffle" if d["shuffle"] else "no shuffle: each old bucket split alone"
        lines = [
            f"expansion plan for {self.table} at version {self.version} ({self.policy}, {how})",
            f"  buckets      {self.layout_before.describe()} -> {self.layout_after.describe()}",
            f"  partitions   {len(self.changes)} regrown",
        ]
        for c in self.changes[:20]:
            lines.append(
                f"    {c.partition_path or '<table root>'}: {c.buckets_before} -> "
                f"{c.buckets_after} buckets, {len(c.files)} file(s), {c.rows:,} rows, "
                f"{human_size(c.bytes)}"
            )
        if len(self.changes) > 20:
            lines.append(f"    ... and {len(self.changes) - 20} more")
        lines.append(
            f"  read         {d['files_read']} file(s), {human_size(d['bytes_read'])}; "
            f"write about {human_size(d['bytes_written_estimate'])}"
        )
        return "\n".join(lines)


@dataclass
class ExpandSummary:
    table: str
    policy: str
    instant: str
    version: int | None = None
    partitions: int = 0
    rows: int = 0
    files_read: int = 0
    bytes_read: int = 0
    files_written: int = 0
    bytes_written: int = 0
    shuffle: bool = False
    seconds: float = 0.0
    buckets_after: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        return "\n".join(
            [
                f"expanded {self.table} ({self.policy}): committed version {self.version}",
                f"  partitions   {self.partitions} regrown, {self.rows:,} rows moved",
                f"  files        {self.files_read} read ({human_size(self.bytes_read)}), "
                f"{self.files_written} written ({human_size(self.bytes_written)})",
                f"  shuffle      {'yes (overwrite)' if self.shuffle else 'none'}",
                f"  time         {self.seconds:.1f}s",
            ]
        )


def plan_expansion(
    snapshot: TableSnapshot,
    target: Target,
    buckets: int | None,
    policy: str | None = None,
    partitions: Sequence[str] = (),
) -> ExpansionPlan:
    """What an expansion would do, from the Delta log alone (no Spark, nothing written).

    `buckets` None means the spec's factor times each partition's current count.
    """
    expansion = target.index.expansion
    policy = policy or (expansion.policy if expansion.policy != "none" else "multiple_rehash")
    if policy not in POLICIES:
        raise UserError(f"unknown expansion policy {policy!r}; use one of {', '.join(POLICIES)}")
    check_expandable(snapshot.location)  # before any work
    layout = BucketLayout.from_configuration(snapshot.configuration)
    by_partition: dict[str, list[DataFile]] = {}
    for f in snapshot.files():
        by_partition.setdefault(f.partition_path, []).append(f)

    whole_table = not partitions
    chosen = sorted(by_partition) if whole_table else list(dict.fromkeys(partitions))
    for pp in chosen:
        if pp not in by_partition:
            near = difflib.get_close_matches(pp, list(by_partition), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise UserError(f"partition {pp!r} holds no data in {snapshot.uri}{hint}")

    counts: dict[str, int] = {}
    changes = []
    for pp in chosen:
        before = layout.count_for(pp)
        after = buckets or before * expansion.factor
        _check_counts(pp, before, after, policy)
        counts[pp] = after
        if after != before:
            changes.append(PartitionChange(pp, before, after, tuple(by_partition[pp])))
    if whole_table:
        default = buckets or layout.default * expansion.factor
        _check_counts("the table's default", layout.default, default, policy)
        layout_after = layout.with_counts(counts, default=default)
    else:
        layout_after = layout.with_counts(counts)
    if layout_after == layout:
        raise UserError(f"nothing to do: {snapshot.uri} already has {layout.describe()}")
    _refuse_tombstones(snapshot, changes)
    return ExpansionPlan(
        snapshot.uri, snapshot.version, policy, layout, layout_after, tuple(changes)
    )


def _refuse_tombstones(snapshot: TableSnapshot, changes: list[PartitionChange]) -> None:
    """A change feed's table may remember deleted keys in its files' footers
    (runner/write/tombstones.py); an expansion does not carry them into the new buckets
    yet, and a late event could then bring a deleted key back."""
    if "runner.cdc.sequence_by" not in snapshot.configuration:
        return
    fs, root = snapshot.location.filesystem()
    paths = [f.path for change in changes for f in change.files]
    if tombstones.held(fs, root, paths):
        raise UserError(
            f"{snapshot.uri} remembers deleted keys of its change feed (tombstones, kept "
            "cdc.tombstone_hours) in the partitions to expand, and an expansion does not "
            "carry them into the new buckets yet; expand once they have expired, or into "
            "a new table"
        )


def _check_counts(where: str, before: int, after: int, policy: str) -> None:
    if policy == "multiple_rehash" and (after < before or after % before):
        raise UserError(
            f"multiple_rehash splits each bucket into k buckets, so it grows {where} from "
            f"{before} buckets only to a multiple of {before} (got {after}); "
            f"use --policy overwrite to reshuffle into {after} buckets"
        )


def run_expansion(
    spark: SparkSession, snapshot: TableSnapshot, target: Target, plan: ExpansionPlan
) -> ExpandSummary:
    """Rewrite the plan's partitions into their new buckets and commit them in one version."""
    started = time.perf_counter()
    let_spark_read(spark, snapshot.location)
    summary = ExpandSummary(snapshot.uri, plan.policy, new_instant())
    summary.shuffle = plan.policy == "overwrite"
    summary.buckets_after = _layout_dict(plan.layout_after)
    log.info("expansion_started", table=snapshot.uri, policy=plan.policy, instant=summary.instant)
    files = plan.files
    new_groups = [(c.partition_path, b) for c in plan.changes for b in range(c.buckets_after)]
    file_ids = {g: new_file_id(g[1]) for g in new_groups}
    schema, fault = snapshot.arrow_schema(), faults.requested()
    if plan.policy == "multiple_rehash":
        job: RehashJob | RegroupJob = RehashJob(
            snapshot.location, summary.instant, schema, file_ids, files_by_hash(spark, files), fault
        )
    else:
        job = RegroupJob(snapshot.location, summary.instant, schema, file_ids, fault)
    read_conf = _whole_file_reads(max((f.size for f in files), default=0))
    saved = {k: spark.conf.get(k, None) for k in read_conf}
    with writing(snapshot.uri), in_flight(snapshot.location, summary.instant, "expansion"):
        try:
            for key, value in read_conf.items():
                spark.conf.set(key, value)
            frame = expansion_frame(spark, snapshot, target, plan)
            results = frame.mapInArrow(job, from_arrow_schema(REGROUP_RESULT_SCHEMA)).collect()
            added = [NewFile(r.path, r.size, r.stats) for r in results]
            written_rows = sum(r.num_records for r in results)
            if written_rows != sum(c.rows for c in plan.changes):
                raise RunnerError(
                    f"expansion wrote {written_rows} rows for {sum(c.rows for c in plan.changes)} "
                    "read; nothing was committed"
                )
            faults.maybe_fail("before_commit")
            configuration = {
                k: v for k, v in snapshot.configuration.items() if k != PARTITION_BUCKETS
            } | plan.layout_after.to_configuration()
            summary.version = commit_relayout(
                snapshot,
                configuration,
                added,
                files,
                {c.partition_path for c in plan.changes},
                {
                    "operation": "expand",
                    "policy": plan.policy,
                    "instant": summary.instant,
                    "buckets_before": _layout_dict(plan.layout_before),
                    "buckets_after": _layout_dict(plan.layout_after),
                    "files_read": len(files),
                    "files_written": len(added),
                },
            )
        except BaseException:
            remove_uncommitted(spark, snapshot.location, summary.instant)
            raise
        finally:
            for key, before in saved.items():
                if before is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, before)
    summary.partitions = len(plan.changes)
    summary.rows = written_rows
    summary.files_read = len(files)
    summary.bytes_read = sum(f.size for f in files)
    summary.files_written = len(added)
    summary.bytes_written = sum(f.size for f in added)
    summary.seconds = round(time.perf_counter() - started, 3)
    log.info("expansion_committed", **{k: v for k, v in summary.to_dict().items()})
    return summary


def file_hash(path: Column) -> Column:
    """A file's id in the rows a rehash hands its writers: a 64-bit hash of its name (names
    are unique in a runner table). Its path, a string of about 100 bytes per row, was half
    of what crossed the Arrow hand-off to Python."""
    return F.xxhash64(F.substring_index(path, "/", -1))


def files_by_hash(spark: SparkSession, files: Sequence[DataFile]) -> dict[int, DataFile]:
    """Each file under its file_hash, computed by Spark on the driver (a local relation,
    no job), so that the writers know the files by the hashes their rows carry."""
    names = spark.createDataFrame([(f.path.rsplit("/", 1)[-1],) for f in files], "name string")
    hashes = [r[0] for r in names.select(file_hash(F.col("name"))).collect()]
    by_hash = dict(zip(hashes, files, strict=True))
    if len(by_hash) < len(files):  # two names alike in 64 bits: not expected to be seen
        raise RunnerError(
            "two files of this expansion have the same name hash; nothing was written: "
            "expand the partitions in smaller groups (--partition)"
        )
    return by_hash


def expansion_frame(
    spark: SparkSession, snapshot: TableSnapshot, target: Target, plan: ExpansionPlan
) -> DataFrame:
    """What the expansion's writer tasks receive, with each row's new `_bucket`.

    multiple_rehash: only the bucket function's inputs are read, and each row goes out as
    (its file's FILE_HASH, its row index, new bucket): a scan and a projection, no
    exchange; the writer reads the rows themselves from the file. overwrite: whole rows,
    shuffled by (partition path, new bucket) and sorted by key.
    """
    rehash = plan.policy == "multiple_rehash"
    rows = read_files(spark, snapshot, plan.files, positions=rehash)
    counts = {c.partition_path: c.buckets_after for c in plan.changes}
    new_bucket = layout_bucket_column(
        target.index.hash_fields, counts, plan.layout_after.default, F.col(PARTITION_PATH)
    )
    if rehash:
        buckets = {(f.partition_path, f.bucket) for f in plan.files}
        if len(buckets) < len(plan.files):
            # a bucket of several files (a bulk load's, or base and delta files): its files
            # must reach the writer one after the other. A file's path starts with its
            # partition and bucket id, so a local sort by path puts them so.
            rows = rows.sortWithinPartitions(SOURCE_FILE)
        return rows.select(
            file_hash(F.col(SOURCE_FILE)).alias(FILE_HASH),
            F.col(ROW_INDEX),
            new_bucket.alias(BUCKET),
        )
    groups = sum(c.buckets_after for c in plan.changes)
    shuffle = int(spark.conf.get("spark.sql.shuffle.partitions") or "8")
    return (
        rows.withColumn(BUCKET, new_bucket)
        .repartition(max(1, min(groups, shuffle)), PARTITION_PATH, BUCKET)
        .sortWithinPartitions(PARTITION_PATH, BUCKET, RECORD_KEY)
    )


def buckets_over(snapshot: TableSnapshot, max_bytes: int) -> list[str]:
    """Partitions whose largest bucket file passes max_bytes: the automatic trigger."""
    return sorted({f.partition_path for f in snapshot.files() if f.size > max_bytes})


def _layout_dict(layout: BucketLayout) -> dict[str, Any]:
    return {"default": layout.default, "partitions": dict(layout.partitions)}


def expand_table(
    spec: PipelineSpec,
    buckets: int | None,
    policy: str | None = None,
    partitions: Sequence[str] = (),
    dry_run: bool = False,
    spark: SparkSession | None = None,
    console_progress: bool = False,
) -> tuple[ExpansionPlan, ExpandSummary | None]:
    """`runner expand`: plan from the Delta log; unless dry_run, start Spark and do it."""
    target = spec.target
    snapshot = open_table(target.path)
    if snapshot is None:
        raise UserError(f"no table at {target.path} yet: run the pipeline first")
    check_table_settings(spec.file, target, snapshot.configuration)
    plan = plan_expansion(snapshot, target, buckets, policy, partitions)
    log.info("expansion_planned", **{k: v for k, v in plan.to_dict().items() if k != "partitions"})
    if dry_run:
        return plan, None
    spark = spark or spark_session(
        spec.spark,
        f"{spec.name}-expand",
        console_progress,
        jars=table_reading_jars(snapshot.location),
    )
    return plan, run_expansion(spark, snapshot, target, plan)


def _reading(location: TableLocation) -> str:
    return f"bucket expansion of {location.uri} (Spark reads the table's files)"


def table_reading_jars(location: TableLocation) -> list[str]:
    """Jars a new session needs to read the table's files: the S3 connector's on S3."""
    if location.is_local:
        return []
    return s3_connector.jars_to_add(_reading(location), under_spark_submit())


def let_spark_read(spark: SparkSession, location: TableLocation) -> None:
    """Give the session what it needs to read the table's files (on S3: the connector's
    settings, from the table's)."""
    if not location.is_local:
        s3_connector.enable(spark, location.settings, _reading(location))


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
    bucket file passed index.expansion.max_bucket_bytes."""
    expansion = spec.target.index.expansion
    if not automatic(spec.target):
        return None
    snapshot = open_table(spec.target.path)
    if snapshot is None:
        return None
    assert expansion.max_bucket_bytes, "automatic() said it is set"
    hot = buckets_over(snapshot, expansion.max_bucket_bytes)
    if not hot:
        return None
    log.info("expansion_due", partitions=hot, max_bucket_bytes=expansion.max_bucket_bytes)
    plan = plan_expansion(snapshot, spec.target, None, expansion.policy, hot)
    return run_expansion(spark, snapshot, spec.target, plan)
