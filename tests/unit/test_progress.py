"""Progress of long work, as the person at the terminal and the log reader see it: nothing
for work of a few seconds, then the runner stage, Spark's tasks done of total and rows per
second, on one line rewritten in place or as `progress` log events. Driven by a status
source standing in for Spark's tracker: no JVM."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import structlog

from runner.progress import CLEAR_LINE, Pace, Progress, Snapshot, SparkStatus
from runner.summary import Stages

ROOT = Path(__file__).resolve().parents[2]
QUICK = Pace(every=0.1, after=0.1, redraw=0.05)


class FakeSpark:
    """Spark's active stage 4 with 8 tasks: one more done and 1,000 more rows read at each
    look, as a status tracker would tell."""

    def __init__(self) -> None:
        self.looks = 0

    def __call__(self) -> SparkStatus:
        self.looks += 1
        return SparkStatus(frozenset({4}), min(self.looks, 8), 8, 1000 * self.looks)


@pytest.fixture(autouse=True)
def every_log_level():
    """structlog as it comes, debug events included, whatever another test configured."""
    configured = structlog.get_config()
    structlog.reset_defaults()
    yield
    structlog.configure(**configured)


def _frames(output: str) -> list[str]:
    """The lines drawn on the terminal, each over the one before."""
    return [f for f in output.split(CLEAR_LINE) if f]


def test_a_terminal_shows_one_line_rewritten_in_place_then_cleared():
    stages, stream = Stages(), io.StringIO()
    with (
        structlog.testing.capture_logs() as events,
        Progress.start("run", "trips", True, FakeSpark(), QUICK, stream) as progress,
    ):
        progress.follow(stages)
        with stages.stage("write"):
            time.sleep(0.6)
    output = stream.getvalue()
    frames = _frames(output)
    assert len(frames) >= 3
    assert "\n" not in output  # never a new line: the same one, rewritten
    assert output.endswith(CLEAR_LINE)  # the summary starts on a clean line
    assert frames[0].startswith("trips run 0s  write: 1/8 tasks")
    assert any(f.endswith(" rows/s") for f in frames[1:])  # once Spark read more rows
    assert not [e for e in events if e["event"] == "progress"]


def test_the_line_names_the_work_its_stage_tasks_and_rows_per_second():
    write = Snapshot("run", "trips", "write", 75.2, 12, 32, 48210.4)
    assert write.line() == "trips run 1m15s  write: 12/32 tasks  48,210 rows/s"
    assert Snapshot("run", "trips", "start", 4.0).line() == "trips run 4s  start"
    compact = Snapshot("compact", "trips", "compact", 9.9, 3, 16)
    assert compact.line() == "trips compact 9s  3/16 tasks"


def test_off_a_terminal_progress_is_log_events_with_stage_and_tasks():
    stages, stream = Stages(), io.StringIO()
    with (
        structlog.testing.capture_logs() as events,
        Progress.start("run", "trips", False, FakeSpark(), QUICK, stream) as progress,
    ):
        progress.follow(stages)
        with stages.stage("keys"):
            time.sleep(0.45)
    reports = [e for e in events if e["event"] == "progress"]
    assert len(reports) >= 2
    # the stage, while it runs; a report between its end and the work's (a loaded machine)
    # shows the work itself
    shown = [e["stage"] for e in reports]
    assert shown[0] == "keys" and set(shown) <= {"keys", "run"} and shown.count("keys") >= 2
    assert {e["pipeline"] for e in reports} == {"trips"}
    assert reports[0]["tasks_done"] == 1 and reports[0]["tasks_total"] == 8
    assert reports[-1]["rows_per_second"] > 0
    assert all(e["elapsed_seconds"] >= 0.1 for e in reports)
    assert stream.getvalue() == ""


def test_work_shorter_than_a_few_seconds_shows_nothing():
    assert Pace().after == 3.0
    stream = io.StringIO()
    with structlog.testing.capture_logs() as events:
        for tty in (True, False):
            with Progress.start("run", "trips", tty, FakeSpark(), Pace(every=0.05), stream):
                time.sleep(0.4)
    assert stream.getvalue() == ""
    assert not events


def test_runner_progress_seconds_sets_the_pace_and_0_turns_progress_off(monkeypatch):
    monkeypatch.setenv("RUNNER_PROGRESS_SECONDS", "2.5")
    assert Pace.from_env().every == 2.5
    monkeypatch.setenv("RUNNER_PROGRESS_SECONDS", "0")
    off = replace(Pace.from_env(), after=0.0)
    stream, spark = io.StringIO(), FakeSpark()
    with structlog.testing.capture_logs() as events:
        for tty in (True, False):
            with Progress.start("run", "trips", tty, spark, off, stream):
                assert "runner-progress" not in [t.name for t in threading.enumerate()]
                time.sleep(0.3)
    assert (stream.getvalue(), events, spark.looks) == ("", [], 0)


def test_a_runner_progress_seconds_that_is_no_number_is_warned_about(monkeypatch):
    monkeypatch.setenv("RUNNER_PROGRESS_SECONDS", "soon")
    with structlog.testing.capture_logs() as events:
        assert Pace.from_env() == Pace()
    assert events[0]["event"] == "progress_seconds_ignored"
    assert "RUNNER_PROGRESS_SECONDS" in events[0]["reason"]


def test_a_failing_status_is_logged_once_and_the_work_goes_on():
    def broken() -> SparkStatus:
        raise RuntimeError("the JVM went away")

    with (
        structlog.testing.capture_logs() as events,
        Progress.start("compact", "trips", False, broken, QUICK, io.StringIO()),
    ):
        time.sleep(0.5)
    failures = [e for e in events if e["event"] == "progress_failed"]
    assert len(failures) == 1 and failures[0]["log_level"] == "debug"
    assert "the JVM went away" in failures[0]["error"]


def test_the_stage_shown_is_the_innermost_open_one_else_the_kind_of_work():
    stages = Stages()
    with Progress.start("run", "trips", False, lambda: None, Pace(every=0)) as progress:
        progress.follow(stages)
        with stages.stage("commit"):
            with stages.stage("remerge"):
                assert progress.snapshot().stage == "remerge"
            assert progress.snapshot().stage == "commit"
        assert progress.snapshot().stage == "run"
        assert progress.snapshot().tasks_total is None  # no Spark stage running
    assert stages.listeners == []  # the run's Stages outlive its progress
    assert list(stages.seconds) == ["commit", "remerge"]


def test_rows_per_second_only_where_spark_counts_rows():
    """A compaction's tasks read the table's files themselves: Spark counts buckets."""
    spark = FakeSpark()
    with Progress.start("compact", "trips", False, spark, Pace(every=0)) as progress:
        snapshots = [progress.snapshot() for _ in range(3)]
    assert [s.tasks_done for s in snapshots] == [1, 2, 3]
    assert {s.rows_per_second for s in snapshots} == {None}


def test_work_inside_other_work_reports_as_the_outer_one():
    with (
        Progress.start("run", "trips", True, FakeSpark(), QUICK, io.StringIO()) as run,
        Progress.start("compact", "trips", False) as compaction,
    ):
        assert compaction is run
    with Progress.start("compact", "trips", False, FakeSpark(), Pace(every=0)) as alone:
        assert alone is not run


def test_a_long_line_is_cut_to_the_terminal_width():
    stream = io.StringIO()  # says no width: 80 columns
    with Progress.start("run", "t" * 200, True, FakeSpark(), QUICK, stream):
        time.sleep(0.3)
    assert {len(f) for f in _frames(stream.getvalue())} == {79}


def test_progress_events_carry_the_run_id_of_the_work():
    seen: list[dict[str, object]] = []

    def status() -> None:
        seen.append(structlog.contextvars.get_contextvars())

    structlog.contextvars.bind_contextvars(run_id="abc123")
    try:
        with Progress.start("run", "trips", False, status, QUICK, io.StringIO()):
            time.sleep(0.3)
    finally:
        structlog.contextvars.clear_contextvars()
    assert seen and all(s.get("run_id") == "abc123" for s in seen)


def test_importing_progress_starts_no_spark():
    script = (
        "import sys, runner.progress as p; "
        "assert p.SparkStatusReader()() is None; "
        "assert 'pyspark' not in sys.modules, 'pyspark imported'"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
