"""The rewrite stage (schema_evolution full): the table's files rewritten in a new schema,
as a version of its own, before the run writes its batch (runner/services/schema_rewrite.py).

Renames and drops (target.rename, target.drop) are known from the spec and the table: they
are rewritten before the batch is planned, which names the new columns. Widenings are known
once the batch's schema is: they are rewritten after the plan stage, and the batch's schema
plan is made again against the rewritten table (its widenings are then done).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pyspark.sql import SparkSession

from runner.delta.schema_rewrite import pending_renames_and_drops, widenings
from runner.delta.snapshot import TableSnapshot
from runner.errors import UserError
from runner.pipeline.batch import Batch, plan_table_schema
from runner.pipeline.context import RunContext
from runner.services.schema_rewrite import rewrite_table


def rewrite_renamed_and_dropped(
    ctx: RunContext, spark: SparkSession, snapshot: TableSnapshot | None
) -> tuple[TableSnapshot | None, dict[str, Any] | None]:
    """The table with the spec's pending renames and drops, and what the rewrite did."""
    target = ctx.target
    if snapshot is None or target.schema_evolution != "full":
        return snapshot, None
    rewrite = pending_renames_and_drops(snapshot, target)
    if not rewrite:
        return snapshot, None
    if ctx.options.dry_run:
        raise UserError(
            f"a dry run cannot plan this batch: the run first rewrites the table's files "
            f"({'; '.join(rewrite.describe())}, target.rename and target.drop) and plans the "
            f"batch against the result. `runner validate {ctx.spec.file} --against "
            f"{target.path}` lists the changes without Spark; run without --dry-run to make them"
        )
    with ctx.stage("rewrite"):
        latest, summary = rewrite_table(spark, snapshot, target, rewrite)
    return latest, summary.to_dict()


def rewrite_widened(
    ctx: RunContext, spark: SparkSession, snapshot: TableSnapshot | None, batch: Batch
) -> tuple[TableSnapshot | None, Batch, dict[str, Any] | None]:
    """The table with the batch's widenings made by a rewrite, and the batch planned again
    against it; a dry run lists the widenings (its summary) and rewrites nothing."""
    target = ctx.target
    if snapshot is None or target.schema_evolution != "full" or not batch.schema.widens:
        return snapshot, batch, None
    if ctx.options.dry_run:
        return snapshot, batch, None
    rewrite = widenings(batch.schema, snapshot.arrow_schema())
    with ctx.stage("rewrite"):
        latest, summary = rewrite_table(spark, snapshot, target, rewrite)
    replanned = replace(batch, schema=plan_table_schema(batch.transformed, target, latest))
    return latest, replanned, summary.to_dict()
