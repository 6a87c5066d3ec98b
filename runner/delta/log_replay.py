"""What delta-rs does not expose: each live file's deletion vector and statistics string,
and what one version's commit entry names besides its live files.

`DeltaTable.get_add_actions()` has neither the `deletionVector` descriptor nor the raw stats,
and a MERGE_ON_READ commit needs both (a `remove` must name the file's current DV, and the
`add` that gives it a new DV keeps its stats). So this module replays the Delta log from the
last classic checkpoint (the kind delta-rs writes) up to a version, keeping per file path
its last `add`. It is used only on tables with the deletionVectors feature.

A version's change data files (its `cdc` actions, under `_change_data/`) and the files it
removes are in no snapshot: `read_commit` reads them from that version's JSON entry.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable

from runner.delta.deletion_vectors import DeletionVector
from runner.errors import RunnerError
from runner.storage.location import TableLocation

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.\d{10}\.\d{10})?\.parquet$")
_V2_CHECKPOINT = re.compile(r"^\d{20}\.checkpoint\.[0-9a-f-]{36}\.(json|parquet)$")
DELETION_VECTORS = "deletionVectors"  # the table feature


@dataclass(frozen=True)
class CommitEntry:
    """One version's JSON commit entry, as its actions."""

    version: int
    actions: tuple[dict[str, Any], ...]

    @property
    def commit_info(self) -> dict[str, Any]:
        return next((a["commitInfo"] for a in self.actions if "commitInfo" in a), {})

    def change_data(self) -> list[str]:
        """The change data files its `cdc` actions name (table-relative, decoded)."""
        return [unquote(a["cdc"]["path"]) for a in self.actions if "cdc" in a]

    def removed_with_data_change(self) -> list[str]:
        """The files its `remove` actions with dataChange take out, each with the deletion
        vector file it had (table-relative, decoded): what a change data feed reader reads
        as deleted rows in a version without change data files."""
        paths = []
        for action in self.actions:
            remove = action.get("remove")
            if remove is None or not remove.get("dataChange", True):
                continue
            paths.append(unquote(remove["path"]))
            dv = remove.get("deletionVector")
            relative = DeletionVector.from_log(dv).relative_path if dv else None
            if relative:
                paths.append(relative)
        return paths


def read_commit(location: TableLocation, version: int) -> CommitEntry | None:
    """Version `version`'s commit entry; None where the log no longer holds it (removed
    after a checkpoint, as Delta's log retention does) or never did."""
    fs, root = location.filesystem()
    try:
        with fs.open_input_stream(f"{root}/_delta_log/{version:020d}.json") as f:
            text = f.read().decode()
    except FileNotFoundError:
        return None
    return CommitEntry(version, tuple(json.loads(line) for line in text.splitlines() if line))


@dataclass(frozen=True)
class LoggedAdd:
    stats: str | None
    deletion_vector: DeletionVector | None
    modification_time: int


def has_deletion_vectors(table: DeltaTable) -> bool:
    """The table has the deletionVectors feature (a MERGE_ON_READ table)."""
    return DELETION_VECTORS in (table.protocol().reader_features or [])


def deletion_vectors(location: TableLocation, table: DeltaTable) -> dict[str, DeletionVector]:
    """Per live file with a deletion vector at the table's loaded version (table-relative,
    decoded path); empty, with no log read, for a table without the feature."""
    if not has_deletion_vectors(table):
        return {}
    adds = live_adds(location, table.version())
    return {path: a.deletion_vector for path, a in adds.items() if a.deletion_vector}


def live_adds(location: TableLocation, version: int) -> dict[str, LoggedAdd]:
    """Per live file (table-relative, decoded path): its add action at `version`."""
    fs, root = location.filesystem()
    log_dir = f"{root}/_delta_log"
    listing = fs.get_file_info(pafs.FileSelector(log_dir))
    commits: dict[int, str] = {}
    checkpoints: dict[int, list[str]] = {}
    for info in listing:
        name = info.base_name
        if _V2_CHECKPOINT.match(name):
            raise RunnerError(
                f"{location.uri} has a v2 checkpoint ({name}), which the runner does not read"
            )
        if m := _COMMIT.match(name):
            commits[int(m[1])] = info.path
        elif m := _CHECKPOINT.match(name):
            checkpoints.setdefault(int(m[1]), []).append(info.path)
    start = max((v for v in checkpoints if v <= version), default=-1)
    adds: dict[str, LoggedAdd] = {}
    if start >= 0:
        for path in sorted(checkpoints[start]):
            _read_checkpoint(fs, path, adds)
    for v in range(start + 1, version + 1):
        if v not in commits:
            raise RunnerError(
                f"the Delta log of {location.uri} misses version {v} (and no checkpoint "
                "covers it); the table cannot be read"
            )
        with fs.open_input_stream(commits[v]) as f:
            _apply_commit(f.read().decode(), adds)
    return adds


def _read_checkpoint(fs: pafs.FileSystem, path: str, adds: dict[str, LoggedAdd]) -> None:
    table = pq.read_table(path, columns=["add"], filesystem=fs)
    for row in table.column("add").to_pylist():
        if row is None:
            continue
        dv = row.get("deletionVector")
        adds[unquote(row["path"])] = LoggedAdd(
            row.get("stats"),
            DeletionVector.from_log(dv) if dv else None,
            row.get("modificationTime") or 0,
        )


def _apply_commit(text: str, adds: dict[str, LoggedAdd]) -> None:
    """Removes first: a commit that gives a file a new DV removes and adds the same path."""
    actions: list[dict[str, Any]] = [json.loads(line) for line in text.splitlines() if line]
    for action in actions:
        if "remove" in action:
            adds.pop(unquote(action["remove"]["path"]), None)
    for action in actions:
        if "add" in action:
            add = action["add"]
            dv = add.get("deletionVector")
            adds[unquote(add["path"])] = LoggedAdd(
                add.get("stats"),
                DeletionVector.from_log(dv) if dv else None,
                add.get("modificationTime") or 0,
            )
