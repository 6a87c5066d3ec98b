"""Fault injection for crash tests: RUNNER_FAULT=<point> makes the run fail at that point.

Used by the tests to prove that a run failing at a given step leaves the table as it was.
"""

from __future__ import annotations

import os

from runner.errors import RunnerError


class InjectedFault(RunnerError):
    """Raised where RUNNER_FAULT asks for it."""


def requested() -> str | None:
    """The fault point asked for, read on the driver (executors get it from their job)."""
    return os.environ.get("RUNNER_FAULT")


def maybe_fail(point: str, active: str | None = None) -> None:
    if (active if active is not None else requested()) == point:
        raise InjectedFault(f"injected fault at {point} (RUNNER_FAULT={point})")
