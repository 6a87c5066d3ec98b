"""The record a run, expansion, compaction, clean or restore leaves: what the history keeps,
what the metrics and the lineage events are made from.

One frozen value per piece of work, built once when it ends (or, for a run that was killed,
by the next one that finds its heartbeat): from the run summary of a run that finished,
from the error of one that failed, from the service's summary for a table service.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from runner.spec.secrets import scrub
from runner.summary import Outcome, RunSummary, VerdictFigures, WriteFigures, catalog_line

Kind = Literal["run", "expansion", "compaction", "clean", "restore"]
MESSAGE_CHARS = 500  # an error's message is kept to its first line, cut at this length


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    kind: Kind
    pipeline: str
    table: str
    spec_hash: str  # sha256 of the spec file's bytes, first 16 hex digits
    operation: str  # the write operation of a run; the service's name otherwise
    started_at: dt.datetime  # UTC
    ended_at: dt.datetime  # UTC
    outcome: Outcome
    instant: str | None = None
    batch_id: str | None = None
    version: int | None = None  # the table version committed, None when none was
    error_class: str | None = None
    error_message: str | None = None  # one line
    failed_stage: str | None = None
    # the run's figures, the same values as its summary's (a table action's: the rows it
    # read, the files it wrote); the history keeps those of runner/observe/history.py SCHEMA
    verdicts: VerdictFigures = field(default_factory=VerdictFigures)
    write: WriteFigures = field(default_factory=WriteFigures)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    checkpoints_before: dict[str, Any] = field(default_factory=dict)  # source -> checkpoint
    checkpoints_after: dict[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = ()  # the names of the sources the run read
    catalog: str | None = None  # target.catalog: what the registration did, one line

    @property
    def seconds(self) -> float:
        return (self.ended_at - self.started_at).total_seconds()

    def figures(self) -> dict[str, Any]:
        """Its figures by name, flat, as the history's columns are named."""
        return {**asdict(self.verdicts), **asdict(self.write)}

    @property
    def succeeded(self) -> bool:
        return self.outcome not in ("failed", "interrupted")


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def spec_hash(spec_file: str) -> str:
    """The spec's identity in the history: a changed spec shows as a changed hash."""
    try:
        return hashlib.sha256(Path(spec_file).read_bytes()).hexdigest()[:16]
    except OSError:
        return ""


def one_line(error: BaseException) -> str:
    """An error's message on one line (its lines joined), secrets scrubbed, cut to
    MESSAGE_CHARS."""
    lines = [line.strip() for line in scrub(str(error)).strip().splitlines() if line.strip()]
    line = " | ".join(lines) or type(error).__name__
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 3] + "..."


def summary_outcome(summary: RunSummary) -> Outcome:
    if summary.batch_already_committed:
        return "already_committed"
    if summary.nothing_new:
        return "nothing_new"
    return "committed" if summary.version is not None else "nothing_to_do"


def from_summary(
    summary: RunSummary, spec_file: str, started_at: dt.datetime, ended_at: dt.datetime
) -> RunRecord:
    """The record of a run that ended without an error."""
    return RunRecord(
        run_id=summary.run_id,
        kind="run",
        pipeline=summary.pipeline,
        table=summary.table,
        spec_hash=spec_hash(spec_file),
        operation=summary.operation,
        started_at=started_at,
        ended_at=ended_at,
        outcome=summary_outcome(summary),
        instant=summary.instant,
        batch_id=summary.batch_id,
        version=summary.version,
        verdicts=summary.verdicts,
        write=summary.write,
        stage_seconds=dict(summary.stage_seconds),
        checkpoints_before=summary.inputs.checkpoints("since"),
        checkpoints_after=summary.inputs.checkpoints("until"),
        sources=tuple(summary.inputs.sources),
        catalog=catalog_line(summary.catalog) if summary.catalog else None,
    )
