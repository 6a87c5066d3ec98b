"""Fault injection for crash tests: RUNNER_FAULT=<point> makes the run fail at that point.

Used by the tests to prove that a run failing at a given step leaves the table as it was.
"""

from __future__ import annotations

import os

from runner.errors import RunnerError


class InjectedFault(RunnerError):
    """Raised where RUNNER_FAULT asks for it."""


def maybe_fail(point: str) -> None:
    if os.environ.get("RUNNER_FAULT") == point:
        raise InjectedFault(f"injected fault at {point} (RUNNER_FAULT={point})")
