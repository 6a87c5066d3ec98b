"""Progress of long work: a run, an expansion or a compaction that lasts more than a few
seconds says what it is doing, to the person at the terminal or to the log that watches it.

    with Progress.start("run", spec.name, tty=options.console_progress) as progress:
        progress.follow(ctx.stages)  # the runner stage shown: runner/summary.py Stages
        ...

Once the work has lasted QUIET_SECONDS, a daemon thread reports the runner stage, the
tasks of Spark's active stages done of total (in a run's write stage each task writes a
bucket or a group of buckets, in a compaction or an expansion each task a bucket), the
rows Spark's stages read per second where Spark counts rows, and the time so far. On a
terminal (`tty`): one line on stderr, rewritten in place and cleared when the work ends.
Else: a `progress` log event every RUNNER_PROGRESS_SECONDS (default 10; 0 turns progress
off). Never anything on stdout: it carries the summary.

The thread reads the status of the SparkContext the work started, and only once pyspark
is imported: progress never starts a JVM. Progress never fails the work either: an error
in the thread is logged once, at debug level, and the reports go on without it.
"""

from __future__ import annotations

import contextvars
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TextIO

import structlog

log = structlog.get_logger(__name__)

ENV = "RUNNER_PROGRESS_SECONDS"
EVERY_SECONDS = 10.0  # between two progress log events
QUIET_SECONDS = 3.0  # work shorter than this reports nothing
REDRAW_SECONDS = 1.0  # between two redraws of the terminal line
JOIN_SECONDS = 2.0  # the most the end of the work waits for a report in flight
CLEAR_LINE = "\r\x1b[K"
# The tasks of these read the table's files themselves: Spark's counts are buckets there.
NO_ROWS = frozenset({"compact", "expand", "clean"})

Kind = Literal["run", "expand", "compact"]


@dataclass(frozen=True)
class SparkStatus:
    """What Spark is doing: the tasks of its active stages done of total, and the rows
    those stages have read so far (None where Spark does not say)."""

    stages: frozenset[int]
    tasks_done: int
    tasks_total: int
    rows: int | None = None


StatusSource = Callable[[], SparkStatus | None]


class StageClock(Protocol):
    """What progress needs of runner/summary.py's Stages: a place to listen to it."""

    listeners: list[Callable[[str, bool], None]]


@dataclass(frozen=True)
class Pace:
    """When progress reports: a log event every `every` seconds (0: no progress at all,
    on a terminal either), nothing before the work has lasted `after` seconds, the
    terminal line redrawn every `redraw` seconds."""

    every: float = EVERY_SECONDS
    after: float = QUIET_SECONDS
    redraw: float = REDRAW_SECONDS

    @classmethod
    def from_env(cls) -> Pace:
        """RUNNER_PROGRESS_SECONDS' pace; a value that is no number of seconds is warned
        about and the default kept (progress never stops the work)."""
        text = os.environ.get(ENV, "").strip()
        if not text:
            return cls()
        try:
            every = float(text)
        except ValueError:
            every = -1.0
        if not math.isfinite(every) or every < 0:
            log.warning(
                "progress_seconds_ignored",
                value=text,
                reason=f"{ENV} takes a number of seconds (0 turns progress off)",
                seconds=EVERY_SECONDS,
            )
            return cls()
        return cls(every=every)

    def tick(self, tty: bool) -> float:
        return min(self.redraw, self.every) if tty else self.every


@dataclass(frozen=True)
class Snapshot:
    """One report: what the work is doing now."""

    kind: str
    name: str
    stage: str
    elapsed_seconds: float
    tasks_done: int | None = None  # None: no Spark stage is running
    tasks_total: int | None = None
    rows_per_second: float | None = None

    def line(self) -> str:
        """The terminal line: `trips run 14s  write: 12/32 tasks  48,210 rows/s`, or
        `trips compact 9s  3/16 tasks` (the stage is the work)."""
        text = f"{self.name} {self.kind} {_duration(self.elapsed_seconds)}"
        stage = f"  {self.stage}" if self.stage != self.kind else ""
        if self.tasks_total is None:
            text += stage
        else:
            tasks = f"{self.tasks_done}/{self.tasks_total} tasks"
            text += f"{stage}: {tasks}" if stage else f"  {tasks}"
        if self.rows_per_second:
            text += f"  {self.rows_per_second:,.0f} rows/s"
        return text

    def fields(self) -> dict[str, Any]:
        """The `progress` log event's fields."""
        return {
            "kind": self.kind,
            "pipeline": self.name,
            "stage": self.stage,
            "tasks_done": self.tasks_done,
            "tasks_total": self.tasks_total,
            "rows_per_second": self.rows_per_second,
            "elapsed_seconds": self.elapsed_seconds,
        }


def _duration(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole}s" if whole < 60 else f"{whole // 60}m{whole % 60:02d}s"


class SparkStatusReader:
    """The status of this process's SparkContext, read from its status tracker; None when
    no Spark stage runs. `SparkContext._active_spark_context` and not
    `SparkSession.getActiveSession()`: the active session is the JVM thread's, and the
    progress thread has none."""

    def __init__(self) -> None:
        self._rows_known = True  # False once the JVM's status store failed to say

    def __call__(self) -> SparkStatus | None:
        if "pyspark" not in sys.modules:  # nothing started Spark: neither does progress
            return None
        from pyspark import SparkContext

        context = SparkContext._active_spark_context
        if context is None or context._jsc is None:  # starting, or stopped
            return None
        tracker = context.statusTracker()
        infos = [i for i in map(tracker.getStageInfo, tracker.getActiveStageIds()) if i]
        if not infos:
            return None
        return SparkStatus(
            frozenset(i.stageId for i in infos),
            sum(i.numCompletedTasks for i in infos),
            sum(i.numTasks for i in infos),
            self._rows(context) if self._rows_known else None,
        )

    def _rows(self, context: Any) -> int | None:
        """The input and shuffle records the active stages have read (Spark counts a
        task's rows when it ends), from the JVM's status store: Spark's Python API does not
        say them. A Spark whose store cannot tell shows no rows per second."""
        try:
            active = context._jsc.sc().statusStore().activeStages()
            stages = [active.apply(k) for k in range(active.size())]
            return sum(int(s.inputRecords()) + int(s.shuffleReadRecords()) for s in stages)
        except Exception as failure:  # a private API of the JVM's
            self._rows_known = False
            log.debug("progress_rows_unknown", error=f"{type(failure).__name__}: {failure}")
            return None


class Progress:
    """The progress of one piece of work, reported by a daemon thread; made by
    `Progress.start`, which stops it (and clears its terminal line) when the work ends."""

    def __init__(
        self, kind: Kind, name: str, tty: bool, status: StatusSource, pace: Pace, stream: TextIO
    ) -> None:
        self.kind, self.name, self.tty = kind, name, tty
        self._status, self._pace, self._stream = status, pace, stream
        self._started = time.monotonic()
        self._open: tuple[str, ...] = ()  # the runner stages open now, innermost last
        self._followed: list[StageClock] = []
        self._rate_from: tuple[frozenset[int], float, int] | None = None
        self._drawn = False
        self._failed = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    @contextmanager
    def start(
        cls,
        kind: Kind,
        name: str,
        tty: bool,
        status: StatusSource | None = None,
        pace: Pace | None = None,
        stream: TextIO | None = None,
    ) -> Iterator[Progress]:
        """Report the progress of the work in the `with` block: `kind` of work on the
        pipeline `name`; `tty`: a line on `stream` (stderr) rewritten in place, else log
        events. `status` (Spark's, by default) and `pace` (RUNNER_PROGRESS_SECONDS') are
        given by tests. Work inside other work (a compaction after a run's commit) reports
        as the outer work: one line, one series of events."""
        outer = _CURRENT.get()
        if outer is not None:
            yield outer
            return
        progress = cls(
            kind,
            name,
            tty,
            status or SparkStatusReader(),
            pace or Pace.from_env(),
            stream or sys.stderr,
        )
        progress._begin()
        token = _CURRENT.set(progress)
        try:
            yield progress
        finally:
            _CURRENT.reset(token)
            progress._end()

    def follow(self, stages: StageClock) -> None:
        """Show the innermost stage `stages` times as the work's, until the work ends (the
        kind of work while no stage is open)."""
        stages.listeners.append(self.on_stage)
        self._followed.append(stages)

    def on_stage(self, name: str, started: bool) -> None:
        """A stage started or ended: runner/summary.py's StageListener."""
        if started:
            self._open = (*self._open, name)
        elif name in self._open:
            at = len(self._open) - 1 - self._open[::-1].index(name)
            self._open = self._open[:at] + self._open[at + 1 :]

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def snapshot(self) -> Snapshot:
        """What the work is doing now."""
        elapsed = self.elapsed()
        stage = self._open[-1] if self._open else self.kind
        spark = self._status()
        if spark is None:
            self._rate_from = None
            return Snapshot(self.kind, self.name, stage, round(elapsed, 1))
        counts_rows = stage not in NO_ROWS and self.kind not in NO_ROWS
        rate = self._rate(spark, elapsed) if counts_rows else None
        done, total = spark.tasks_done, spark.tasks_total
        return Snapshot(self.kind, self.name, stage, round(elapsed, 1), done, total, rate)

    def _rate(self, spark: SparkStatus, elapsed: float) -> float | None:
        """Rows per second Spark's active stages read since progress first saw them."""
        if spark.rows is None:
            return None
        since = self._rate_from
        if since is None or since[0] != spark.stages:
            self._rate_from = (spark.stages, elapsed, spark.rows)
            return None
        _, then, rows = since
        if elapsed <= then or spark.rows <= rows:
            return None
        return round((spark.rows - rows) / (elapsed - then), 1)

    def report(self) -> None:
        """Say what the work is doing now: the terminal line redrawn, or a log event."""
        snapshot = self.snapshot()
        if not self.tty:
            log.info("progress", **snapshot.fields())
            return
        with self._lock:
            if not self._done.is_set():  # the work's end has cleared the line
                self._write(CLEAR_LINE + snapshot.line()[: _width(self._stream) - 1])
                self._drawn = True

    def _begin(self) -> None:
        if self._pace.every <= 0:
            return
        # the caller's context: its run id goes on the progress events
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._loop,), name="runner-progress", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        tick = self._pace.tick(self.tty)
        due = self._pace.after if self.tty else max(self._pace.after, tick)
        while not self._done.wait(max(0.0, due - self.elapsed())):
            self._safely(self.report)
            due = max(due + tick, self.elapsed() + tick / 2)  # a slow report skips a beat

    def _end(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(JOIN_SECONDS)
        for stages in self._followed:
            stages.listeners.remove(self.on_stage)
        with self._lock:
            if self._drawn:
                self._safely(lambda: self._write(CLEAR_LINE))
                self._drawn = False

    def _write(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()

    def _safely(self, step: Callable[[], object]) -> None:
        """Progress never fails the work: its first error is logged at debug level."""
        try:
            step()
        except Exception as failure:
            if not self._failed:
                self._failed = True
                log.debug("progress_failed", error=f"{type(failure).__name__}: {failure}")


_CURRENT: contextvars.ContextVar[Progress | None] = contextvars.ContextVar(
    "runner_progress", default=None
)


def _width(stream: TextIO) -> int:
    """The terminal's columns (80 where it does not say): a longer line would wrap, and
    the next '\\r' would rewrite only its last part."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        columns = 0
    return columns if columns > 0 else 80
