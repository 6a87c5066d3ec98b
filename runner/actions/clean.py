"""`runner clean`: remove the runner's data files that no reader needs, like Hudi's cleaner.

Removed: files the runner wrote (their names carry bucket, file group, write token and
instant) that no version among the last `retain_commits` references: files replaced before
those versions, and files of runs that never committed (a killed run's). Kept: every file
those versions reference (a reader of any of them, or a time travel to them, still works),
every file younger than `min_age_hours`, every file of a writer still in flight (a run, an
expansion or a compaction whose heartbeat is fresh: runner/storage/in_flight.py, however long
it has run), and everything the runner did not write, which is reported and never touched:
a symbolic link is never followed, whatever its name. Paths are compared in one form
(`canonical`), so a file the log names `a//b` is the file a listing finds at `a/b`. The
Delta log is not changed.

Plan (`plan_clean`: the walk, the heartbeats and the log; nothing changed) and execute
(`run_clean`: remove the planned files, then lapsed heartbeats) are separate steps;
`clean_table` is the command's call and the run's after-commit step.

delta-rs' `vacuum(full=True)` is not used: it deletes every file the log does not reference,
whoever wrote it, and live deletion-vector files too. The runner's deletion vector files
(`_deletion_vectors/<instant>/...`) are cleaned like its data files: removed once no kept
version references them.

Delta's change data feed (`runner read --since`, delta-spark's readChangeFeed) reads, for
each version, the change data files its `cdc` actions name (`_change_data/...`, named like
data files), or where a version has none, the files it adds and removes. So a kept version
also keeps its change data files and, on a table with the feed, the files it removes; a
change data file no kept version names (an older version's, a killed run's) is removed
like a data file. A kept version whose commit entry the log no longer holds has no change
feed any reader could read: only its snapshot's files are kept.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import unquote

import structlog
from deltalake import DeltaTable

from runner.delta.directory import StoredFile, canonical, walk
from runner.delta.log_replay import deletion_vectors, read_commit
from runner.delta.snapshot import add_actions, open_table
from runner.errors import UserError
from runner.spec.model import PipelineSpec
from runner.storage.in_flight import heartbeats, remove_heartbeat
from runner.storage.location import TableLocation
from runner.summary import ActionFigures, human_size

log = structlog.get_logger(__name__)
SHOWN = 20


@dataclass
class CleanSummary:
    table: str
    version: int
    kept_versions: list[int]
    dry_run: bool
    files: list[str] = field(default_factory=list)  # removed (or, dry run, to be removed)
    bytes: int = 0
    not_runners: list[str] = field(default_factory=list)  # left alone: the runner did not write
    too_young: int = 0  # the runner's, unreferenced, younger than min_age_hours: kept
    in_flight: int = 0  # the runner's, of a writer still running (its heartbeat): kept

    def record(self) -> ActionFigures:
        return ActionFigures(
            "done" if self.files else "nothing_to_do", files_removed=len(self.files)
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        versions = f"{self.kept_versions[0]}..{self.kept_versions[-1]}"
        lines = [
            f"{self.table}: {verb} {len(self.files)} file(s), {human_size(self.bytes)}; "
            f"every file of versions {versions} is kept"
        ]
        lines += _listed(self.files)
        if self.too_young:
            lines.append(
                f"{self.too_young} unreferenced file(s) younger than min_age_hours kept "
                "(a run may still be writing them)"
            )
        if self.in_flight:
            lines.append(
                f"{self.in_flight} file(s) of a run, expansion or compaction still in flight kept "
                "(it may yet commit them)"
            )
        if self.not_runners:
            lines.append(f"{len(self.not_runners)} file(s) the runner did not write, left alone:")
            lines += _listed(self.not_runners)
        return "\n".join(lines)


def _listed(paths: list[str]) -> list[str]:
    lines = [f"  {path}" for path in paths[:SHOWN]]
    if len(paths) > SHOWN:
        lines.append(f"  ... and {len(paths) - SHOWN} more")
    return lines


@dataclass(frozen=True)
class CleanPlan:
    """What a clean would remove, and what it keeps and why, read from the table."""

    location: TableLocation
    version: int
    kept_versions: tuple[int, ...]
    doomed: tuple[StoredFile, ...]  # the runner's, unreferenced, old enough, not in flight
    not_runners: tuple[str, ...]  # left alone: the runner did not write them
    too_young: int  # the runner's, unreferenced, younger than min_age_hours: kept
    in_flight_files: int  # the runner's, of a writer still running (its heartbeat): kept
    in_flight: frozenset[str]  # the instants of writers in flight
    lapsed: tuple[str, ...]  # instants of heartbeats no longer alive: removed with the files


def plan_clean(
    spec: PipelineSpec, retain_commits: int | None = None, min_age_hours: int | None = None
) -> CleanPlan:
    """The files to remove, from a walk of the table directory, the heartbeats and the log
    (no file is changed)."""
    cleaning = spec.target.cleaning
    retain = retain_commits or cleaning.retain_commits
    min_age = cleaning.min_age_hours if min_age_hours is None else min_age_hours
    snapshot = open_table(spec.target.path)
    if snapshot is None:
        raise UserError(f"no table at {spec.target.path}: nothing to clean")
    location = snapshot.location
    # In this order: a file found by the walk belongs to a writer whose heartbeat was put
    # before the file and is removed only after its commit, so that writer is either seen
    # in flight below or done, and then its commit is in the log as read after both.
    stored = list(walk(location))
    beats = heartbeats(location)
    in_flight = frozenset(beat.instant for beat in beats if beat.alive)
    snapshot.table.update_incremental()
    version = snapshot.version
    keep = tuple(range(max(0, version - retain + 1), version + 1))
    needed = _referenced(location, list(keep)) | _changes_read(
        location, keep, snapshot.has_change_feed
    )
    young_after_ns = time.time_ns() - min_age * 3600 * 1_000_000_000
    doomed: list[StoredFile] = []
    not_runners: list[str] = []
    too_young = running = 0
    for found in stored:
        if canonical(found.path) in needed:
            continue
        if not found.written_by_runner:
            not_runners.append(found.path)
        elif found.instant in in_flight:
            running += 1
        elif found.mtime_ns is None or found.mtime_ns > young_after_ns:
            too_young += 1
        else:
            doomed.append(found)
    return CleanPlan(
        location=location,
        version=version,
        kept_versions=keep,
        doomed=tuple(doomed),
        not_runners=tuple(not_runners),
        too_young=too_young,
        in_flight_files=running,
        in_flight=in_flight,
        lapsed=tuple(beat.instant for beat in beats if beat.instant not in in_flight),
    )


def run_clean(plan: CleanPlan) -> list[StoredFile]:
    """Remove the plan's files, then the heartbeats of writers no longer in flight; returns
    the files actually removed."""
    removed = _remove(plan.location, list(plan.doomed))
    for instant in plan.lapsed:
        remove_heartbeat(plan.location, instant)
    return removed


def clean_table(
    spec: PipelineSpec,
    retain_commits: int | None = None,
    min_age_hours: int | None = None,
    dry_run: bool = False,
) -> CleanSummary:
    """`runner clean` and the run's after-commit cleaning: plan, then unless dry_run remove."""
    plan = plan_clean(spec, retain_commits, min_age_hours)
    doomed = list(plan.doomed) if dry_run else run_clean(plan)
    keep = list(plan.kept_versions)
    summary = CleanSummary(
        spec.target.path,
        plan.version,
        keep,
        dry_run,
        files=[f.path for f in doomed],
        bytes=sum(f.size for f in doomed),
        not_runners=list(plan.not_runners),
        too_young=plan.too_young,
        in_flight=plan.in_flight_files,
    )
    log.info(
        "clean_done" if not dry_run else "clean_planned",
        files=len(summary.files),
        bytes=summary.bytes,
        kept_versions=f"{keep[0]}..{keep[-1]}",
        left_alone=len(summary.not_runners),
        in_flight=sorted(plan.in_flight),
    )
    return summary


def _referenced(location: TableLocation, versions: list[int]) -> set[str]:
    """Every data file and deletion vector file (table-relative, decoded, canonical) some
    version of `versions` references: a live DV file is never removed."""
    options = location.storage_options()
    table = DeltaTable(location.uri, version=versions[0], storage_options=options)
    paths: set[str] = set()
    for version in versions:
        if version != versions[0]:
            table.load_as_version(version)
        actions = add_actions(table)
        paths.update(canonical(unquote(p)) for p in actions.column("path").to_pylist())
        for dv in deletion_vectors(location, table).values():
            if dv.relative_path:
                paths.add(canonical(dv.relative_path))
    return paths


def _changes_read(location: TableLocation, versions: tuple[int, ...], feed: bool) -> set[str]:
    """The files a change feed reader reads for `versions` beside their snapshots' (table-
    relative, decoded, canonical): each version's change data files and, on a table with
    the feed (`feed`), the files a version without change data files removes."""
    paths: set[str] = set()
    for version in versions:
        entry = read_commit(location, version)
        if entry is None:
            continue
        changes = entry.change_data()
        paths.update(canonical(p) for p in changes)
        if feed and not changes:
            paths.update(canonical(p) for p in entry.removed_with_data_change())
    return paths


def _remove(location: TableLocation, files: list[StoredFile]) -> list[StoredFile]:
    """Delete `files`; returns those actually removed (one already gone is not an error)."""
    fs, root = location.filesystem()
    removed = []
    for stored in files:
        try:
            fs.delete_file(f"{root}/{stored.path}")
            removed.append(stored)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("clean_file_left", path=stored.path, error=str(exc))
    return removed
