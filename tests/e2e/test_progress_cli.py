"""Progress of a run as a user sees it: at a terminal, one line on stderr naming the stage,
rewritten in place; piped, `progress` JSON events on stderr and nothing on stdout but the
summary. Neither shows Java's incubator warning; the terminal's `run_finished` line is short
(the summary follows it on stdout), the JSON event has every figure."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNER = [sys.executable, "-m", "runner", "pipelines/quickstart.yaml"]
# a progress line: "trips run 7s  write: 3/8 tasks", each drawn over the one before
LINE = re.compile(r"\r\x1b\[Ktrips run \d+s  (start|sources|plan|keys|write|commit)\b")


def _pipelines(where: Path) -> Path:
    shutil.copytree(
        ROOT / "pipelines", where / "pipelines", ignore=shutil.ignore_patterns("warehouse")
    )
    return where


def _on_a_terminal(cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """Run with stderr on a pseudo-terminal and stdout piped: exit code, stdout, terminal."""
    main, child = pty.openpty()
    process = subprocess.Popen(
        RUNNER, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=child
    )
    os.close(child)
    seen = b""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if not select.select([main], [], [], 1)[0]:
            continue
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the run and Spark closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(main)
    out, _ = process.communicate(timeout=60)
    return process.returncode, out.decode(), seen.decode(errors="replace")


def test_a_terminal_shows_the_stage_and_a_pipe_gets_progress_events_only_on_stderr(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUNNER_PROGRESS_SECONDS": "1"}
    code, out, terminal = _on_a_terminal(_pipelines(tmp_path / "tty"), env)
    assert code == 0, terminal
    assert LINE.search(terminal), terminal
    assert "[Stage " not in terminal  # Spark's own bar is off: one line, the runner's
    assert "trips: upsert committed version 1" in out and "\r" not in out
    assert "incubator" not in terminal
    (finished,) = [line for line in terminal.splitlines() if "run_finished" in line]
    assert "version=1" in finished and "inserted" not in finished and len(finished) < 200

    piped = subprocess.run(
        RUNNER, cwd=_pipelines(tmp_path / "pipe"), env=env, capture_output=True, text=True
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.startswith("trips: upsert committed version 1")
    assert "progress" not in piped.stdout and "\r" not in piped.stdout
    events = [json.loads(line) for line in piped.stderr.splitlines() if line.startswith("{")]
    progress = [e for e in events if e["event"] == "progress"]
    assert progress, piped.stderr
    assert {"stage", "tasks_done", "tasks_total", "elapsed_seconds"} <= progress[0].keys()
    assert {e["run_id"] for e in progress} == {events[0]["run_id"]}
    assert "incubator" not in piped.stderr
    (finished,) = [e for e in events if e["event"] == "run_finished"]
    assert (finished["version"], finished["inserted"]) == (1, 400)
