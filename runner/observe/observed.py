"""A pipeline's runs and table services as their operators see them: each leaves its record
in the run history, its Prometheus metrics and its OpenLineage events.

`Observer` wraps the work without changing it: a run's result and errors pass through as
they are, and nothing the observer does (a history it cannot write, a Pushgateway or a
lineage collector that is down) fails the work; each logs a warning instead.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from runner import logs
from runner.errors import UserError
from runner.index.naming import new_instant
from runner.observe import history
from runner.observe.lineage import Lineage
from runner.observe.metrics import PipelineMetrics
from runner.observe.record import Kind, RunRecord, from_summary, now, one_line, spec_hash
from runner.pipeline.context import RunOptions
from runner.pipeline.run import run_pipeline
from runner.spec.model import PipelineSpec
from runner.summary import ActionFigures, RunSummary, Stages

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)

T = TypeVar("T")


@dataclass
class Observer:
    """Records the pipeline's runs and services; one per process (a continuous run keeps
    one for all its rounds, so its counters add up)."""

    spec: PipelineSpec
    records: list[RunRecord] = field(default_factory=list)  # this process's, oldest first
    metrics: PipelineMetrics = field(init=False)
    lineage: Lineage = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = PipelineMetrics.for_spec(self.spec)
        self.lineage = Lineage.for_spec(self.spec)

    def close(self) -> None:
        """Stop what serves the metrics (a continuous run's /metrics endpoint)."""
        self.metrics.close()

    def run(
        self, spark: SparkSession | None = None, options: RunOptions | None = None
    ) -> RunSummary:
        """One run of the pipeline, recorded; a dry run is not."""
        options = options or RunOptions()
        if options.dry_run:
            return run_pipeline(self.spec, spark, options)
        started = now()
        stages = Stages()
        run_id = self._start()
        chosen = replace(options, run_id=run_id, instant=new_instant(), stages=stages)
        self._before(started)
        self.lineage.start(run_id, started)
        try:
            summary = run_pipeline(self.spec, spark, chosen)
        except BaseException as failure:
            self._after(self._failed("run", failure, started, chosen, stages))
            raise
        self._after(from_summary(summary, self.spec.file, started, now()))
        return summary

    def service(
        self,
        kind: Kind,
        work: Callable[[], T],
        figures: Callable[[T], ActionFigures],
        started: dt.datetime | None = None,
    ) -> T:
        """A table action (an expansion, compaction, clean or restore), recorded with the
        figures its summary gives; `started`: when the command started, if its summary
        counts its time from there (default: now)."""
        started = started or now()
        run_id = self._start()
        self._before(started)
        self.lineage.start(run_id, started, kind)
        try:
            done = work()
        except BaseException as failure:
            record = RunRecord(
                **self._identity(kind, run_id, started),
                outcome="failed",
                error_class=type(failure).__name__,
                error_message=one_line(failure),
            )
            self._after(record)
            raise
        self._after(
            RunRecord(**self._identity(kind, run_id, started), **figures(done).record_fields())
        )
        return done

    def _start(self) -> str:
        """A new run id, bound with the pipeline's name to every log event (and heartbeat)."""
        run_id = logs.start_run()
        structlog.contextvars.bind_contextvars(pipeline=self.spec.name)
        return run_id

    def _identity(self, kind: Kind, run_id: str, started: dt.datetime) -> dict[str, Any]:
        return {
            "run_id": run_id,
            "kind": kind,
            "pipeline": self.spec.name,
            "table": self.spec.target.path,
            "spec_hash": spec_hash(self.spec.file),
            "operation": kind,
            "started_at": started,
            "ended_at": now(),
        }

    def _failed(
        self,
        kind: Kind,
        failure: BaseException,
        started: dt.datetime,
        options: RunOptions,
        stages: Stages,
    ) -> RunRecord:
        assert options.run_id is not None
        return RunRecord(
            **{
                **self._identity(kind, options.run_id, started),
                "operation": self.spec.target.operation,
            },
            outcome="failed",
            instant=options.instant,
            batch_id=options.batch_id,
            error_class=type(failure).__name__,
            error_message=one_line(failure),
            failed_stage=_failed_stage(failure, stages),
            stage_seconds=dict(stages.seconds),
            sources=tuple(s.name for s in self.spec.sources),
        )

    def _history(self) -> str | None:
        """The spec's history table; None when it is off or has no place (a warning)."""
        try:
            return history.spec_history_path(self.spec)
        except UserError as problem:
            log.warning("history_not_written", error=str(problem))
            return None

    def _before(self, started: dt.datetime) -> None:
        """Before the work: record the pipeline's writers that were killed."""
        path = self._history()
        if path is not None:
            lost = history.interrupted(self.spec, path, spec_hash(self.spec.file), started)
            if lost:
                log.warning("interrupted_runs_found", runs=[r.run_id for r in lost])
                history.append(path, lost)
                for record in lost:  # the FAIL event their START never got
                    self.lineage.finish(record)

    def _after(self, record: RunRecord) -> None:
        """After the work: its record in the history, its metrics out."""
        self.records.append(record)
        path = self._history()
        if path is not None:
            history.append(path, [record])
        self.metrics.observe(record)
        self.lineage.finish(record)


def _failed_stage(failure: BaseException, stages: Stages) -> str | None:
    """The stage `failure` ended the run in; else the last one that began (a check between
    stages, or an error raised in place of the stage's)."""
    known = stages.failure
    if known is not None and known.cause is failure:
        return known.stage
    return next(reversed(stages.seconds), None)
