"""Fault injection for crash tests: RUNNER_FAULT makes a run fail, or stop, at a given point.

    RUNNER_FAULT=<point>        raise InjectedFault there (the run's own cleanup then runs)
    RUNNER_FAULT=<point>:hold   create the file RUNNER_FAULT_MARKER there and wait, so a test
                                can SIGKILL the process at exactly that point
    RUNNER_FAULT=<point>:wait   create RUNNER_FAULT_MARKER, wait for RUNNER_FAULT_MARKER.go
                                to appear, then go on (a test runs another writer meanwhile)

Points: keyed (the batch is read and keyed, nothing written), after_bucket_file (on an
executor, a bucket file is complete), after_group_split (on an executor, the files of the
file groups a rewrite split off are complete), after_deletion_vector (on an executor, a bucket's
deletion vector file is written), before_commit (every file written), log_entry_written
(a log entry the runner writes itself is complete under a temporary name, not yet
published), after_commit (committed, the run or table action not yet finished).
before_commit and after_commit are passed by every table change
(runner/actions/table_change.py). Used by the tests to prove that a run failing or killed
at any of them leaves the table at a version a reader can use.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from runner.errors import RunnerError

HOLD_SECONDS = 600


class InjectedFault(RunnerError):
    """Raised where RUNNER_FAULT asks for it."""


def requested() -> str | None:
    """The fault asked for, read on the driver (executors get it from their job)."""
    return os.environ.get("RUNNER_FAULT")


def maybe_fail(point: str, active: str | None = None) -> None:
    wanted = active if active is not None else requested()
    name, _, action = (wanted or "").partition(":")
    if name != point:
        return
    marker = os.environ.get("RUNNER_FAULT_MARKER")
    if action in ("hold", "wait") and marker:
        Path(marker).write_text(f"{point} {os.getpid()}\n")
    if action == "hold":
        time.sleep(HOLD_SECONDS)
    if action == "wait" and marker:
        deadline = time.monotonic() + HOLD_SECONDS
        while not Path(f"{marker}.go").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return
    raise InjectedFault(f"injected fault at {point} (RUNNER_FAULT={wanted})")
