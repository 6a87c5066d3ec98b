"""A `runner` process held at a fault point, then SIGKILLed: what a crash there leaves.

RUNNER_FAULT=<point>:hold makes the process stop at that point and say so in a marker file
(runner/faults.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

RUNNER = [sys.executable, "-m", "runner"]


def kill_at(work: Path, point: str, *args: str, wait_s: float = 180) -> None:
    """Start `runner ARGS` held at `point`, wait until it gets there, SIGKILL its group.

    Each call has a marker of its own: Spark's Python workers run in a process group of
    their own, so a task of the process killed before may still reach the point (and
    write its marker) while the next process starts."""
    marker = work / f"held-{point}-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "RUNNER_FAULT": f"{point}:hold", "RUNNER_FAULT_MARKER": str(marker)}
    proc = subprocess.Popen(
        [*RUNNER, *args],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + wait_s
        while not marker.exists():
            if proc.poll() is not None:
                pytest.fail(f"runner ended before {point}: {proc.stderr.read().decode()[-2000:]}")
            assert time.monotonic() < deadline, f"runner never reached {point}"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
