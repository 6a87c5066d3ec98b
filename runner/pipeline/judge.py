"""The keys stage: the batch counted per bucket, and its rejected rows judged.

The rows to write are counted per (partition path, bucket) with the rejected rows per fate
and rule, by one aggregation, or, for a batch small enough to collect, on the driver from
the collected rows (runner/pipeline/winners.py one_pass_frame): one Spark job where there
would be two. Then the spec's limits are enforced (the run fails past them) and the
quarantined rows, and the unreadable files skipped, are appended to the quarantine table
before the target's commit, so nothing is lost.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import structlog
from pyspark.sql import DataFrame

from runner import faults
from runner.delta.quarantine import append_quarantine
from runner.delta.snapshot import Group
from runner.errors import UnreadableFileError
from runner.jvm.session import session_settings
from runner.pipeline.batch import Batch
from runner.pipeline.context import RunContext
from runner.pipeline.quality import (
    FATE,
    QUARANTINE_COLUMNS,
    RULE,
    Verdicts,
    bucket_counts_and_verdicts,
    enforce,
    quarantine_rows,
)
from runner.pipeline.winners import estimated_bytes, one_pass_frame, split_verdicts
from runner.storage.location import writing
from runner.storage.meta_columns import BUCKET, PARTITION_PATH
from runner.summary import VerdictFigures

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Counted:
    groups: dict[Group, int]  # rows to write per touched (partition path, bucket)
    verdicts: Verdicts
    collected: pa.Table | None  # the rows to write, when the batch was collected whole


# A batch Spark estimates at most this large has its keys computed by Spark's interpreted
# expressions: generating and compiling the Java code of a first query costs about half a
# second, more than interpreting a few thousand rows does (docs/performance.md, "Small
# runs as whole processes").
INTERPRETED_MAX_BYTES = 2**20
# What its queries then run with: whole-stage code generation off, expressions interpreted.
INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


def count_batch(ctx: RunContext, batch: Batch) -> Counted:
    with ctx.stage("keys"):
        small = one_pass_frame(batch.judged, ctx.target, batch.schema, ctx.instant)
        if small is None:
            groups, verdicts = touched_groups(batch.judged)
            return Counted(groups, verdicts, None)
        tiny = estimated_bytes(batch.judged) <= INTERPRETED_MAX_BYTES
        with session_settings(small.sparkSession, INTERPRETED if tiny else {}):
            rows = small.toArrow()
        collected, groups, verdicts = split_verdicts(rows)
        log.info("batch_collected", rows=verdicts.rows_read)
        return Counted(groups, verdicts, collected)


def touched_groups(judged: DataFrame) -> tuple[dict[Group, int], Verdicts]:
    """Rows per (partition path, bucket) to write, and the rejected rows per fate and rule,
    from one aggregation: metadata-sized, fine on the driver."""
    rows = judged.groupBy(PARTITION_PATH, BUCKET, FATE, RULE).count().collect()
    return bucket_counts_and_verdicts(
        (r[PARTITION_PATH], r[BUCKET], r[FATE], r[RULE], r["count"]) for r in rows
    )


def judge(ctx: RunContext, batch: Batch, verdicts: Verdicts, groups: Mapping[Group, int]) -> None:
    """Fail the run on rejected rows past what the spec allows; quarantine the rest."""
    enforce(batch.judged, ctx.spec, verdicts)
    faults.maybe_fail("keyed")
    quarantine = ctx.target.quarantine
    if verdicts.count("quarantine"):
        assert quarantine is not None, "enforce() fails the run without one"
        with ctx.stage("quarantine"), writing(quarantine.path):
            context = quarantine_context(ctx)
            rows = quarantine_rows(batch.judged, list(batch.input_columns), context).toArrow()
            _append(ctx, rows)
    log.info(
        "batch_keyed",
        rows=verdicts.rows_read,
        buckets=len(groups),
        partitions=len({pp for pp, _ in groups}),
    )


def verdict_figures(verdicts: Verdicts) -> VerdictFigures:
    """The run's figures the verdicts give."""
    return VerdictFigures(
        rows_read=verdicts.rows_read,
        rows_dropped=verdicts.count("drop"),
        rows_quarantined=verdicts.count("quarantine"),
        rejected_by_rule=verdicts.by_rule,
    )


def quarantine_skipped(ctx: RunContext, skipped: Mapping[str, UnreadableFileError]) -> None:
    """Name the skipped files in the quarantine table, once every read of the batch is
    done (a file found unreadable later would start the batch again)."""
    if not skipped or ctx.target.quarantine is None:
        return
    context = quarantine_context(ctx)
    bad = list(skipped.values())
    rows = pa.table(
        {
            **{f"_{k}": [None if v is None else str(v)] * len(bad) for k, v in context.items()},
            "_rule": ["unreadable_file"] * len(bad),
            "_reason": [b.reason for b in bad],
            "_record": [json.dumps({"source": b.source, "file": b.path}) for b in bad],
        },
        schema=pa.schema([(n, pa.string()) for n in QUARANTINE_COLUMNS]),
    )
    _append(ctx, rows)


def quarantine_context(ctx: RunContext) -> dict[str, Any]:
    """The run's context on each quarantined row (QUARANTINE_COLUMNS before _rule)."""
    return {
        "pipeline": ctx.spec.name,
        "run_id": ctx.run_id,
        "instant": ctx.instant,
        "batch_id": ctx.options.batch_id,
    }


def _append(ctx: RunContext, rows: pa.Table) -> None:
    """Append to the quarantine table before the target's commit, so nothing is lost;
    with a batch id, in the same app transaction (a re-run appends nothing twice)."""
    quarantine = ctx.target.quarantine
    assert quarantine is not None, "enforce() fails the run without a quarantine"
    if ctx.options.dry_run:
        log.info("quarantine_not_written", table=quarantine.path, rows=rows.num_rows, dry_run=True)
        return
    metadata = {**quarantine_context(ctx), "table": ctx.target.path}
    append_quarantine(quarantine.path, rows, metadata, ctx.app_id)
