"""After a run's commit: the table services its spec asks for, each a service of its own
(runner/services/), run in the order a reader benefits from: compaction, expansion, clean."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from runner.pipeline.context import RunContext
from runner.services.clean import clean_table
from runner.services.compact import compact_if_due
from runner.services.expand import expand_if_due


@dataclass(frozen=True)
class ServicesRun:
    compaction: dict[str, Any] | None = None  # target.compaction.after_commit, if it folded any
    expansion: dict[str, Any] | None = None  # the automatic expansion, if one ran
    files_cleaned: int | None = None  # by target.cleaning.after_commit

    def figures(self) -> dict[str, Any]:
        return {
            "compaction": self.compaction,
            "expansion": self.expansion,
            "files_cleaned": self.files_cleaned,
        }


def after_commit(ctx: RunContext, spark: SparkSession) -> ServicesRun:
    """Compaction, expansion and cleaning the spec asks for once a version is committed."""
    target = ctx.target
    compaction = expansion = None
    files_cleaned = None
    if target.table_type == "MERGE_ON_READ" and target.compaction.after_commit:
        with ctx.stage("compact"):
            compacted = compact_if_due(spark, ctx.spec)
        compaction = compacted.to_dict() if compacted else None
    expanded = expand_if_due(spark, ctx.spec)
    if expanded:
        expansion = expanded.to_dict()
        ctx.stages.seconds["expand"] = expanded.seconds
    if target.cleaning.after_commit:
        with ctx.stage("clean"):
            files_cleaned = len(clean_table(ctx.spec).files)
    return ServicesRun(compaction, expansion, files_cleaned)
