"""The rewrite stage (schema_evolution full): the table's files rewritten in a new schema,
as a version of its own, just before the run writes its batch
(runner/actions/schema_rewrite.py).

The spec's pending renames and drops (target.rename, target.drop) are known from the spec
and the table before the plan stage; the batch is planned against the table as the rewrite
will leave it, so that its schema refusals, key errors and rejected records stop the run
before anything is rewritten. Its widenings join the same rewrite. The rewrite runs once
the batch is counted and judged, and the batch's schema plan is then made again against the
rewritten table (what is left: new columns, added without a rewrite).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pyspark.sql import SparkSession

from runner.actions.schema_rewrite import rewrite_table
from runner.delta.schema_rewrite import SchemaRewrite, pending_renames_and_drops
from runner.delta.snapshot import TableSnapshot
from runner.errors import UserError
from runner.pipeline.batch import Batch, plan_table_schema
from runner.pipeline.context import RunContext


def pending_rewrite(ctx: RunContext, snapshot: TableSnapshot | None) -> SchemaRewrite:
    """The spec's renames and drops the table has not had; a dry run with any stops here
    (its batch could only be merged with the rewritten table's rows)."""
    target = ctx.target
    if snapshot is None or target.schema_evolution != "full":
        return SchemaRewrite()
    rewrite = pending_renames_and_drops(snapshot, target)
    if rewrite and ctx.options.dry_run:
        raise UserError(
            f"a dry run cannot merge this batch: the run first rewrites the table's files "
            f"({'; '.join(rewrite.describe())}: target.rename, target.drop) and merges the "
            f"batch into the result. `runner validate {ctx.spec.file} --against "
            f"{target.path}` lists the changes without Spark; run without --dry-run to make them"
        )
    return rewrite


def rewrite_before_write(
    ctx: RunContext,
    spark: SparkSession,
    snapshot: TableSnapshot | None,
    batch: Batch,
    pending: SchemaRewrite,
) -> tuple[TableSnapshot | None, Batch, dict[str, Any] | None]:
    """The table rewritten with `pending` and the batch's widenings (under full), and the
    batch planned again against it; what the rewrite did. A dry run rewrites nothing (its
    widenings are listed in its summary)."""
    target = ctx.target
    if snapshot is None or target.schema_evolution != "full" or ctx.options.dry_run:
        return snapshot, batch, None
    rewrite = pending.with_widenings(batch.schema, snapshot.arrow_schema())
    if not rewrite:
        return snapshot, batch, None
    with ctx.stage("rewrite"):
        latest, summary = rewrite_table(spark, snapshot, target, rewrite)
    replanned = replace(batch, schema=plan_table_schema(batch.transformed, target, latest))
    return latest, replanned, summary.to_dict()
