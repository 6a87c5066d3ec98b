"""One pipeline run: spec -> plan -> Spark job -> files -> one Delta commit, as stages.

    preflight      (preflight.py)     settings, merger class, stored settings, batch id; no JVM
    sources        (inputs.py)        starting points, source plans, the Spark session
    plan           (batch.py)         the batch read, checked, keyed and judged (a Spark plan)
    keys           (judge.py)         rows per touched bucket, verdicts enforced, quarantine
    rewrite        (rewrite_stage.py) schema_evolution full: renames, drops, widenings
                                      rewritten into the table's files, a version of its own
    bucket plan    (bucket_plan.py)   each touched bucket's stored files, the merge's place
    write          (write_stage.py)   the new files, one result row per bucket
    commit         (commit_stage.py)  one Delta version; a re-merge when another writer won
    after commit   (after_commit.py)  compaction, expansion, clean, catalog

Each stage takes what the stages before it returned (frozen values) and returns what the
next needs; a failure is logged and noted with its stage's name. The run summary is
assembled at the end from the stages' results (figures.py says where each figure comes
from). A run that fails before its commit leaves the table as it was and removes the
files it wrote.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import structlog
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from runner.actions.table_change import TableChange
from runner.delta.schema_rewrite import SchemaRewrite
from runner.delta.snapshot import TableSnapshot, open_table
from runner.delta.transaction import BucketClash
from runner.errors import CommitConflictError, UnreadableFileError, UserError
from runner.pipeline.after_commit import ServicesRun, after_commit
from runner.pipeline.batch import Batch, plan_batch, table_layout
from runner.pipeline.bucket_plan import plan_buckets, refuse_occupied
from runner.pipeline.commit_stage import (
    Committed,
    Prepared,
    Written,
    commit_checkpoints_only,
    commit_run,
    create_empty_table,
    log_commit,
    prepare_commit,
    unused_change_files,
)
from runner.pipeline.context import RunContext, RunOptions
from runner.pipeline.figures import BatchFigures, write_figures
from runner.pipeline.inputs import Inputs, plan_inputs
from runner.pipeline.judge import count_batch, judge, quarantine_skipped, verdict_figures
from runner.pipeline.open_key import with_stored_key, with_topic_key
from runner.pipeline.preflight import preflight
from runner.pipeline.quality import FATE, bucket_counts_and_verdicts
from runner.pipeline.remerge import Remerge
from runner.pipeline.rewrite_stage import pending_rewrite, rewrite_before_write
from runner.pipeline.winners import single_pass
from runner.pipeline.write_stage import MergeInput, write_buckets, write_bulk
from runner.progress import Progress
from runner.sources.bad_input import reading
from runner.sources.file_rows import why_spark_sends_rows
from runner.spec.model import PipelineSpec
from runner.storage.in_flight import in_flight
from runner.summary import RunSummary, VerdictFigures
from runner.write.bulk_writer import OCCUPIED, places_overflow
from runner.write.uncommitted import remove_files

log = structlog.get_logger(__name__)

# Each unreadable file skipped costs a new pass over the batch: past this many, stop.
MAX_SKIPPED_FILES = 20


def run_pipeline(
    spec: PipelineSpec, spark: SparkSession | None = None, options: RunOptions | None = None
) -> RunSummary:
    """One run of the pipeline: at most one commit of data (and checkpoints) to the table.

    `options` carries the caller's choices (runner/pipeline/context.py RunOptions): a batch
    id, checkpoints that replace the table's, a dry run, and the run's identity when the
    caller records it (runner/observe/observed.py).
    """
    ctx = RunContext.start(spec, options or RunOptions())
    # attached here, so a Stages the caller gives (RunOptions.stages) shows progress too
    with Progress.start("run", spec.name, tty=ctx.options.console_progress) as progress:
        progress.follow(ctx.stages)
        return _run(ctx, spark)


def _run(ctx: RunContext, spark: SparkSession | None) -> RunSummary:
    ctx = with_stored_key(ctx)
    spec = ctx.spec
    log.info(
        "run_started",
        pipeline=spec.name,
        spec=spec.file,
        table=spec.target.path,
        operation=spec.target.operation,
        instant=ctx.instant,
    )
    checked = preflight(ctx)
    if checked.already_committed:
        return replace(_summary(ctx), batch_already_committed=True)
    # clean keeps this run's files; a dry run writes none under the table
    beating = nullcontext() if ctx.options.dry_run else in_flight(ctx.table, ctx.instant, "run")
    try:
        with beating:
            outcome = _ingest_skipping_unreadable(ctx, checked.snapshot, spark)
    finally:
        ctx.table.remove_scratch()
    services = ServicesRun()
    if outcome.committed is not None and outcome.committed.version is not None:
        assert outcome.spark is not None
        services = after_commit(with_stored_key(ctx, say=False), outcome.spark)
    summary = outcome.summary(ctx, services)
    log.info("run_finished", **{k: v for k, v in summary.to_dict().items() if k != "run_id"})
    return summary


@dataclass(frozen=True)
class Outcome:
    """What the stages from sources to commit produced."""

    inputs: Inputs
    spark: SparkSession | None
    skipped: tuple[UnreadableFileError, ...] = ()
    batch: BatchFigures | None = None  # the figures of the write stages
    committed: Committed | None = None  # None: the run did not get to its commit stage
    checkpoints_version: int | None = None  # nothing new, but chosen checkpoints recorded

    def summary(self, ctx: RunContext, services: ServicesRun) -> RunSummary:
        """The run's summary, assembled from the figures its stages gave."""
        committed = self.committed
        batch = self.batch or BatchFigures(VerdictFigures())
        return replace(
            _summary(ctx),
            version=committed.version if committed is not None else self.checkpoints_version,
            dry_run=ctx.options.dry_run,
            nothing_new=committed is None,
            inputs=self.inputs.figures(),
            verdicts=batch.verdicts,
            write=batch.write,
            columns_added=list(committed.columns_added) if committed is not None else [],
            schema_rewrites=list(batch.schema_rewrites),
            files_skipped=[
                {"source": b.source, "path": b.path, "reason": b.reason} for b in self.skipped
            ],
            rows_from=batch.rows_from,
            merged_on=batch.merged_on,
            **services.figures(),
        )


def _summary(ctx: RunContext) -> RunSummary:
    """The run's summary before its stages' figures: who ran, on what, when."""
    target = ctx.target
    return RunSummary(
        pipeline=ctx.spec.name,
        run_id=ctx.run_id,
        table=target.path,
        operation=target.operation,
        instant=ctx.instant,
        batch_id=ctx.options.batch_id,
        stage_seconds=ctx.stages.seconds,
    )


def _ingest_skipping_unreadable(
    ctx: RunContext, snapshot: TableSnapshot | None, spark: SparkSession | None
) -> Outcome:
    """The run from its sources to its commit, again without each unreadable file its
    source says to skip (on_bad_file: skip); any other stops the run with the file named."""
    skipped: dict[str, UnreadableFileError] = {}
    while True:
        try:
            return _ingest(ctx, snapshot, spark, skipped)
        except UnreadableFileError as bad:
            _skip(skipped, bad)
            spark = spark or SparkSession.getActiveSession()
            if snapshot is not None:  # the run's own schema rewrite may have committed
                snapshot = open_table(snapshot.location)


def _skip(skipped: dict[str, UnreadableFileError], bad: UnreadableFileError) -> None:
    """Go on without an unreadable file where its source says so; else stop."""
    if not bad.skippable or bad.path in skipped:
        raise bad
    if len(skipped) >= MAX_SKIPPED_FILES:
        raise UserError(
            f"more than {MAX_SKIPPED_FILES} input files cannot be read (the last: "
            f"{bad.path}: {bad.reason}); each costs a new pass over the batch, so the run "
            "stops here: repair or remove them"
        ) from bad
    log.warning("file_skipped", source=bad.source, path=bad.path, reason=bad.reason)
    skipped[bad.path] = bad


def _ingest(
    ctx: RunContext,
    snapshot: TableSnapshot | None,
    spark: SparkSession | None,
    skipped: dict[str, UnreadableFileError],
) -> Outcome:
    inputs = plan_inputs(ctx, snapshot, frozenset(skipped), spark)
    files_skipped = tuple(skipped.values())
    if inputs.nothing_new:
        recorded = None if ctx.options.dry_run else _record_start(ctx, snapshot, inputs)
        log.info("nothing_new", sources=[p.source.name for p in inputs.plans])
        return Outcome(inputs, inputs.spark, files_skipped, checkpoints_version=recorded)
    assert inputs.spark is not None
    ctx = with_topic_key(ctx, inputs.spark, inputs.plans)
    pending = pending_rewrite(ctx, snapshot)
    with reading(ctx.spec.sources):
        batch = plan_batch(ctx, inputs.spark, inputs.plans, snapshot, pending)
        try:
            stages = _bulk_insert if single_pass(ctx.target) else _merge
            figures, committed = stages(ctx, _ToWrite(inputs, batch, snapshot, skipped, pending))
        finally:
            batch.release()
    return Outcome(inputs, inputs.spark, files_skipped, figures, committed)


def _record_start(ctx: RunContext, snapshot: TableSnapshot | None, inputs: Inputs) -> int | None:
    """The version recording the starting points of a run that found nothing to read, when
    the next run must keep them: a start taken from what a source holds now (a Kafka
    source's first run at `latest`; the table is created for it when there is none), or a
    start the user chose, when the listing found nothing (a JDBC source's empty answer is
    not recorded: it has no value to record)."""
    fixed = inputs.starts_fixed_now
    if fixed:
        assert inputs.spark is not None, "a Kafka source's offsets come through Spark"
        if snapshot is None:
            ctx = with_topic_key(ctx, inputs.spark, inputs.plans)
            with reading(ctx.spec.sources):  # an empty batch: the table's schema
                batch = plan_batch(ctx, inputs.spark, inputs.plans, None)
            batch.release()
            snapshot = create_empty_table(ctx, batch.schema)
        log.info("starting_points_fixed", sources=fixed)
        return commit_checkpoints_only(ctx, snapshot, inputs)
    if snapshot is not None and inputs.spark is None and inputs.points.origin.replaces_the_tables:
        return commit_checkpoints_only(ctx, snapshot, inputs)
    return None


@dataclass(frozen=True)
class _ToWrite:
    """What the write paths start from."""

    inputs: Inputs
    batch: Batch
    snapshot: TableSnapshot | None
    skipped: dict[str, UnreadableFileError]
    pending: SchemaRewrite = field(default_factory=SchemaRewrite)  # rewritten before the write

    def rewritten(self, ctx: RunContext) -> tuple[_ToWrite, tuple[dict[str, Any], ...]]:
        """This run after the rewrite stage (schema_evolution full): on the rewritten table,
        its batch planned again; the rewrite's summary, if one ran."""
        snapshot, batch, done = rewrite_before_write(
            ctx, self.spark, self.snapshot, self.batch, self.pending
        )
        run = replace(self, snapshot=snapshot, batch=batch, pending=SchemaRewrite())
        return run, (done,) if done else ()

    @property
    def spark(self) -> SparkSession:
        assert self.inputs.spark is not None
        return self.inputs.spark


def _merge(ctx: RunContext, run: _ToWrite) -> tuple[BatchFigures, Committed]:
    """upsert, insert, delete (and bulk_insert with filter_dupes): count the batch per
    bucket, judge it, then merge it into the buckets it touches and commit; another
    writer's commit on the same buckets is answered by a re-merge (remerge.py)."""
    counted = count_batch(ctx, run.batch)
    judge(ctx, run.batch, counted.verdicts, counted.groups)
    run, rewrite = run.rewritten(ctx)
    batch = run.batch
    verdicts = BatchFigures(verdict_figures(counted.verdicts), schema_rewrites=rewrite)
    keyed = batch.judged.where(F.col(FATE).isNull())  # the rows to write
    merge = MergeInput(run.spark, keyed, batch.schema)
    change = _change(ctx, run)
    with change.guarded():
        try:
            plan = plan_buckets(run.spark, ctx.target, run.snapshot, counted.groups, keyed)
            with ctx.stage("write"):
                results = write_buckets(ctx, merge, plan, counted.collected)
            quarantine_skipped(ctx, run.skipped)
            remerge = Remerge(ctx, run.inputs, merge, plan, results)
            if ctx.options.dry_run:  # counted; the scratch files go with the run
                return remerge.figures(verdicts), _dry_run(batch)
            with ctx.stage("commit"):
                version, prepared = commit_run(
                    ctx,
                    change,
                    run.inputs,
                    lambda: prepare_commit(
                        ctx,
                        run.snapshot,
                        batch.schema,
                        run.inputs,
                        remerge.written,
                        remerge.figures(verdicts),
                    ),
                    remerge.resolver(verdicts),
                )
            figures = remerge.figures(verdicts)
            remove_files(ctx.table, unused_change_files(remerge.results, remerge.plan.stored))
            log_commit(version, figures)
            added = remerge.columns_added or (prepared.columns_added if prepared else ())
            return figures, Committed(version, added)
        except BaseException as failure:
            _note_rewrite(failure, rewrite)
            raise


def _change(ctx: RunContext, run: _ToWrite) -> TableChange:
    """The run's change of its table: its heartbeat is held from its first file to its
    after-commit services (`_run`), so the change holds none of its own."""
    return TableChange(
        ctx.table, "run", run.spark, instant=ctx.instant, heartbeat=False, shown=ctx.target.path
    )


def _note_rewrite(failure: BaseException, rewrite: tuple[dict[str, Any], ...]) -> None:
    """A failure after the run's schema rewrite committed says so: that version stays."""
    for done in rewrite:
        failure.add_note(
            f"the table's schema rewrite ({', '.join(done['changes'])}) was committed as "
            f"version {done['version']} before this failure; it changed no row, and the "
            "next run goes on from it"
        )


def _dry_run(batch: Batch) -> Committed:
    """Nothing committed; the summary lists the schema changes a run would make."""
    return Committed(None, tuple(c.describe() for c in batch.schema.changes))


def _bulk_insert(ctx: RunContext, run: _ToWrite) -> tuple[BatchFigures, Committed]:
    """bulk_insert without filter_dupes: one pass over the input and no shuffle; each task
    writes its rows' buckets and counts the rows set aside, then the verdicts are enforced
    before the commit. The tasks read the rows from the source files themselves when
    Spark need not send them."""
    batch, target, snapshot = run.batch, ctx.target, run.snapshot
    data = batch.schema.data_columns
    why_not = why_spark_sends_rows(
        ctx.spec, batch.transformed, batch.schema.file_schema, data
    ) or places_overflow(table_layout(snapshot, target).largest_modulus())
    rows_from = f"Spark ({why_not})" if why_not else "the source files"
    log.info("bulk_rows_from", source=rows_from)
    occupied = frozenset(pp for pp, _ in snapshot.files_by_group()) if snapshot else frozenset()
    rewrite: tuple[dict[str, Any], ...] = ()
    change = _change(ctx, run)
    with change.guarded():
        try:
            with ctx.stage("write"):
                columns = None if why_not else tuple(data)
                results = write_bulk(ctx, batch.judged, batch.schema, occupied, columns)
            files = [r for r in results if r.fate is None]
            log.info("files_written", files=len(files), bytes=sum(r.size for r in files))
            refuse_occupied({r.rule for r in results if r.fate == OCCUPIED})
            groups, verdicts = bucket_counts_and_verdicts(
                (r.partition_path, r.bucket, r.fate, r.rule, r.rows) for r in results
            )
            judge(ctx, batch, verdicts, groups)
            quarantine_skipped(ctx, run.skipped)
            run, rewrite = run.rewritten(ctx)
            batch, snapshot = run.batch, run.snapshot
            figures = BatchFigures(
                verdict_figures(verdicts),
                write_figures(files, {}, target),
                schema_rewrites=rewrite,
                rows_from=rows_from,
            )
            if ctx.options.dry_run:
                return figures, _dry_run(batch)
            with ctx.stage("commit"):
                written = Written(tuple(files), {})
                version, prepared = _commit_bulk(ctx, change, run, written, figures)
            log_commit(version, figures)
            return figures, Committed(version, prepared.columns_added if prepared else ())
        except BaseException as failure:
            _note_rewrite(failure, rewrite)
            raise


def _commit_bulk(
    ctx: RunContext, change: TableChange, run: _ToWrite, written: Written, figures: BatchFigures
) -> tuple[int | None, Prepared | None]:
    """A bulk_insert's commit: another writer's files in its buckets are a conflict, since
    it writes only into empty partitions."""
    schema, inputs = run.batch.schema, run.inputs
    try:
        return commit_run(
            ctx,
            change,
            inputs,
            lambda: prepare_commit(ctx, run.snapshot, schema, inputs, written, figures),
        )
    except BucketClash as clash:
        raise CommitConflictError(
            f"another writer wrote into this bulk_insert's partitions meanwhile "
            f"(version {clash.latest.version}); bulk_insert writes only into "
            "empty partitions, so nothing of this run was committed"
        ) from clash
