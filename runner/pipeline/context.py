"""What every stage of a run knows from the start: the spec, the table, the run's identity,
the caller's options and the clock that times the stages. Nothing here changes as the run
goes; what a stage learns, it returns."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import structlog

from runner import logs
from runner.index.naming import new_instant
from runner.spec.model import PipelineSpec, SparkSettings, Target
from runner.storage.location import TableLocation, locate
from runner.summary import StageFailure, Stages

log = structlog.get_logger(__name__)


def batch_app_id(spec: PipelineSpec, batch_id: str) -> str:
    """The Delta app transaction id that marks a batch of a pipeline as committed."""
    return f"runner/{spec.name}/{batch_id}"


@dataclass(frozen=True)
class Application:
    """The Spark application a set of specs shares (runner/commands/spec_set_run.py): the
    session a run starts has these settings, in place of its own spec's, and the jars of
    every spec of the set, so that each of them can run in it."""

    name: str
    settings: SparkSettings
    specs: tuple[PipelineSpec, ...] = ()


@dataclass(frozen=True)
class RunOptions:
    """How the caller runs the pipeline. `checkpoint` (VALUE, or NAME=VALUE per source) and
    `ignore_checkpoint` replace the checkpoints the table holds, for a reset or a chosen start.
    `console_progress`: the caller is at a terminal, so the run's progress is a line on
    stderr rewritten in place, not log events (runner/progress.py)."""

    console_progress: bool = False
    batch_id: str | None = None
    checkpoint: tuple[str, ...] = ()
    ignore_checkpoint: bool = False
    dry_run: bool = False  # read, key, judge and merge; write nothing under the table
    # given by a caller that records the run (runner/observe): its id and instant, and the
    # clock it reads the stages from when the run fails
    run_id: str | None = None
    instant: str | None = None
    stages: Stages | None = None
    application: Application | None = None  # shared with other specs' runs


@dataclass(frozen=True)
class RunContext:
    spec: PipelineSpec
    options: RunOptions
    run_id: str
    instant: str
    table: TableLocation  # object store settings, shipped to executors
    stages: Stages = field(default_factory=Stages)

    @classmethod
    def start(cls, spec: PipelineSpec, options: RunOptions) -> RunContext:
        instant = options.instant or new_instant()
        table = locate(spec.target.path)
        return cls(
            spec,
            options,
            options.run_id or logs.start_run(),
            instant,
            table.dry_run(instant) if options.dry_run else table,
            options.stages or Stages(),
        )

    @property
    def target(self) -> Target:
        return self.spec.target

    @property
    def app_id(self) -> str | None:
        batch_id = self.options.batch_id
        return batch_app_id(self.spec, batch_id) if batch_id else None

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage; a failure in it is kept and logged once, by the innermost stage it
        happened in (`stage_failed`, with the stage's name and the error)."""
        with self.stages.stage(name):
            try:
                yield
            except BaseException as failure:
                known = self.stages.failure
                # a skippable unreadable file is no failure: the run goes on without it
                if (known is None or known.cause is not failure) and not getattr(
                    failure, "skippable", False
                ):
                    self.stages.failure = StageFailure(name, failure)
                    log.warning("stage_failed", stage=name, error=type(failure).__name__)
                raise
