"""One pipeline run: spec -> plan -> Spark job -> files -> one Delta commit.

Checks come first and cost nothing to the table: the stored settings, the input schema, the
record keys. Files are written next; they become visible only with the commit. A run that
fails before its commit leaves the table as it was and removes the files it wrote.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import structlog
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BooleanType, CharType, StringType, StructType, VarcharType

from runner import faults, logs, s3_connector
from runner.delta.commit import BucketClash, add_columns, commit_files, create_table
from runner.delta.directory import check_new_table_location
from runner.delta.log_entry import NewFile, check_log_writable
from runner.delta.quarantine import append_quarantine
from runner.delta.schema import SchemaPlan, plan_schema
from runner.delta.snapshot import DataFile, Group, TableSnapshot, open_table
from runner.delta.table_config import check_table_settings, table_settings
from runner.errors import CommitConflictError, UnreadableFileError, UserError
from runner.fields import check_fields, columns_of, missing_field
from runner.index.layout import BucketLayout
from runner.index.naming import new_file_id, new_instant
from runner.pipeline.cdc_columns import check_feed_columns, not_stored, with_history_columns
from runner.pipeline.key_columns import add_key_columns
from runner.pipeline.quality import (
    FATE,
    QUARANTINE_COLUMNS,
    RULE,
    Verdicts,
    add_malformed,
    add_verdicts,
    bucket_counts_and_verdicts,
    check_expectations,
    enforce,
    quarantine_rows,
)
from runner.pipeline.winners import (
    bulk_keys,
    bulk_rows,
    dedupes,
    driver_frame,
    incoming_rows,
    merge_settings,
    one_pass_frame,
    single_pass,
    split_verdicts,
    why_not_on_driver,
    write_frame,
)
from runner.services.clean import clean_table
from runner.services.compact import compact_if_due
from runner.services.expand import (
    automatic,
    check_automatic_expansion,
    expand_if_due,
    table_reading_jars,
)
from runner.session import spark_session, under_spark_submit
from runner.sources.bad_input import reading
from runner.sources.checkpoint import FIELD as CHECKPOINT_FIELD
from runner.sources.checkpoint import Origin, StartingPoints, last_checkpoints, starting_points
from runner.sources.file_rows import why_spark_sends_rows
from runner.sources.jdbc import driver_jars
from runner.sources.model import SourcePlan
from runner.sources.plan import (
    nothing_new,
    plan_database_reads,
    plan_sources,
    read_input,
    sources_on_s3,
)
from runner.spec.model import PipelineSpec, Target
from runner.storage.in_flight import in_flight
from runner.storage.location import locate, writing
from runner.storage.meta_columns import BUCKET, META_COLUMNS, PARTITION_PATH, RESERVED_PREFIX
from runner.storage.parquet_rows import ParquetRows
from runner.summary import RunSummary, Stages
from runner.write.bucket_write import (
    WriteRequest,
    bucket_write,
    new_deletion_vectors,
    replaced_files,
)
from runner.write.bulk_writer import BULK_RESULT_SCHEMA, OCCUPIED, BulkJob
from runner.write.driver_merge import mark_candidates, write_on_driver
from runner.write.field_merge import load_merger, merger_error_in
from runner.write.uncommitted import remove_files, remove_uncommitted
from runner.write.writer import RESULT_SCHEMA, ExecutorJob

log = structlog.get_logger(__name__)

# Each unreadable file skipped costs a new pass over the batch: past this many, stop.
MAX_SKIPPED_FILES = 20


def batch_app_id(spec: PipelineSpec, batch_id: str) -> str:
    """The Delta app transaction id that marks a batch of a pipeline as committed."""
    return f"runner/{spec.name}/{batch_id}"


def run_pipeline(
    spec: PipelineSpec,
    console_progress: bool = False,
    spark: SparkSession | None = None,
    batch_id: str | None = None,
    checkpoint: tuple[str, ...] = (),
    ignore_checkpoint: bool = False,
) -> RunSummary:
    """One run of the pipeline: at most one commit of data (and checkpoints) to the table.

    `checkpoint` (VALUE, or NAME=VALUE per source) and `ignore_checkpoint` replace the
    checkpoints the table holds, for a reset or a start from a chosen point.
    """
    run = PipelineRun(spec, console_progress, spark, batch_id, checkpoint, ignore_checkpoint)
    return run.run()


class PipelineRun:
    """A run, stage by stage: preflight (no JVM), sources, batch, keys, write and commit,
    after-commit. Its state lives here, not in argument lists."""

    def __init__(
        self,
        spec: PipelineSpec,
        console_progress: bool,
        spark: SparkSession | None,
        batch_id: str | None,
        checkpoint: tuple[str, ...],
        ignore_checkpoint: bool,
    ):
        self.spec = spec
        self.target = spec.target
        self.console_progress = console_progress
        self.spark = spark
        self.checkpoint = checkpoint
        self.ignore_checkpoint = ignore_checkpoint
        self.stages = Stages()
        self.summary = RunSummary(
            spec.name, logs.start_run(), spec.target.path, spec.target.operation, new_instant()
        )
        self.summary.batch_id = batch_id
        self.table = locate(spec.target.path)  # object store settings, shipped to executors
        self.write_strategy = bucket_write(spec.target)
        self.snapshot: TableSnapshot | None = None
        self.skipped: dict[str, UnreadableFileError] = {}  # unreadable files, by path
        # set by the stages as the run goes
        self.points: StartingPoints | None = None
        self.plans: list[SourcePlan] = []
        self.on_driver = False  # the batch is merged on the driver, not in a Spark job
        self.write_rounds = 0  # the write, then each re-merge

    def run(self) -> RunSummary:
        summary = self.summary
        log.info(
            "run_started",
            pipeline=self.spec.name,
            spec=self.spec.file,
            table=self.target.path,
            operation=self.target.operation,
            instant=summary.instant,
        )
        if self.preflight():
            return summary
        with in_flight(self.table, summary.instant, "run"):  # clean keeps this run's files
            while True:
                try:
                    reached_commit = self.ingest()
                    break
                except UnreadableFileError as bad:
                    self.skip(bad)  # or raise: the run stops with the file named
        summary.files_skipped = [
            {"source": b.source, "path": b.path, "reason": b.reason} for b in self.skipped.values()
        ]
        if reached_commit:
            self.after_commit()
        summary.stage_seconds = self.stages.seconds
        log.info("run_finished", **{k: v for k, v in summary.to_dict().items() if k != "run_id"})
        return summary

    def preflight(self) -> bool:
        """Checks that cost nothing to the table and start no JVM; True when the batch is
        already committed and there is nothing to do."""
        check_automatic_expansion(self.target)
        if self.target.merger:  # the user's class imports and builds, before Spark starts
            load_merger(self.target.merger)
        if self.target.table_type == "MERGE_ON_READ":
            check_log_writable(self.table, "a MERGE_ON_READ table")
        self.snapshot = open_table(self.table)
        quarantine = self.target.quarantine
        if quarantine and open_table(quarantine.path) is None:
            check_new_table_location(locate(quarantine.path), "target.quarantine.path")
        if self.snapshot is None:
            check_new_table_location(self.table, "target.path")
            return False
        check_table_settings(self.spec.file, self.target, self.snapshot.configuration)
        app_id = self.app_id
        if app_id and self.snapshot.table.transaction_version(app_id) is not None:
            log.info("batch_already_committed", batch_id=self.summary.batch_id)
            self.summary.batch_already_committed = True
            return True
        return False

    @property
    def app_id(self) -> str | None:
        batch_id = self.summary.batch_id
        return batch_app_id(self.spec, batch_id) if batch_id else None

    def skip(self, bad: UnreadableFileError) -> None:
        """Go on without an unreadable file where its source says so; else stop."""
        if not bad.skippable or bad.path in self.skipped:
            raise bad
        if len(self.skipped) >= MAX_SKIPPED_FILES:
            raise UserError(
                f"more than {MAX_SKIPPED_FILES} input files cannot be read (the last: "
                f"{bad.path}: {bad.reason}); each costs a new pass over the batch, so the run "
                "stops here: repair or remove them"
            ) from bad
        log.warning("file_skipped", source=bad.source, path=bad.path, reason=bad.reason)
        self.skipped[bad.path] = bad

    def ingest(self) -> bool:
        """Sources to commit; True when the run got to its commit stage."""
        spec, summary, stages = self.spec, self.summary, self.stages
        with stages.stage("sources"):
            points = starting_points(spec, self.snapshot, self.checkpoint, self.ignore_checkpoint)
            plans = plan_sources(spec, points, skip=frozenset(self.skipped))
        self.points = points
        summary.checkpoint_origin = (
            points.describe() if points.by_source or self.checkpoint else None
        )
        if nothing_new(plans):
            if self.snapshot is not None and points.origin.replaces_the_tables:
                _commit_checkpoints_only(spec, summary, self.snapshot, plans, points)
            _nothing_new(summary, plans, stages)
            return False
        on_s3 = sources_on_s3(spec)
        with stages.stage("start"):
            jars = driver_jars(spec.sources)
            if on_s3:
                jars += s3_connector.jars_to_add(on_s3[0], under_spark_submit())
            if automatic(self.target):
                jars += table_reading_jars(self.table)
            self.spark = self.spark or spark_session(
                spec.spark, spec.name, self.console_progress, jars=list(dict.fromkeys(jars))
            )
            if on_s3:
                s3_connector.enable(self.spark, on_s3[1].settings, on_s3[0])
        with stages.stage("sources"):
            self.plans = plan_database_reads(self.spark, plans)
        if nothing_new(self.plans):  # a JDBC source knows only once it has asked the database
            _nothing_new(summary, self.plans, stages)
            return False
        with reading(spec.sources):
            return self._batch_to_commit()

    def _batch_to_commit(self) -> bool:
        spec, target, summary, stages = self.spec, self.target, self.summary, self.stages
        spark = self.spark
        assert spark is not None
        with stages.stage("plan"):
            read = read_input(spark, spec, self.plans)
            batch = _without_meta_columns(read.batch)
            summary.sources = {p.source.name: p.summary() for p in self.plans}
            _check_operation_fields(batch.schema, target, columns_of(spec))
            check_feed_columns(batch.schema, target)
            check_expectations(batch, spec)
            input_columns = batch.columns
            batch = with_history_columns(batch, target)
            schema = _plan_schema(batch, target, self.snapshot)
            layout = table_layout(self.snapshot, target)
            judged = _pinned(
                add_malformed(
                    add_verdicts(add_key_columns(batch, target, layout), spec), read.malformed
                ),
                reads_database=any(s.format == "jdbc" for s in spec.sources),
            )
        try:
            if single_pass(target):
                data = schema.data_columns
                why_not = why_spark_sends_rows(spec, batch, schema.file_schema, data)
                summary.rows_from = f"Spark ({why_not})" if why_not else "the source files"
                log.info("bulk_rows_from", source=summary.rows_from)
                self._bulk_insert(judged, input_columns, schema, None if why_not else tuple(data))
            else:
                self._merge_batch(judged, input_columns, schema)
        finally:
            judged.unpersist()
        return True

    def _merge_batch(self, judged: DataFrame, input_columns: list[str], schema: SchemaPlan) -> None:
        """Count the batch per bucket, then merge it into the buckets it touches. A small
        batch is collected whole instead, and counted on the driver (ops/merge.py
        one_pass_frame): one Spark job where there would be two."""
        spark, target, stages = self.spark, self.target, self.stages
        assert spark is not None
        collected: pa.Table | None = None
        with stages.stage("keys"):
            small = one_pass_frame(judged, target, schema, self.summary.instant)
            if small is None:
                groups, verdicts = _touched_groups(judged)
            else:
                collected, groups, verdicts = split_verdicts(small.toArrow())
                log.info("batch_collected", rows=verdicts.rows_read)
        self._judge(judged, input_columns, verdicts, groups)
        keyed = judged.where(F.col(FATE).isNull())  # the rows to write
        with writing(target.path):
            try:
                self._write_and_commit(keyed, schema, groups, collected)
            except BaseException:
                remove_uncommitted(spark, self.table, self.summary.instant)
                raise

    def _bulk_insert(
        self,
        judged: DataFrame,
        input_columns: list[str],
        schema: SchemaPlan,
        source_columns: tuple[str, ...] | None,
    ) -> None:
        """bulk_insert without filter_dupes: one pass over the input and no shuffle; each
        task writes its rows' buckets and counts the rows set aside, then the verdicts are
        enforced before the commit (runner/write/bulk_writer.py). With `source_columns`, the
        tasks read those columns of the rows from the source files themselves."""
        spark, target, stages, summary = self.spark, self.target, self.stages, self.summary
        assert spark is not None
        occupied = {pp for pp, _ in self.snapshot.files_by_group()} if self.snapshot else set()
        with writing(target.path):
            try:
                with stages.stage("write"):
                    job = BulkJob(
                        self.table,
                        summary.instant,
                        schema.file_schema,
                        frozenset(occupied),
                        faults.requested(),
                        ParquetRows(source_columns) if source_columns else None,
                    )
                    frame = bulk_keys(judged) if source_columns else bulk_rows(judged, schema)
                    results = frame.mapInArrow(job, _struct(BULK_RESULT_SCHEMA)).collect()
                files = [r for r in results if r.fate is None]
                log.info("files_written", files=len(files), bytes=sum(r.size for r in files))
                _refuse_occupied({r.rule for r in results if r.fate == OCCUPIED})
                groups, verdicts = bucket_counts_and_verdicts(
                    (r.partition_path, r.bucket, r.fate, r.rule, r.rows) for r in results
                )
                self._judge(judged, input_columns, verdicts, groups)
                self._quarantine_skipped()
                with stages.stage("commit"):
                    try:
                        self._commit(self.snapshot, schema, files, {})
                    except BucketClash as clash:
                        raise CommitConflictError(
                            f"another writer wrote into this bulk_insert's partitions meanwhile "
                            f"(version {clash.latest.version}); bulk_insert writes only into "
                            "empty partitions, so nothing of this run was committed"
                        ) from clash
            except BaseException:
                remove_uncommitted(spark, self.table, summary.instant)
                raise

    def _judge(
        self,
        judged: DataFrame,
        input_columns: list[str],
        verdicts: Verdicts,
        groups: dict[Group, int],
    ) -> None:
        """Fail the run on rejected rows past what the spec allows; quarantine the rest."""
        spec, target, summary, stages = self.spec, self.target, self.summary, self.stages
        summary.rows_read = verdicts.rows_read
        enforce(judged, spec, verdicts)
        summary.rows_dropped = verdicts.count("drop")
        summary.rows_quarantined = verdicts.count("quarantine")
        summary.rejected_by_rule = verdicts.by_rule
        faults.maybe_fail("keyed")
        if summary.rows_quarantined:
            assert target.quarantine is not None, "enforce() fails the run without one"
            with stages.stage("quarantine"), writing(target.quarantine.path):
                context = self._quarantine_context()
                rows = quarantine_rows(judged, input_columns, context).toArrow()
                self._append_quarantine(rows)
        log.info(
            "batch_keyed",
            rows=summary.rows_read,
            buckets=len(groups),
            partitions=len({pp for pp, _ in groups}),
        )

    def _write_and_commit(
        self,
        keyed: DataFrame,
        schema: SchemaPlan,
        groups: dict[Group, int],
        collected: pa.Table | None,
    ) -> None:
        """Write the touched buckets, then commit; when another writer committed first on
        the same buckets, merge those again on its version (up to target.commit_retries).
        `collected`: the rows of `keyed`, when the batch was collected already."""
        target, stages = self.target, self.stages
        snapshot = self.snapshot
        stored_files = _stored_files(snapshot, groups, target)
        self._choose_merge_place(keyed, groups, stored_files)
        with stages.stage("write"):
            results = self._write(keyed, schema, groups, stored_files, collected)
        self._quarantine_skipped()
        for attempt in range(target.commit_retries + 1):
            try:
                with stages.stage("commit"):
                    self._commit(snapshot, schema, results, stored_files)
                return
            except BucketClash as clash:
                if attempt == target.commit_retries:
                    raise CommitConflictError(
                        f"{clash}; re-merged {attempt} time(s), as target.commit_retries "
                        "allows; nothing of this run was committed: run it again"
                    ) from clash
                snapshot = clash.latest
                _refuse_new_columns(snapshot, schema)
                with stages.stage("remerge"):
                    results = self._remerge(keyed, schema, groups, stored_files, results, clash)

    def _choose_merge_place(
        self,
        keyed: DataFrame,
        groups: Mapping[Group, int],
        stored_files: Mapping[Group, list[DataFile]],
    ) -> None:
        """On the driver for a small batch, else in a Spark job; said in the run summary."""
        spark, summary = self.spark, self.summary
        assert spark is not None
        rows = sum(groups.values())
        stored_bytes = sum(f.size for files in stored_files.values() for f in files)
        master = spark.sparkContext.master or ""
        why_not = why_not_on_driver(self.target, keyed.schema, rows, stored_bytes, master)
        self.on_driver = why_not is None
        summary.merged_on = (
            f"the driver ({rows:,} rows, {self._driver_threads()} threads)"
            if why_not is None
            else f"Spark executors ({why_not})"
        )
        log.info("merge_place", place=summary.merged_on)

    def _driver_threads(self) -> int:
        assert self.spark is not None
        return max(1, min(os.cpu_count() or 1, self.spark.sparkContext.defaultParallelism))

    def _write(
        self,
        keyed: DataFrame,
        schema: SchemaPlan,
        groups: Mapping[Group, int],
        stored_files: Mapping[Group, list[DataFile]],
        collected: pa.Table | None = None,
    ) -> list[Row]:
        """A new file for each bucket of `groups` whose rows change; one result row each.
        A merge on the driver takes the `collected` rows of `keyed` when it has them."""
        spark, target, instant = self.spark, self.target, self.summary.instant
        assert spark is not None
        file_ids = {
            g: stored_files[g][0].file_id if g in stored_files else new_file_id(g[1])
            for g in groups
        }
        incoming = incoming_rows(keyed, target, schema, instant)
        request = WriteRequest(
            self.table,
            instant,
            schema.file_schema,
            file_ids,
            stored={g: stored_files[g] for g in groups if g in stored_files},
            merge=merge_settings(target),
            fault=faults.requested(),
        )
        job = self.write_strategy.job(request)
        self.write_rounds += 1
        if self.on_driver:
            if collected is None:
                collected = driver_frame(incoming, schema).toArrow()
            results = self._merge_on_driver(job, collected, stored_files)
        else:
            frame = write_frame(
                incoming,
                target,
                schema,
                partitions=max(1, min(len(groups), _shuffle_partitions(spark))),
            )
            try:
                results = frame.mapInArrow(job, _struct(RESULT_SCHEMA)).collect()
            except Exception as failure:
                theirs = merger_error_in(failure)  # the user's merger, in a Spark task
                if theirs is None:
                    raise
                raise theirs from failure
        written = [r for r in results if r.path]
        log.info("files_written", files=len(written), bytes=sum(r.size for r in written))
        return results

    def _merge_on_driver(
        self,
        job: ExecutorJob,
        collected: pa.Table,
        stored_files: Mapping[Group, list[DataFile]],
    ) -> list[Row]:
        """The batch collected as Arrow (ops/merge.py driver_frame), its winners picked and
        `job` run on driver threads, buckets dealt by their stored bytes
        (runner/write/driver_merge.py)."""
        target = self.target
        rows = mark_candidates(collected, target.precombine_field, dedupes(target))
        sizes = {g: sum(f.size for f in files) for g, files in stored_files.items()}
        results = write_on_driver(
            job, rows, self._driver_threads(), self.write_rounds - 1, lambda g: sizes.get(g, 0)
        )
        return [Row(**r) for r in results]

    def _remerge(
        self,
        keyed: DataFrame,
        schema: SchemaPlan,
        groups: dict[Group, int],
        stored_files: dict[Group, list[DataFile]],
        results: list[Row],
        clash: BucketClash,
    ) -> list[Row]:
        """Another writer committed first on buckets this run rewrites: merge this batch
        again with those buckets as they are now (its changes come first, in commit order)."""
        again = {g: groups[g] for g in clash.buckets if g in groups}
        log.info("remerge", buckets=len(again), on_version=clash.latest.version)
        latest = _stored_files(clash.latest, again, self.target)
        for group in again:
            stored_files.pop(group, None)
            if group in latest:
                stored_files[group] = latest[group]
        keys = [f"{pp}\x00{bucket}" for pp, bucket in again]
        subset = keyed.where(
            F.concat_ws("\x00", F.col(PARTITION_PATH), F.col(BUCKET).cast("string")).isin(keys)
        )
        redone = self._write(subset, schema, again, stored_files)
        superseded = [
            path
            for r in results
            if (r.partition_path, r.bucket) in again
            for path in (r.path, r.dv_path)
            if path
        ]
        remove_files(self.table, superseded)
        return [r for r in results if (r.partition_path, r.bucket) not in again] + redone

    def _commit(
        self,
        snapshot: TableSnapshot | None,
        schema: SchemaPlan,
        results: Sequence[Row],
        stored_files: Mapping[Group, list[DataFile]],
    ) -> None:
        """One Delta version: the new files, the replaced ones, the checkpoints."""
        spec, target, summary, points = self.spec, self.target, self.summary, self.points
        assert points is not None
        checkpoints, moved = _checkpoints(self.plans, points)
        new_files = [NewFile(r.path, r.size, r.stats) for r in results if r.path]
        changed = [r for r in results if r.changed]
        removed = replaced_files(results, stored_files)
        deletion_vectors = new_deletion_vectors(results, stored_files)
        summary.inserted = sum(r.insert for r in results)
        summary.updated = sum(r.update for r in results)
        summary.deleted = sum(r.deleted for r in results)
        summary.duplicates_dropped = sum(r.duplicate for r in results)
        summary.stale_skipped = sum(r.stale for r in results)
        summary.deletes_missing = sum(r.delete_missing for r in results)
        if target.cdc is not None:
            summary.scd_type = target.scd.type
            summary.late_events = sum(r.late for r in results)
            summary.superseded_events = sum(r.superseded for r in results)
            summary.versions_closed = sum(r.closed for r in results)
        summary.files_added = len(new_files)
        summary.files_removed = len(removed)
        summary.bytes_written = sum(f.size for f in new_files) + sum(r.dv_size for r in results)
        summary.buckets_touched = len({(r.partition_path, r.bucket) for r in changed})
        summary.table_type = target.table_type
        summary.buckets_rewritten = sum(
            1 for r in changed if r.rewritten and (r.partition_path, r.bucket) in stored_files
        )
        summary.buckets_with_deletion_vectors = sum(1 for r in changed if r.deletion_vectors)
        summary.partitions_touched = len({r.partition_path for r in changed})
        faults.maybe_fail("before_commit")
        if not changed and not moved:
            log.info("nothing_to_commit")
            return
        if snapshot is None:
            create_table(
                self.table,
                spec.name,
                schema.file_schema,
                table_settings(target),
                deletion_vectors=target.table_type == "MERGE_ON_READ",
            )
            snapshot = open_table(self.table)
            assert snapshot is not None
        else:
            # a re-merge after another writer's commit may find the columns already added
            have = set(snapshot.arrow_schema().names)
            missing = [f for f in schema.new_columns if f.name not in have]
            if missing:
                add_columns(snapshot.table, missing)
                summary.columns_added = [f.name for f in missing]
        metadata: dict[str, Any] = {
            "pipeline": spec.name,
            "run_id": summary.run_id,
            "instant": summary.instant,
            "operation": target.operation,
            "batch_id": summary.batch_id,
            "rows_read": summary.rows_read,
            "rows_dropped": summary.rows_dropped,
            "rows_quarantined": summary.rows_quarantined,
            "inserted": summary.inserted,
            "updated": summary.updated,
            "deleted": summary.deleted,
            "files_added": summary.files_added,
            "files_removed": summary.files_removed,
            "bytes_written": summary.bytes_written,
            "buckets_with_deletion_vectors": summary.buckets_with_deletion_vectors,
        }
        if checkpoints is not None:
            # in the same commit as the data: a crash can neither skip nor re-read input
            metadata[CHECKPOINT_FIELD] = checkpoints
            metadata["checkpoint_origin"] = points.origin
        summary.version = commit_files(
            snapshot,
            schema.file_schema,
            new_files,
            removed,
            {(r.partition_path, r.bucket) for r in changed},
            metadata,
            self.app_id,
            still_valid=_checkpoint_guard(spec, points),
            deletion_vectors=deletion_vectors,
        )
        faults.maybe_fail("after_commit")
        log.info(
            "commit_done",
            version=summary.version,
            files_added=summary.files_added,
            files_removed=summary.files_removed,
        )

    def _quarantine_skipped(self) -> None:
        """Name the skipped files in the quarantine table, once every read of the batch is
        done (a file found unreadable later would start the batch again)."""
        if not self.skipped or self.target.quarantine is None:
            return
        context = self._quarantine_context()
        bad = list(self.skipped.values())
        rows = pa.table(
            {
                **{f"_{k}": [None if v is None else str(v)] * len(bad) for k, v in context.items()},
                "_rule": ["unreadable_file"] * len(bad),
                "_reason": [b.reason for b in bad],
                "_record": [json.dumps({"source": b.source, "file": b.path}) for b in bad],
            },
            schema=pa.schema([(n, pa.string()) for n in QUARANTINE_COLUMNS]),
        )
        self._append_quarantine(rows)

    def _quarantine_context(self) -> dict[str, Any]:
        """The run's context on each quarantined row (QUARANTINE_COLUMNS before _rule)."""
        summary = self.summary
        return {
            "pipeline": self.spec.name,
            "run_id": summary.run_id,
            "instant": summary.instant,
            "batch_id": summary.batch_id,
        }

    def _append_quarantine(self, rows: pa.Table) -> None:
        """Append to the quarantine table before the target's commit, so nothing is lost;
        with a batch id, in the same app transaction (a re-run appends nothing twice)."""
        quarantine = self.target.quarantine
        assert quarantine is not None, "enforce() fails the run without a quarantine"
        metadata = {**self._quarantine_context(), "table": self.target.path}
        append_quarantine(quarantine.path, rows, metadata, self.app_id)

    def after_commit(self) -> None:
        """Compaction, expansion and cleaning the spec asks for once a version is committed."""
        summary, target = self.summary, self.target
        if summary.version is None:
            return
        assert self.spark is not None
        if target.table_type == "MERGE_ON_READ" and target.compaction.after_commit:
            with self.stages.stage("compact"):
                compacted = compact_if_due(self.spark, self.spec)
            if compacted:
                summary.compaction = compacted.to_dict()
        expanded = expand_if_due(self.spark, self.spec)
        if expanded:
            summary.expansion = expanded.to_dict()
            self.stages.seconds["expand"] = expanded.seconds
        if target.cleaning.after_commit:
            with self.stages.stage("clean"):
                summary.files_cleaned = len(clean_table(self.spec).files)


def _nothing_new(summary: RunSummary, plans: list[SourcePlan], stages: Stages) -> None:
    summary.sources = {p.source.name: p.summary() for p in plans}
    summary.nothing_new = True
    summary.stage_seconds = stages.seconds
    log.info("nothing_new", sources=list(summary.sources))


def _commit_checkpoints_only(
    spec: PipelineSpec,
    summary: RunSummary,
    snapshot: TableSnapshot,
    plans: list[SourcePlan],
    points: StartingPoints,
) -> None:
    """A chosen start with nothing to read yet is still recorded, so the next run keeps it."""
    checkpoints, _ = _checkpoints(plans, points)
    metadata = {
        "pipeline": spec.name,
        "run_id": summary.run_id,
        "instant": summary.instant,
        "operation": "checkpoint",
        CHECKPOINT_FIELD: checkpoints,
        "checkpoint_origin": points.origin,
    }
    summary.version = commit_files(
        snapshot,
        snapshot.arrow_schema(),
        [],
        [],
        set(),
        metadata,
        still_valid=_checkpoint_guard(spec, points),
    )
    log.info("checkpoints_recorded", version=summary.version, origin=points.origin)


def _checkpoint_guard(
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


def _checkpoints(
    plans: list[SourcePlan], points: StartingPoints
) -> tuple[dict[str, Any] | None, bool]:
    """The checkpoints to record with this commit, and whether any moved on."""
    incremental = [p for p in plans if p.source.incremental]
    if not incremental:
        return None, False
    recorded = dict(points.by_source) if points.origin == Origin.TABLE else {}
    moved = points.origin != Origin.TABLE  # a reset or a chosen start is worth recording
    for p in incremental:
        if p.until is not None:
            moved = moved or recorded.get(p.source.name) != p.until
            recorded[p.source.name] = p.until
    return recorded, moved


def table_layout(snapshot: TableSnapshot | None, target: Target) -> BucketLayout:
    """The bucket counts writes use: the table's own (expansion changes them), or the
    spec's count for a table this run creates."""
    if snapshot is None:
        return BucketLayout(target.index.buckets)
    return BucketLayout.from_configuration(snapshot.configuration)


def _refuse_new_columns(latest: TableSnapshot, schema: SchemaPlan) -> None:
    """A re-merge rewrites the other writer's rows with this run's columns: if it added
    columns meanwhile, their values would be lost, so the run stops instead."""
    added = [n for n in latest.arrow_schema().names if n not in schema.file_schema.names]
    if added:
        raise CommitConflictError(
            f"another writer committed version {latest.version} with new column(s) "
            f"{', '.join(added)} in buckets this run rewrites; nothing of this run was "
            "committed: run it again (its input must then have those columns)"
        )


def _pinned(keyed: DataFrame, reads_database: bool = False) -> DataFrame:
    """The batch is read twice (bucket counts, then the write); both passes must agree.

    A file source's listing is fixed when its DataFrame is created, so a deterministic plan
    gives the same rows twice, and caching it would cost more than reading it again (about
    3 s per million rows here). A non-deterministic plan (rand(), now(), ...) is cached.
    """
    if reads_database:
        # a live table changes between the passes (and a re-merge): read it once
        log.info("batch_cached", reason="a JDBC source")
        return keyed.persist()
    if keyed._jdf.queryExecution().analyzed().deterministic():
        return keyed
    log.info("batch_cached", reason="the transform is not deterministic")
    return keyed.persist()


def _without_meta_columns(batch: DataFrame) -> DataFrame:
    """A batch read from a runner table brings meta columns; this run computes its own."""
    dropped = [c for c in batch.columns if c in META_COLUMNS]
    if dropped:
        log.info("input_meta_columns_replaced", columns=dropped)
    return batch.drop(*dropped)


def _check_operation_fields(schema: StructType, target: Target, where: str) -> None:
    """Every field the spec names is among the batch's columns (`where` says whose they
    are), and the ordering and delete-marker columns have types that mean what they say."""
    names = schema.fieldNames()
    reserved = [n for n in names if n.startswith(RESERVED_PREFIX)]
    if reserved:
        raise UserError(
            f"input column(s) {', '.join(reserved)} use the prefix {RESERVED_PREFIX!r}, which "
            "the runner keeps for itself; rename them in the transform"
        )
    check_fields(schema, target.record_key, "record key", where)
    check_fields(schema, target.key_generator.partition_fields, "partition", where)
    check_fields(schema, target.index.hash_fields, "index hash", where)
    if target.precombine_field and target.operation != "delete":
        role = "cdc.sequence_by" if target.cdc else "precombine"
        if target.precombine_field not in names:
            raise UserError(missing_field(role, target.precombine_field, names, where))
        _refuse_text_order(schema, target)
    if target.delete_marker:
        if target.delete_marker not in names:
            raise UserError(missing_field("delete_marker", target.delete_marker, names, where))
        if not isinstance(schema[target.delete_marker].dataType, BooleanType):
            raise UserError(
                f"delete_marker '{target.delete_marker}' must be a boolean column, not "
                f"{schema[target.delete_marker].dataType.simpleString()}; cast it in the transform"
            )


def _refuse_text_order(schema: StructType, target: Target) -> None:
    """A string ordering column compares as text ('9' above '10'): a newer record would lose
    to an older one without a word. It is used only when the spec says text order is meant."""
    column = target.precombine_field
    assert column is not None
    kind = schema[column].dataType
    if target.precombine_string_order or not isinstance(kind, StringType | CharType | VarcharType):
        return
    setting, rows = (
        (f"cdc.sequence_by '{column}'", "events")
        if target.cdc
        else (f"precombine_field '{column}'", "records")
    )
    raise UserError(
        f"{setting} is a {kind.simpleString()} column, so {rows} would be ordered as text "
        f"('9' above '10'); nothing was written. Declare its type: in the source's schema "
        f"(`{column} long`, `{column} timestamp`, ...) or with CAST({column} AS BIGINT) AS "
        f"{column} in transform.sql; or set target.precombine_string_order: true if text "
        "order is meant"
    )


def _plan_schema(batch: DataFrame, target: Target, snapshot: TableSnapshot | None) -> SchemaPlan:
    table_schema = snapshot.arrow_schema() if snapshot else None
    if target.operation == "delete":
        if table_schema is None:
            raise UserError(f"operation delete needs an existing table; none at {target.path}")
        return plan_schema(table_schema, table_schema, target.path)
    data = batch.drop(*not_stored(target))
    incoming = to_arrow_schema(data.schema, timestamp_utc=True)
    return plan_schema(incoming, table_schema, target.path)


def _touched_groups(judged: DataFrame) -> tuple[dict[Group, int], Verdicts]:
    """Rows per (partition path, bucket) to write, and the rejected rows per fate and rule,
    from one aggregation: metadata-sized, fine on the driver."""
    rows = judged.groupBy(PARTITION_PATH, BUCKET, FATE, RULE).count().collect()
    return bucket_counts_and_verdicts(
        (r[PARTITION_PATH], r[BUCKET], r[FATE], r[RULE], r["count"]) for r in rows
    )


def _stored_files(
    snapshot: TableSnapshot | None, groups: dict[Group, int], target: Target
) -> dict[Group, list[DataFile]]:
    """The stored files of the buckets this batch touches (none for bulk_insert)."""
    if snapshot is None:
        return {}
    by_group = snapshot.files_by_group()
    if target.operation == "bulk_insert":
        _refuse_occupied({pp for pp, _ in groups} & {pp for pp, _ in by_group})
        return {}
    return {g: by_group[g] for g in groups if g in by_group}


def _refuse_occupied(partitions: Iterable[str]) -> None:
    """bulk_insert never merges: a batch partition that already holds data is an error."""
    busy = sorted(partitions)
    if busy:
        shown = ", ".join(repr(p) for p in busy[:5])
        raise UserError(
            f"bulk_insert writes only into empty partitions, and {len(busy)} of this batch's "
            f"partitions already hold data ({shown}); use operation insert or upsert"
        )


def _shuffle_partitions(spark: SparkSession) -> int:
    return int(spark.conf.get("spark.sql.shuffle.partitions") or "8")


def _struct(schema: pa.Schema) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
