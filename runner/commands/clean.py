"""`runner clean`: remove the runner's data files that no reader needs, like Hudi's cleaner.

Removed: files the runner wrote (their names carry bucket, file group, write token and
instant) that no version among the last `retain_commits` references: files replaced before
those versions, and files of runs that never committed (a killed run's). Kept: every file
those versions reference (a reader of any of them, or a time travel to them, still works),
every file younger than `min_age_hours` (a run may still be writing it), and everything the
runner did not write, which is reported and never touched. The Delta log is not changed.

delta-rs' `vacuum(full=True)` is not used: it deletes every file the log does not reference,
whoever wrote it, and live deletion-vector files too. The runner's deletion vector files
(`_deletion_vectors/<instant>/...`) are cleaned like its data files: removed once no kept
version references them.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import structlog
from deltalake import DeltaTable

from runner.errors import UserError
from runner.ops.summary import human_size
from runner.spec.model import PipelineSpec
from runner.table.directory import StoredFile, walk
from runner.table.log_replay import deletion_vectors
from runner.table.snapshot import open_table
from runner.table.storage import TableLocation

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
        if self.not_runners:
            lines.append(f"{len(self.not_runners)} file(s) the runner did not write, left alone:")
            lines += _listed(self.not_runners)
        return "\n".join(lines)


def _listed(paths: list[str]) -> list[str]:
    lines = [f"  {path}" for path in paths[:SHOWN]]
    if len(paths) > SHOWN:
        lines.append(f"  ... and {len(paths) - SHOWN} more")
    return lines


def clean_table(
    spec: PipelineSpec,
    retain_commits: int | None = None,
    min_age_hours: int | None = None,
    dry_run: bool = False,
) -> CleanSummary:
    cleaning = spec.target.cleaning
    retain = retain_commits or cleaning.retain_commits
    min_age = cleaning.min_age_hours if min_age_hours is None else min_age_hours
    snapshot = open_table(spec.target.path)
    if snapshot is None:
        raise UserError(f"no table at {spec.target.path}: nothing to clean")
    version = snapshot.version
    keep = list(range(max(0, version - retain + 1), version + 1))
    needed = _referenced(snapshot.location, keep)
    young_after_ns = time.time_ns() - min_age * 3600 * 1_000_000_000
    summary = CleanSummary(spec.target.path, version, keep, dry_run)
    doomed: list[StoredFile] = []
    for stored in walk(snapshot.location):
        if stored.path in needed:
            continue
        if not stored.written_by_runner:
            summary.not_runners.append(stored.path)
        elif stored.mtime_ns is None or stored.mtime_ns > young_after_ns:
            summary.too_young += 1
        else:
            doomed.append(stored)
    if not dry_run:
        doomed = _remove(snapshot.location, doomed)
    summary.files = [f.path for f in doomed]
    summary.bytes = sum(f.size for f in doomed)
    log.info(
        "clean_done" if not dry_run else "clean_planned",
        files=len(summary.files),
        bytes=summary.bytes,
        kept_versions=f"{keep[0]}..{keep[-1]}",
        left_alone=len(summary.not_runners),
    )
    return summary


def _referenced(location: TableLocation, versions: list[int]) -> set[str]:
    """Every data file and deletion vector file (table-relative, decoded) some version of
    `versions` references: a live DV file is never removed."""
    options = location.storage_options()
    table = DeltaTable(location.uri, version=versions[0], storage_options=options)
    paths: set[str] = set()
    for version in versions:
        if version != versions[0]:
            table.load_as_version(version)
        actions = pa.table(table.get_add_actions(flatten=True))
        paths.update(unquote(p) for p in actions.column("path").to_pylist())
        for dv in deletion_vectors(location, table).values():
            if dv.relative_path:
                paths.add(dv.relative_path)
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
