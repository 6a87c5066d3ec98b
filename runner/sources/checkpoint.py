"""Source checkpoints: where each incremental source stopped, kept in the target's commits.

A run records `{source name: checkpoint}` in its Delta commit's metadata, in the same commit
as its data, so a crash can neither skip nor re-read input: the next run starts from the
checkpoint of the latest commit of this pipeline, which exists only if the data does.

A restore (runner/services/restore.py) sets the table back to an older version, and every
pipeline's checkpoints with it: its commit records `{pipeline: checkpoints}` as of that
version (null for a pipeline that had committed none then, which starts anew), and a
pipeline's latest commit is then that restore, when it names the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from runner.delta.snapshot import TableSnapshot
from runner.errors import UserError
from runner.spec.model import PipelineSpec

# The commit metadata field (under "runner") that holds the checkpoints.
FIELD = "checkpoint"
# A restore's field: every pipeline's checkpoints as of the version it restored.
RESTORED = "restored_checkpoints"
# How many commits to look through at first; most tables find theirs in the last few.
_FIRST_LOOK = 50


class Origin(StrEnum):
    """Where a run's starting points come from (recorded with the commit)."""

    TABLE = "table"  # the checkpoints of the pipeline's last commit
    CHOSEN = "chosen"  # given for this run (runner run --checkpoint)
    RESET = "reset"  # every source from the beginning (runner run --ignore-checkpoint)
    NEW = "new table"  # no commit of this pipeline yet

    @property
    def replaces_the_tables(self) -> bool:
        """A start the user chose: worth recording even when nothing was read."""
        return self in (Origin.CHOSEN, Origin.RESET)


@dataclass(frozen=True)
class StartingPoints:
    """Where each incremental source starts this run, and how that was decided."""

    by_source: dict[str, Any]
    origin: Origin
    commit_version: int | None = None  # the latest commit of the pipeline with checkpoints

    def describe(self) -> str:
        return {
            Origin.TABLE: f"from the checkpoints of version {self.commit_version}",
            Origin.CHOSEN: "from the checkpoints given for this run",
            Origin.RESET: "from the beginning (a reset)",
            Origin.NEW: "from the beginning (no commit of this pipeline yet)",
        }[self.origin]


def last_checkpoints(
    snapshot: TableSnapshot | None, pipeline: str
) -> tuple[dict[str, Any], int | None]:
    """The checkpoints of the latest commit of `pipeline` that recorded any, and its version."""
    if snapshot is None:
        return {}, None
    history = snapshot.table.history(_FIRST_LOOK)
    found = _first_with_checkpoints(history, pipeline)
    if found is None and len(history) == _FIRST_LOOK:
        found = _first_with_checkpoints(snapshot.table.history(), pipeline)
    return found or ({}, None)


def _first_with_checkpoints(
    history: list[dict[str, Any]], pipeline: str
) -> tuple[dict[str, Any], int | None] | None:
    """The checkpoints of the newest commit of `history` that sets `pipeline`'s, and its
    version; ({}, None) when that is a restore to before the pipeline's first checkpoints;
    None when no commit does."""
    for commit in history:  # newest first
        meta = commit.get("runner")
        if not isinstance(meta, dict):
            continue
        if meta.get("pipeline") == pipeline and FIELD in meta:
            return dict(meta[FIELD]), commit["version"]
        restored = meta.get(RESTORED)
        if isinstance(restored, dict) and pipeline in restored:
            points = restored[pipeline]
            return (dict(points), commit["version"]) if points is not None else ({}, None)
    return None


def checkpoints_as_of(snapshot: TableSnapshot, version: int) -> dict[str, dict[str, Any] | None]:
    """Every pipeline that recorded checkpoints in the table's history: its checkpoints as
    of `version` (None: it had recorded none by then)."""
    history = snapshot.table.history()
    pipelines = set()
    for commit in history:
        meta = commit.get("runner")
        if isinstance(meta, dict) and FIELD in meta and isinstance(meta.get("pipeline"), str):
            pipelines.add(meta["pipeline"])
        elif isinstance(meta, dict) and isinstance(meta.get(RESTORED), dict):
            pipelines.update(meta[RESTORED])
    then = [c for c in history if c["version"] <= version]
    found = {p: _first_with_checkpoints(then, p) for p in sorted(pipelines)}
    return {
        p: points[0] if points and points[1] is not None else None for p, points in found.items()
    }


def starting_points(
    spec: PipelineSpec,
    snapshot: TableSnapshot | None,
    override: tuple[str, ...] = (),
    ignore: bool = False,
) -> StartingPoints:
    """The checkpoints this run starts from: the table's, or the user's (`--checkpoint`,
    `--ignore-checkpoint`). `override` holds VALUE (one incremental source) or NAME=VALUE."""
    incremental = [s.name for s in spec.sources if s.incremental]
    if (override or ignore) and not incremental:
        raise UserError(
            f"{spec.file} has no incremental source; --checkpoint and --ignore-checkpoint "
            "apply to sources with `incremental:`"
        )
    found, version = last_checkpoints(snapshot, spec.name)
    if ignore:
        return StartingPoints({}, Origin.RESET, version)
    if override:
        # the named sources start where the user says, the others where the table says
        chosen = {**found, **_parse_overrides(override, incremental)}
        return StartingPoints(chosen, Origin.CHOSEN, version)
    if version is None:
        return StartingPoints({}, Origin.NEW)
    return StartingPoints(found, Origin.TABLE, version)


def _parse_overrides(values: tuple[str, ...], incremental: list[str]) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if sep and name in incremental:
            parsed[name] = rest
        elif len(incremental) == 1 and len(values) == 1:
            parsed[incremental[0]] = value
        else:
            raise UserError(
                f"--checkpoint {value!r}: with several incremental sources write "
                f"NAME=VALUE, NAME one of: {', '.join(incremental)}"
            )
    return parsed
