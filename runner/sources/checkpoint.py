"""Source checkpoints: where each incremental source stopped, kept in the target's commits.

A run records `{source name: checkpoint}` in its Delta commit's metadata, in the same commit
as its data, so a crash can neither skip nor re-read input: the next run starts from the
checkpoint of the latest commit of this pipeline, which exists only if the data does.

A pipeline with no checkpoint in a table that already holds rows (renamed, its checkpoints
being under the old name; or a second pipeline on the table) reads from its sources' start.
Where that would lose something without a word, the run is refused, naming the pipelines
whose checkpoints the table holds: a chained `delta` source handing deletes on (a first
read of its table in full misses every key deleted there since the target's rows came from
it) and a Kafka source at `starting_offsets: latest` (the records since then are skipped).
Elsewhere the summary says what is read again.

A restore (runner/actions/restore.py) sets the table back to an older version, and every
pipeline's checkpoints with it: its commit records `{pipeline: checkpoints}` as of that
version (null for a pipeline that had committed none then, which starts anew), and a
pipeline's latest commit is then that restore, when it names the pipeline.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import structlog

from runner.delta.snapshot import TableSnapshot
from runner.errors import UserError
from runner.sources.kinds import kind_of
from runner.sources.kinds.base import FirstReadLoss
from runner.spec.model import PipelineSpec, Source

log = structlog.get_logger(__name__)

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
class OtherPipeline:
    """Another pipeline's latest checkpoints in the table."""

    name: str
    version: int  # the table version that recorded them
    checkpoints: dict[str, Any]


@dataclass(frozen=True)
class StartingPoints:
    """Where each incremental source starts this run, and how that was decided."""

    by_source: dict[str, Any]
    origin: Origin
    commit_version: int | None = None  # the latest commit of the pipeline with checkpoints
    # the pipeline's first run into a table that holds rows: what its sources read again
    into_rows: str | None = None

    def describe(self) -> str:
        if self.into_rows is not None and self.origin == Origin.NEW:
            return self.into_rows
        text = {
            Origin.TABLE: f"from the checkpoints of version {self.commit_version}",
            Origin.CHOSEN: "from the checkpoints given for this run",
            Origin.RESET: "from the beginning (a reset)",
            Origin.NEW: "from the beginning (no commit of this pipeline yet)",
        }[self.origin]
        return text if self.into_rows is None else f"{text}; the others: {self.into_rows}"


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


def other_pipelines(snapshot: TableSnapshot, pipeline: str) -> list[OtherPipeline]:
    """The latest checkpoints of each pipeline but `pipeline` in the table (those a restore
    set back included), newest first."""
    history = snapshot.table.history()
    found = []
    for name in sorted(_pipelines(history) - {pipeline}):
        points = _first_with_checkpoints(history, name)
        if points is not None and points[1] is not None:
            found.append(OtherPipeline(name, points[1], points[0]))
    return sorted(found, key=lambda other: -other.version)


def checkpoints_as_of(snapshot: TableSnapshot, version: int) -> dict[str, dict[str, Any] | None]:
    """Every pipeline that recorded checkpoints in the table's history: its checkpoints as
    of `version` (None: it had recorded none by then)."""
    history = snapshot.table.history()
    then = [c for c in history if c["version"] <= version]
    found = {p: _first_with_checkpoints(then, p) for p in sorted(_pipelines(history))}
    return {
        p: points[0] if points and points[1] is not None else None for p, points in found.items()
    }


def version_before_read(
    snapshot: TableSnapshot, pipeline: str, source: str, at_most: int
) -> tuple[int, int | None] | None:
    """The table's newest version but the latest at which `pipeline` had read its Delta
    source `source` up to version `at_most` or before (or not at all: None), with that
    version read; None when no version the log holds had."""
    history = snapshot.table.history()  # newest first
    for at, commit in enumerate(history):
        if commit["version"] == snapshot.version:
            continue
        found = _first_with_checkpoints(history[at:], pipeline)
        point = found[0].get(source) if found else None
        read = point.get("version") if isinstance(point, dict) else point
        if read is None or int(read) <= at_most:
            return commit["version"], None if read is None else int(read)
    return None


def _pipelines(history: list[dict[str, Any]]) -> set[str]:
    """The pipelines that recorded checkpoints in `history`, or that a restore named."""
    pipelines = set()
    for commit in history:
        meta = commit.get("runner")
        if isinstance(meta, dict) and FIELD in meta and isinstance(meta.get("pipeline"), str):
            pipelines.add(meta["pipeline"])
        elif isinstance(meta, dict) and isinstance(meta.get(RESTORED), dict):
            pipelines.update(meta[RESTORED])
    return pipelines


def starting_points(
    spec: PipelineSpec,
    snapshot: TableSnapshot | None,
    override: tuple[str, ...] = (),
    ignore: bool = False,
) -> StartingPoints:
    """The checkpoints this run starts from: the table's, or the user's (`--checkpoint`,
    `--ignore-checkpoint`). `override` holds VALUE (one incremental source) or NAME=VALUE.
    A first run of the pipeline into a table that holds rows is refused where a source
    would lose something without a word (the module's docstring)."""
    incremental = [s.name for s in spec.sources if s.incremental]
    if (override or ignore) and not incremental:
        raise UserError(
            f"{spec.file} has no incremental source; --checkpoint and --ignore-checkpoint "
            "apply to sources with `incremental:`"
        )
    found, version = last_checkpoints(snapshot, spec.name)
    if ignore:
        return StartingPoints({}, Origin.RESET, version)
    chosen = _parse_overrides(override, incremental) if override else {}
    into_rows = None
    if version is None and incremental and snapshot is not None and _holds_rows(snapshot):
        into_rows = _first_run_into_rows(spec, snapshot, chosen)
    if override:
        # the named sources start where the user says, the others where the table says
        return StartingPoints({**found, **chosen}, Origin.CHOSEN, version, into_rows)
    if version is None:
        return StartingPoints({}, Origin.NEW, into_rows=into_rows)
    return StartingPoints(found, Origin.TABLE, version)


def _holds_rows(snapshot: TableSnapshot) -> bool:
    return any(f.live_records > 0 for f in snapshot.files())


def _first_run_into_rows(
    spec: PipelineSpec, snapshot: TableSnapshot, chosen: dict[str, str]
) -> str | None:
    """What the pipeline's first run into a table that holds rows reads from its sources'
    start (for the summary and the log; None: every source starts where the user chose);
    refused where a source would lose something without a word."""
    starting = [s for s in spec.sources if s.incremental and s.name not in chosen]
    if not starting:
        return None
    others = other_pipelines(snapshot, spec.name)
    for source in starting:
        loss = kind_of(source).first_read_loses(source)
        if loss:
            raise UserError(_refusal(spec, source, loss, others))
    held = ", ".join(f"pipeline {o.name!r} in version {o.version}" for o in others)
    reads = ", ".join(f"{s.name} {kind_of(s).first_read(s)}" for s in starting)
    log.warning(
        "first_run_into_rows",
        pipeline=spec.name,
        others=[o.name for o in others],
        sources=[s.name for s in starting],
    )
    return (
        "none of this pipeline in this table, which holds rows already"
        + (f" (checkpoints of {held})" if held else "")
        + f": {reads}"
    )


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


def _refusal(
    spec: PipelineSpec, source: Source, loss: FirstReadLoss, others: list[OtherPipeline]
) -> str:
    """The refusal of a first read that would lose something: what is known, and the fixes."""
    name = source.name
    holding = [o for o in others if name in o.checkpoints]
    if holding:
        known = ", ".join(
            f"pipeline {o.name!r} recorded {name} at {_shown(o.checkpoints[name], source)} "
            f"(table version {o.version})"
            for o in holding
        )
        value = _as_value(holding[0].checkpoints[name])
        go_on = (
            f"{known}: run with --checkpoint {shlex.quote(f'{name}={value}')} (or under the "
            f"name {holding[0].name!r}) to go on from there"
        )
    else:
        go_on = (
            f"no pipeline recorded a checkpoint of a source {name!r} in it: run with "
            f"--checkpoint {name}=VALUE (where the table's rows came from) to go on from there"
        )
    return (
        f"source {name!r}: pipeline {spec.name!r} has no checkpoint in {spec.target.path}, which "
        f"holds rows already, and {loss.lost}, so nothing was read; {go_on}; {loss.anyway}"
    )


def _as_value(value: Any) -> str:
    """A recorded checkpoint as --checkpoint takes it."""
    if isinstance(value, dict) and set(value) == {"version"}:
        return str(value["version"])  # a Delta source's
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _shown(value: Any, source: Source) -> str:
    return kind_of(source).shown_checkpoint(_as_value(value))
