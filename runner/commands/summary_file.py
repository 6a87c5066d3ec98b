"""`runner run --summary-json FILE`: a run's summary, or a continuous run's latest rounds.

The file is written again after each run or round, values scrubbed as in every output of
the runner (runner/spec/secrets.py), so a password a value held shows as its reference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.spec.secrets import scrub_values
from runner.summary import RunSummary

KEPT_ROUNDS = 100  # the round summaries `run --continuous --summary-json` keeps


def write_summary(path: str, summary: RunSummary) -> None:
    """One run's summary as a JSON object."""
    _write(path, summary.to_dict())


@dataclass
class RoundSummaries:
    """The latest KEPT_ROUNDS round summaries as a JSON list, newest last; nothing is
    written without a path."""

    path: str | None
    kept: list[dict[str, Any]] = field(default_factory=list)

    def add(self, summary: RunSummary) -> None:
        if not self.path:
            return
        self.kept[:] = [*self.kept[-(KEPT_ROUNDS - 1) :], summary.to_dict()]
        _write(self.path, self.kept)


def _write(path: str, value: Any) -> None:
    Path(path).write_text(json.dumps(scrub_values(value), indent=2) + "\n")
