"""After a run's commit: the table actions its spec asks for (runner/actions/), in the order
a reader benefits from: compaction, expansion, clean; then the table's entry in its catalog
(runner/catalog/), made from the version they left. A new after-commit action is one entry
of `AFTER_COMMIT`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from pyspark.sql import SparkSession

from runner.actions.clean import CleanSummary, clean_table
from runner.actions.compact import CompactSummary, compact_if_due
from runner.actions.expand import ExpandSummary, expand_if_due
from runner.catalog import Registration, register_or_warn
from runner.pipeline.context import RunContext
from runner.spec.model import Target

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class AfterCommit:
    """One action a run may take once its version is committed."""

    figure: str  # its field in the run summary (None there when it did not run)
    stage: str  # its stage in the run summary's seconds
    # the spec asks for it: its stage is timed (and shown) whenever it does; None: only
    # when it did something, with the seconds its own summary gives (an expansion, which
    # is asked for by the table's growth, not by the spec)
    asked: Callable[[Target], bool] | None
    run: Callable[[SparkSession, RunContext], Any]  # its summary; None: nothing to do
    figures: Callable[[Any], Any]  # the summary field's value from its summary


def _compacted(done: CompactSummary | None) -> dict[str, Any] | None:
    return done.to_dict() if done else None


def _expanded(done: ExpandSummary | None) -> dict[str, Any] | None:
    return done.to_dict() if done else None


def _cleaned(done: CleanSummary) -> int:
    return len(done.files)


def _register(ctx: RunContext) -> Registration:
    """The table's entry in its catalog; a failure is a warning, and the next run's
    registration finds the entry missing or stale and writes it."""
    done = register_or_warn(ctx.target)
    if done.error:
        log.warning("catalog_not_registered", catalog=done.catalog.name, error=done.error)
    else:
        log.info("catalog_registered", **done.to_dict())
    return done


AFTER_COMMIT: tuple[AfterCommit, ...] = (
    AfterCommit(
        "compaction",
        "compact",
        lambda t: t.table_type == "MERGE_ON_READ" and t.compaction.after_commit,
        lambda spark, ctx: compact_if_due(spark, ctx.spec),
        _compacted,
    ),
    AfterCommit(
        "expansion", "expand", None, lambda spark, ctx: expand_if_due(spark, ctx.spec), _expanded
    ),
    AfterCommit(
        "files_cleaned",
        "clean",
        lambda t: t.cleaning.after_commit,
        lambda spark, ctx: clean_table(ctx.spec),
        _cleaned,
    ),
    AfterCommit(
        "catalog",
        "catalog",
        lambda t: t.catalog is not None,
        lambda spark, ctx: _register(ctx),
        Registration.to_dict,
    ),
)


@dataclass(frozen=True)
class ServicesRun:
    """The run summary's fields of the after-commit actions (None: it did not run)."""

    done: tuple[tuple[str, Any], ...] = ()

    def figures(self) -> dict[str, Any]:
        return {action.figure: None for action in AFTER_COMMIT} | dict(self.done)


def after_commit(ctx: RunContext, spark: SparkSession) -> ServicesRun:
    """Each after-commit action, in order, that the spec or the table's growth asks for."""
    done = []
    for action in AFTER_COMMIT:
        if action.asked is None:
            result = action.run(spark, ctx)
            if result is not None:
                ctx.stages.seconds[action.stage] = result.seconds
        elif action.asked(ctx.target):
            with ctx.stage(action.stage):
                result = action.run(spark, ctx)
        else:
            continue
        done.append((action.figure, action.figures(result)))
    return ServicesRun(tuple(done))
