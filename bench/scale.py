"""What every scenario of the bench runs at, as `python -m bench`'s options set it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scale:
    """The table's rows, the timed runs per system (their median is reported), the bucket
    count, whether one untimed warm-up run comes first, and the peers not run (--skip-peer)."""

    rows: int
    repeats: int
    buckets: int
    warmup: bool = True
    skip: frozenset[str] = frozenset()
