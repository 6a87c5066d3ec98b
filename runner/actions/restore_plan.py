"""What `runner restore` would change, read from the Delta log alone (no Spark, no data file).

As Delta's RESTORE: the live files (with their deletion vectors) of the chosen version are
compared with the live files now. The restore's version removes the files live now but not
then, adds back the files live then but not now (with the deletion vector and statistics
they had then), and a file live in both with another deletion vector is removed and added
back with the old one. With them come what the runner reads its files by: the `runner.*`
settings as of then (bucket counts and layout: files written before an expansion carry the
old bucket ids) and the schema as of then (the restored files' columns; a column added
since goes, and the next run that writes it adds it again). The `delta.*` settings and the
protocol stay as they are now (a change data feed turned on since stays on). Every
pipeline's source checkpoints go back to what they were then (runner/sources/checkpoint.py),
and the batches committed since (`--batch-id`) are marked undone, so each can run again.

A version is refused when it is the current one, when the log no longer holds it (log
cleanup after a checkpoint), or when a file it needs is gone (`runner clean`): the refusal
names the versions that can still be restored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from runner.delta.deletion_vectors import keep_mask
from runner.delta.directory import SHOWN, canonical, missing_files, walk
from runner.delta.log_entry import BATCH_UNDONE
from runner.delta.log_replay import live_adds, read_commit
from runner.delta.snapshot import DataFile, TableSnapshot
from runner.delta.table_config import PREFIX
from runner.delta.versions import version_named
from runner.errors import UserError
from runner.sources.checkpoint import checkpoints_as_of
from runner.storage.in_flight import heartbeats
from runner.storage.location import TableLocation


@dataclass(frozen=True)
class RestorePlan:
    """The version a restore commits on top of `snapshot` to bring back version `to`."""

    snapshot: TableSnapshot  # the table as read: the commit goes on no other version
    to: int
    removed: tuple[DataFile, ...]  # live now and not then (or then with another vector)
    restored: tuple[DataFile, ...]  # live then and not now, as logged then
    configuration: dict[str, str]
    schema_json: str  # the Delta schema as of `to`
    schema: pa.Schema  # the same, as Arrow: the restored files' columns
    settings: dict[str, list[str | None]]  # runner.* settings that change: [now, then]
    columns_dropped: tuple[str, ...]  # columns now, not then
    columns_back: tuple[str, ...]  # columns then, not now
    checkpoints: dict[str, dict[str, Any] | None]  # every pipeline's, as of `to`
    checkpoints_now: dict[str, dict[str, Any] | None]
    batches: tuple[tuple[str, int], ...]  # app transactions set back (BATCH_UNDONE)
    rows_removed: int
    rows_added: int

    @property
    def location(self) -> TableLocation:
        return self.snapshot.location

    @property
    def version(self) -> int:
        return self.snapshot.version

    @property
    def undone_batches(self) -> list[str]:
        return [app_id for app_id, version in self.batches if version == BATCH_UNDONE]

    @property
    def checkpoints_changed(self) -> dict[str, dict[str, Any] | None]:
        return {
            p: points
            for p, points in self.checkpoints.items()
            if points != self.checkpoints_now.get(p)
        }

    @property
    def changes_anything(self) -> bool:
        return bool(
            self.removed
            or self.restored
            or self.settings
            or self.columns_dropped
            or self.columns_back
            or self.checkpoints_changed
            or self.batches
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.snapshot.uri,
            "version": self.version,
            "to": self.to,
            "files_removed": sorted(f.path for f in self.removed),
            "files_added": sorted(f.path for f in self.restored),
            "rows_removed": self.rows_removed,
            "rows_added": self.rows_added,
            "settings": self.settings,
            "columns_dropped": list(self.columns_dropped),
            "columns_back": list(self.columns_back),
            "checkpoints": self.checkpoints_changed,
            "batches_undone": self.undone_batches,
        }


@dataclass
class Refusal:
    """Why a version cannot be restored, for the one-line error."""

    version: int
    why: str
    restorable: list[int] = field(default_factory=list)


def plan_restore(snapshot: TableSnapshot, to_text: str) -> RestorePlan:
    """The restore of the version `to_text` names (a number or an instant) on `snapshot`."""
    to = version_named(snapshot.table, to_text, "--to")
    latest = snapshot.version
    if to == latest:
        raise UserError(
            f"--to {to_text}: version {to} is the current version of {snapshot.uri}, nothing "
            "to restore; give an older version (`runner history SPEC` lists the commits)"
        )
    _refuse_expansion_in_flight(snapshot.location)
    then = _load(snapshot, to)
    then_files = _files_as_logged(snapshot.location, then, to)
    _refuse_missing_files(snapshot, to, then_files)
    now_files = {f.path: f for f in snapshot.files()}
    removed = [f for p, f in now_files.items() if _differs(f, then_files.get(p))]
    restored = [f for p, f in then_files.items() if _differs(f, now_files.get(p))]
    rows_removed, rows_added = _row_counts(snapshot.location, removed, restored)
    now_schema, then_schema = _fields(snapshot.table), _fields(then)
    return RestorePlan(
        snapshot=snapshot,
        to=to,
        removed=tuple(sorted(removed, key=lambda f: f.path)),
        restored=tuple(sorted(restored, key=lambda f: f.path)),
        configuration=_configuration(snapshot.configuration, then.metadata().configuration),
        schema_json=then.schema().to_json(),
        schema=pa.schema(then.schema().to_arrow()),
        settings=_settings_changed(snapshot.configuration, then.metadata().configuration),
        columns_dropped=tuple(n for n in now_schema if n not in then_schema),
        columns_back=tuple(n for n in then_schema if n not in now_schema),
        checkpoints=checkpoints_as_of(snapshot, to),
        checkpoints_now=checkpoints_as_of(snapshot, latest),
        batches=tuple(_batches_set_back(snapshot, then, to)),
        rows_removed=rows_removed,
        rows_added=rows_added,
    )


def _differs(f: DataFile, other: DataFile | None) -> bool:
    return other is None or other.deletion_vector != f.deletion_vector


def _load(snapshot: TableSnapshot, version: int) -> DeltaTable:
    location = snapshot.location
    try:
        return DeltaTable(location.uri, version=version, storage_options=location.storage_options())
    except Exception:  # delta-rs: the log before it is gone
        raise _refused(
            snapshot,
            Refusal(
                version,
                "the Delta log no longer holds it (log cleanup after a checkpoint, "
                "delta.logRetentionDuration)",
            ),
        ) from None


def _files_as_logged(location: TableLocation, then: DeltaTable, to: int) -> dict[str, DataFile]:
    """The live files of version `to`, each with the statistics and deletion vector its add
    action logged (what the restore adds back)."""
    adds = live_adds(location, to)
    files = TableSnapshot(location, then).files()
    return {
        f.path: replace(f, stats=adds[f.path].stats, deletion_vector=adds[f.path].deletion_vector)
        for f in files
    }


def _needed(files: Mapping[str, DataFile]) -> list[str]:
    vectors = (f.deletion_vector.relative_path for f in files.values() if f.deletion_vector)
    return [*files, *filter(None, vectors)]


def _refuse_missing_files(
    snapshot: TableSnapshot, to: int, then_files: Mapping[str, DataFile]
) -> None:
    gone = missing_files(snapshot.location, _needed(then_files))
    if not gone:
        return
    shown = ", ".join(gone[:SHOWN]) + (", ..." if len(gone) > SHOWN else "")
    why = (
        f"{len(gone)} of its files are gone ({shown}), removed by `runner clean`, which keeps "
        "the files of the last target.cleaning.retain_commits versions"
    )
    raise _refused(snapshot, Refusal(to, why))


def _refused(snapshot: TableSnapshot, refusal: Refusal) -> UserError:
    """The error for a version that cannot be restored, naming those that can: the versions
    from the latest back that the log holds and whose files are all there."""
    restorable = restorable_versions(snapshot, refusal.version)
    can = (
        f"versions {restorable[0]}..{restorable[-1]} can be restored"
        if len(restorable) > 1
        else f"version {restorable[0]} can be restored"
        if restorable
        else "no older version can be restored"
    )
    return UserError(
        f"version {refusal.version} of {snapshot.uri} cannot be restored: {refusal.why}; {can}"
    )


def restorable_versions(snapshot: TableSnapshot, below: int) -> list[int]:
    """The versions from just before the latest back to (not including) `below` that can be
    restored, oldest first: they stop at the first one the log or the files no longer hold."""
    location = snapshot.location
    present = {canonical(f.path) for f in walk(location)}
    found: list[int] = []
    for version in range(snapshot.version - 1, below, -1):
        try:
            table = DeltaTable(
                location.uri, version=version, storage_options=location.storage_options()
            )
            files = _files_as_logged(location, table, version)
        except Exception:  # the log before it is gone
            break
        if not {canonical(p) for p in _needed(files)} <= present:
            break
        found.insert(0, version)
    return found


def _refuse_expansion_in_flight(location: TableLocation) -> None:
    busy = [b for b in heartbeats(location) if b.alive and b.what == "expansion"]
    if busy:
        raise UserError(
            f"a bucket expansion of {location.uri} is in flight (instant {busy[0].instant}): "
            "let it finish (or stop it), then run the restore"
        )


def _row_counts(
    location: TableLocation, removed: list[DataFile], restored: list[DataFile]
) -> tuple[int, int]:
    """Live rows that go, and rows that come back; a file in both (another deletion vector)
    counts the rows one vector deletes and the other keeps."""
    fs, root = location.filesystem()
    then = {f.path: f for f in restored}
    gone = sum(f.live_records for f in removed if f.path not in then)
    back = sum(f.live_records for f in restored if f.path not in {r.path for r in removed})
    for now in removed:
        old = then.get(now.path)
        if old is None:
            continue
        keep_now = keep_mask(fs, root, now.deletion_vector, now.num_records)
        keep_then = keep_mask(fs, root, old.deletion_vector, old.num_records)
        gone += int(np.sum(keep_now & ~keep_then))
        back += int(np.sum(keep_then & ~keep_now))
    return gone, back


def _configuration(now: Mapping[str, str], then: Mapping[str, str]) -> dict[str, str]:
    """The runner's settings as of then, every other setting as now."""
    kept = {k: v for k, v in now.items() if not k.startswith(PREFIX)}
    return kept | {k: v for k, v in then.items() if k.startswith(PREFIX)}


def _settings_changed(
    now: Mapping[str, str], then: Mapping[str, str]
) -> dict[str, list[str | None]]:
    keys = sorted(k for k in {*now, *then} if k.startswith(PREFIX))
    return {k: [now.get(k), then.get(k)] for k in keys if now.get(k) != then.get(k)}


def _fields(table: DeltaTable) -> list[str]:
    return [f["name"] for f in json.loads(table.schema().to_json())["fields"]]


def _batches_set_back(snapshot: TableSnapshot, then: DeltaTable, to: int) -> list[tuple[str, int]]:
    """The app transactions committed after `to`, each set back to its version then
    (BATCH_UNDONE for a batch committed only since)."""
    app_ids: list[str] = []
    for version in range(to + 1, snapshot.version + 1):
        entry = read_commit(snapshot.location, version)
        if entry is None:
            raise _refused(
                snapshot, Refusal(to, f"the Delta log no longer holds version {version}")
            )
        app_ids += [a["txn"]["appId"] for a in entry.actions if "txn" in a]
    back = []
    for app_id in dict.fromkeys(app_ids):
        was = then.transaction_version(app_id)
        wanted = BATCH_UNDONE if was is None else was
        if snapshot.table.transaction_version(app_id) != wanted:
            back.append((app_id, wanted))
    return back
