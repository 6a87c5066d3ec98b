"""The sources stage: what each source reads this run, and the Spark session to read it.

A chained source restored after this pipeline read what the restore undid is refused here
when the target cannot follow the undo (runner/sources/restored_source.py), before any read.

Nothing new (every incremental source is caught up) ends the run here, before a JVM starts
when the listing tells; a JDBC source knows only once Spark has asked its database, a
Kafka source once the driver has asked the brokers (through the client Spark loads).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from pyspark.sql import SparkSession

from runner.actions.expand import automatic
from runner.delta.snapshot import TableSnapshot
from runner.delta.spark_read import table_reading_jars
from runner.jvm import s3_connector
from runner.jvm.session import SMALL_INPUT_BYTES, spark_session, under_spark_submit
from runner.pipeline.context import Application, RunContext
from runner.sources.checkpoint import Origin, StartingPoints, starting_points
from runner.sources.kinds import kind_of, source_jars
from runner.sources.listing import local_bytes
from runner.sources.model import SourcePlan
from runner.sources.plan import nothing_new, plan_live_reads, plan_sources, sources_on_s3
from runner.sources.restored_source import refuse_undone_reads
from runner.spec.model import PipelineSpec, Target
from runner.storage.location import TableLocation, locate
from runner.summary import SourceFigures

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Inputs:
    points: StartingPoints
    plans: tuple[SourcePlan, ...]
    spark: SparkSession | None  # None when nothing new was found before Spark was needed
    checkpoint_given: bool  # --checkpoint chose where to start

    @property
    def nothing_new(self) -> bool:
        return nothing_new(list(self.plans))

    @property
    def starts_fixed_now(self) -> list[str]:
        """The sources whose start was taken from what they hold now (SourcePlan
        start_fixed_now): recorded even when nothing follows it."""
        return [p.source.name for p in self.plans if p.start_fixed_now]

    def figures(self) -> SourceFigures:
        """The run's figures this stage gives."""
        points = self.points
        return SourceFigures(
            checkpoint_origin=(
                points.describe()
                if points.by_source or self.checkpoint_given or points.into_rows
                else None
            ),
            sources={p.source.name: p.summary() for p in self.plans},
        )

    def checkpoints(self) -> tuple[dict[str, Any] | None, bool]:
        """The checkpoints to record with this run's commit, and whether any moved on."""
        incremental = [p for p in self.plans if p.source.incremental]
        if not incremental:
            return None, False
        points = self.points
        recorded = dict(points.by_source) if points.origin == Origin.TABLE else {}
        moved = points.origin != Origin.TABLE  # a reset or a chosen start is worth recording
        for p in incremental:
            if p.until is not None:
                moved = moved or recorded.get(p.source.name) != p.until
                recorded[p.source.name] = p.until
        return recorded, moved


def plan_inputs(
    ctx: RunContext,
    snapshot: TableSnapshot | None,
    skipped: frozenset[str],
    spark: SparkSession | None,
) -> Inputs:
    """Starting points and source plans (without the `skipped` unreadable files); Spark is
    started (or `spark` used) only when a source may have something new."""
    spec, options = ctx.spec, ctx.options
    given = bool(options.checkpoint)
    with ctx.stage("sources"):
        points = starting_points(spec, snapshot, options.checkpoint, options.ignore_checkpoint)
        plans = tuple(plan_sources(spec, points, skip=skipped))
        refuse_undone_reads(spec, snapshot, plans)
    if nothing_new(list(plans)):
        return Inputs(points, plans, None, given)
    with ctx.stage("start"):
        spark = _start_spark(ctx, spark, plans)
    with ctx.stage("sources"):
        plans = tuple(plan_live_reads(spark, list(plans)))
    return Inputs(points, plans, spark, given)


def _start_spark(
    ctx: RunContext, spark: SparkSession | None, plans: tuple[SourcePlan, ...]
) -> SparkSession:
    """The session with the jars this run needs (or the caller's, set up for S3 the same
    way); a run of a set starts the set's application (RunOptions.application)."""
    spec, shared = ctx.spec, ctx.options.application
    on_s3 = sources_on_s3(spec)
    if spark is None:
        row_sources = any(kind_of(p.source).text_records for p in plans)
        spark = spark_session(
            shared.settings if shared else spec.spark,
            shared.name if shared else spec.name,
            application_jars(shared) if shared else run_jars(spec, ctx.table),
            small_input(ctx.target, plans),
            row_sources,
        )
    if on_s3:
        s3_connector.enable(spark, on_s3[1].settings, on_s3[0])
    return spark


def run_jars(spec: PipelineSpec, table: TableLocation) -> list[str]:
    """The jars a run of `spec` needs: JDBC drivers, the S3 connector, and the Delta reader
    an automatic expansion uses; each once."""
    on_s3 = sources_on_s3(spec)
    jars = source_jars(spec.sources, under_spark_submit())
    if on_s3:
        jars += s3_connector.jars_to_add(on_s3[0], under_spark_submit())
    if automatic(spec.target):
        jars += table_reading_jars(table)
    return list(dict.fromkeys(jars))


def application_jars(application: Application) -> list[str]:
    """The jars every spec of the application needs, each once."""
    jars = [j for s in application.specs for j in run_jars(s, locate(s.target.path))]
    return list(dict.fromkeys(jars))


def small_input(target: Target, plans: Sequence[SourcePlan]) -> bool:
    """The run's Spark jobs are known to be small before Spark starts: local files of at
    most SMALL_INPUT_BYTES, merged on the driver, no automatic expansion (a job over the
    whole table) after the commit."""
    if target.driver_merge.max_rows == 0 or automatic(target):
        return False
    paths: list[str] = []
    for plan in plans:
        if not kind_of(plan.source).lists_files:
            return False
        paths += plan.paths if plan.paths is not None else [plan.source.path]
    return local_bytes(paths, SMALL_INPUT_BYTES) is not None
