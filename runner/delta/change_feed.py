"""A Delta table's change data feed between two versions, read without Spark.

Per the Delta protocol, a version's changes are its change data files (`cdc` actions, each
row with its own `_change_type`) when it has any, and only those; otherwise the files its
`add` actions with dataChange bring are inserted rows and those its `remove` actions with
dataChange take out are deleted rows (read with the deletion vector they had). A commit
that only gives a file a new deletion vector (a DELETE on a table with deletion vectors)
removes and adds the same path: its deleted rows are those the new vector deletes and the
old one kept, as delta-spark reads them. Versions that change no data (compaction,
expansion: dataChange false) contribute nothing.

The rows come out with delta-spark's readChangeFeed columns: `_change_type`,
`_commit_version` and `_commit_timestamp` (the commit's own timestamp, as delta-rs gives it;
delta-spark gives the log file's modification time, a few milliseconds later).

Not delta-rs' `DeltaTable.load_cdf`: deltalake 1.6.6 reads a `remove` that carries a
deletion vector as the rows that vector deletes instead of the file's live rows, so on a
MERGE_ON_READ table its deletes are wrong (the delta source of a chained pipeline reads the
same `ChangeFile`s with Spark).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable

from runner.delta.arrow_read import kept_batches
from runner.delta.deletion_vectors import DeletionVector, keep_mask
from runner.delta.directory import SHOWN, canonical, missing_files
from runner.delta.log_replay import CommitEntry, read_commit
from runner.delta.snapshot import CHANGE_FEED_SETTING
from runner.errors import UserError
from runner.storage.location import TableLocation
from runner.storage.meta_columns import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION

ChangeType = Literal["insert", "update_preimage", "update_postimage", "delete"]
CHANGE_COLUMNS = (
    pa.field(CHANGE_TYPE, pa.string()),
    pa.field(COMMIT_VERSION, pa.int64()),
    pa.field(COMMIT_TIMESTAMP, pa.timestamp("ms", tz="UTC")),
)


@dataclass(frozen=True)
class ChangeFile:
    """One file to read for one version's changes, and which of its rows."""

    path: str  # table-relative, decoded
    version: int
    timestamp_ms: int  # the version's commit timestamp
    change_type: ChangeType | None  # None: a change data file, with its own _change_type
    deletion_vector: DeletionVector | None = None  # its rows this vector deletes are not read
    # only the rows this vector deletes are read: a version that changed the file's vector
    marked_by: DeletionVector | None = None

    def uri(self, table_uri: str) -> str:
        """The file's absolute path or URI under the table at `table_uri`."""
        return f"{table_uri.rstrip('/')}/{self.path}"

    @property
    def vector_files(self) -> list[str]:
        """The deletion vector files it needs (table-relative)."""
        vectors = (self.deletion_vector, self.marked_by)
        return [v.relative_path for v in vectors if v is not None and v.relative_path]


@dataclass(frozen=True)
class VersionChanges:
    version: int
    timestamp_ms: int
    instant: str  # the runner's instant (the rows' _commit_time), else the timestamp's
    operation: str | None
    files: tuple[ChangeFile, ...]


@dataclass(frozen=True)
class SchemaRewritten:
    """A schema rewrite's version and what it renamed (old -> new) and dropped."""

    version: int
    renamed: Mapping[str, str]
    dropped: tuple[str, ...]


_DROPPED = "\x00dropped"  # what a dropped column reads as: no schema's column


@dataclass(frozen=True)
class ChangePlan:
    """The files of versions first..last's changes; `schema`: the table's latest columns."""

    first: int
    last: int
    versions: tuple[VersionChanges, ...]
    schema: pa.Schema
    # the runner's schema rewrites after `first` (schema_evolution full), in version order:
    # a file written before one has the names (and dropped columns) from before it
    rewrites: tuple[SchemaRewritten, ...] = ()

    def renamed_at(self, version: int) -> dict[str, str]:
        """How the files of `version` name the latest schema's columns: file name -> latest
        name; a column dropped since maps to a name no schema has (a later column of its
        name is another column)."""
        names: dict[str, str] = {}  # file name -> its name after the rewrites so far
        for rewrite in self.rewrites:
            if rewrite.version <= version:
                continue
            changed = {**{c: c for c in rewrite.renamed}, **{c: c for c in rewrite.dropped}}
            names = {**changed, **names}  # a file column not renamed before: its own name
            names = {
                old: _DROPPED if now in rewrite.dropped else rewrite.renamed.get(now, now)
                for old, now in names.items()
            }
        return {old: now for old, now in names.items() if old != now}

    @property
    def files(self) -> list[ChangeFile]:
        return [f for v in self.versions for f in v.files]

    def between_instants(self, since: str | None, until: str | None) -> ChangePlan:
        """Only the versions whose instant is in (since, until]: a writer that committed
        after another one that started later leaves versions out of instant order."""
        kept = tuple(v for v in self.versions if _in_range(v.instant, since, until))
        return replace(self, versions=kept)


def has_change_feed(table: DeltaTable) -> bool:
    """The table keeps Delta's change data feed at its loaded version."""
    return _feed_on(table.metadata().configuration)


def format_instant(timestamp_ms: int) -> str:
    """A timestamp in milliseconds as an instant, yyyyMMddHHmmssSSS UTC."""
    moment = dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.UTC)
    return moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 1000:03d}"


def commit_instant(commit_info: Mapping[str, Any]) -> str:
    """A commit's instant: the runner's (commitInfo.runner.instant), else its timestamp's."""
    meta = commit_info.get("runner")
    if isinstance(meta, dict) and meta.get("instant"):
        return str(meta["instant"])
    return format_instant(int(commit_info["timestamp"]))


def versions_for_instants(
    location: TableLocation, table: DeltaTable, since: str | None, until: str | None
) -> tuple[int, int] | None:
    """The first and last versions that change data and whose instant is in
    (since, until]; None if none is. (A version that changes none, like the commit that
    creates a table during a run, has no instant of its own: its timestamp's is later than
    its run's, so it would land in the next range.)

    Scans the log from the latest version back to the first one committed at or before
    `since`: a commit is never older than its run's instant, so no earlier version can be
    in range."""
    found = []
    newer = None  # the instant of the version after the one at hand
    for version in range(table.version(), -1, -1):
        entry = read_commit(location, version)
        if entry is None:
            raise UserError(
                f"the changes {_range_text(since, until)} of {location.uri} cannot be read: "
                f"its Delta log no longer holds version {version} (removed after a "
                "checkpoint, delta.logRetentionDuration), which they may include; give a "
                + (
                    f"--since of {newer} (version {version + 1}'s instant) or later"
                    if newer
                    else "later --since"
                )
            )
        timestamp = _timestamp(location, entry)
        newer = _instant(entry.commit_info, timestamp)
        if _in_range(newer, since, until) and _changes_data(entry):
            found.append(version)
        if since is not None and format_instant(timestamp) <= since:
            break
    return (min(found), max(found)) if found else None


def plan_changes(
    location: TableLocation,
    table: DeltaTable,
    first: int,
    last: int,
    skipped: Collection[int] = (),
) -> ChangePlan:
    """The files of the changes of versions first..last (inclusive) of `table`, but those
    of the `skipped` versions (a restore and the versions it undid: runner/delta/restores.py),
    whose log entries and files are not needed either."""
    latest = table.version()
    if not 0 <= first <= last <= latest:
        raise UserError(
            f"versions {first}..{last} of {location.uri}: give 0 <= first <= last <= "
            f"{latest} (its latest version)"
        )
    entries = _entries(location, first, last, skipped)
    _check_feed_on(location, entries)
    versions = tuple(_version_changes(location, entry) for entry in entries)
    later = _entries(location, last + 1, latest, skipped) if last < latest else []
    rewrites = tuple(
        SchemaRewritten(e.version, dict(meta.get("renamed", {})), tuple(meta.get("dropped", ())))
        for e in [*entries, *later]
        if e.version > first
        and (meta := e.commit_info.get("runner") or {}).get("operation") == "schema_rewrite"
    )
    plan = ChangePlan(first, last, versions, pa.schema(table.schema().to_arrow()), rewrites)
    _check_files_kept(location, plan)
    return plan


def read_changes(location: TableLocation, plan: ChangePlan) -> pa.Table:
    """The changed rows: the table's columns (a file without a column reads null) and
    _change_type, _commit_version, _commit_timestamp; by version, then as stored."""
    fs, root = location.filesystem()
    data = plan.schema
    with_type = pa.schema([*data, CHANGE_COLUMNS[0]])
    out = pa.schema([*data, *CHANGE_COLUMNS])
    parts = []
    for change in plan.files:
        schema = data if change.change_type else with_type
        for part in _file_rows(fs, root, change, schema, plan.renamed_at(change.version)):
            n = part.num_rows
            if change.change_type:
                part = part.append_column(CHANGE_COLUMNS[0], pa.repeat(change.change_type, n))
            part = part.append_column(CHANGE_COLUMNS[1], pa.repeat(change.version, n))
            stamp = pa.scalar(change.timestamp_ms, CHANGE_COLUMNS[2].type)
            parts.append(part.append_column(CHANGE_COLUMNS[2], pa.repeat(stamp, n)))
    return pa.concat_tables(parts).cast(out) if parts else out.empty_table()


def _file_rows(
    fs: pafs.FileSystem,
    root: str,
    change: ChangeFile,
    schema: pa.Schema,
    renamed: Mapping[str, str],
) -> list[pa.Table]:
    parquet = pq.ParquetFile(f"{root}/{change.path}", filesystem=fs)
    rows = parquet.metadata.num_rows
    keep: np.ndarray | None = None
    if change.deletion_vector is not None:
        keep = keep_mask(fs, root, change.deletion_vector, rows)
    if change.marked_by is not None:
        marked = ~keep_mask(fs, root, change.marked_by, rows)
        keep = marked if keep is None else keep & marked
    return [part for part in kept_batches(parquet, keep, schema, renamed) if part.num_rows]


def _entries(
    location: TableLocation, first: int, last: int, skipped: Collection[int]
) -> list[CommitEntry]:
    entries, gone = [], []
    for version in (v for v in range(first, last + 1) if v not in skipped):
        entry = read_commit(location, version)
        if entry is None:
            gone.append(version)
        else:
            entries.append(entry)
    if gone:
        raise UserError(
            f"the changes of versions {first}..{last} of {location.uri} cannot be read: the "
            f"Delta log no longer holds version(s) {_versions_text(gone)} (log cleanup after "
            f"a checkpoint, delta.logRetentionDuration); read changes from version "
            f"{gone[-1] + 1} on, or read the table as it is now"
        )
    return entries


def _check_feed_on(location: TableLocation, entries: Sequence[CommitEntry]) -> None:
    """Every version of `entries` was written with the change data feed on."""
    on = _feed_at(location, entries[0])
    off: list[int] = []
    for entry in entries:
        configuration = _configuration(entry)
        if configuration is not None:
            on = _feed_on(configuration)
        if not on:
            off.append(entry.version)
    if not off:
        return
    first, last = entries[0].version, entries[-1].version
    if off[-1] < last:
        gap = next(e for e in entries if e.version == off[-1])
        instant = _instant(gap.commit_info, _timestamp(location, gap))
        fix = (
            f"it is on from version {off[-1] + 1}: read the changes of later versions "
            f"(runner read --since {instant}, the instant of version {off[-1]})"
        )
    else:
        fix = "set target.change_data_feed: true; the feed is kept from the next run on"
    raise UserError(
        f"the changes of versions {first}..{last} of {location.uri} cannot be read: it had no "
        f"change data feed ({CHANGE_FEED_SETTING}) at version(s) {_versions_text(off)}; {fix}"
    )


def _feed_at(location: TableLocation, entry: CommitEntry) -> bool:
    """The feed setting at `entry`'s version, loading that version if it sets nothing."""
    configuration = _configuration(entry)
    if configuration is not None:
        return _feed_on(configuration)
    try:
        table = DeltaTable(
            location.uri, version=entry.version, storage_options=location.storage_options()
        )
    except Exception as exc:  # delta-rs: the log before it is gone
        raise UserError(
            f"version {entry.version} of {location.uri} cannot be loaded ({exc}); read "
            "changes from a later version"
        ) from None
    return has_change_feed(table)


def _configuration(entry: CommitEntry) -> dict[str, str] | None:
    """The table settings a version's metaData action sets; None if it has none."""
    for action in entry.actions:
        if "metaData" in action:
            return dict(action["metaData"].get("configuration") or {})
    return None


def _feed_on(configuration: Mapping[str, str]) -> bool:
    return str(configuration.get(CHANGE_FEED_SETTING, "")).lower() == "true"


def _version_changes(location: TableLocation, entry: CommitEntry) -> VersionChanges:
    info = entry.commit_info
    timestamp = _timestamp(location, entry)
    files = _change_files(entry, timestamp)
    operation = info.get("operation")
    return VersionChanges(
        entry.version, timestamp, _instant(info, timestamp), operation, tuple(files)
    )


def _change_files(entry: CommitEntry, timestamp: int) -> list[ChangeFile]:
    """The version's change data files, or its data changes read as inserts and deletes."""
    version, actions = entry.version, entry.actions
    cdc = [unquote(a["cdc"]["path"]) for a in actions if "cdc" in a]
    if cdc:
        return [ChangeFile(path, version, timestamp, None) for path in cdc]
    adds = _data_changes(actions, "add")
    removes = _data_changes(actions, "remove")
    files = []
    for path, vector in removes.items():
        if path in adds:
            files += _vector_change(path, version, timestamp, vector, adds[path])
        else:
            files.append(ChangeFile(path, version, timestamp, "delete", vector))
    for path, vector in adds.items():
        if path not in removes:
            files.append(ChangeFile(path, version, timestamp, "insert", vector))
    return files


def _vector_change(
    path: str,
    version: int,
    timestamp: int,
    old: DeletionVector | None,
    new: DeletionVector | None,
) -> list[ChangeFile]:
    """A file removed and added again in one version with another deletion vector: its
    rows the new vector deletes are deleted, those only the old one deleted come back."""
    files = []
    if new is not None:
        files.append(ChangeFile(path, version, timestamp, "delete", old, marked_by=new))
    if old is not None:
        files.append(ChangeFile(path, version, timestamp, "insert", new, marked_by=old))
    return files


def _data_changes(actions: Sequence[dict[str, Any]], kind: str) -> dict[str, DeletionVector | None]:
    """Per path (decoded, in log order) of the version's `kind` actions with dataChange:
    the deletion vector it names."""
    found: dict[str, DeletionVector | None] = {}
    for action in actions:
        file = action.get(kind)
        if file is None or not file.get("dataChange", True):
            continue
        vector = file.get("deletionVector")
        found[unquote(file["path"])] = DeletionVector.from_log(vector) if vector else None
    return found


def _changes_data(entry: CommitEntry) -> bool:
    for action in entry.actions:
        if "cdc" in action:
            return True
        file = action.get("add") or action.get("remove")
        if file is not None and file.get("dataChange", True):
            return True
    return False


def _timestamp(location: TableLocation, entry: CommitEntry) -> int:
    """The commit's timestamp (ms): its in-commit timestamp, its commitInfo's, else the
    log file's modification time."""
    info = entry.commit_info
    for key in ("inCommitTimestamp", "timestamp"):
        if info.get(key) is not None:
            return int(info[key])
    fs, root = location.filesystem()
    mtime = fs.get_file_info(f"{root}/_delta_log/{entry.version:020d}.json").mtime
    return int(mtime.timestamp() * 1000) if mtime else 0


def _instant(info: Mapping[str, Any], timestamp: int) -> str:
    return commit_instant({**info, "timestamp": timestamp})


def _in_range(instant: str, since: str | None, until: str | None) -> bool:
    return (since is None or instant > since) and (until is None or instant <= until)


def _check_files_kept(location: TableLocation, plan: ChangePlan) -> None:
    needed: dict[str, int] = {}  # canonical path: the first version that reads it
    for change in plan.files:
        for path in (change.path, *change.vector_files):
            needed.setdefault(canonical(path), change.version)
    gone = missing_files(location, needed)
    if not gone:
        return
    versions = sorted({needed[path] for path in gone})
    shown = ", ".join(gone[:SHOWN]) + (", ..." if len(gone) > SHOWN else "")
    fix = (
        f"read changes from version {versions[-1] + 1} on"
        if versions[-1] < plan.last
        else "read the table as it is now"
    )
    raise UserError(
        f"the changes of version(s) {_versions_text(versions)} of {location.uri} cannot be "
        f"read: {len(gone)} of their files are gone ({shown}), removed by `runner clean`, "
        f"which keeps the files of the last target.cleaning.retain_commits versions; {fix} "
        "(and keep more versions from now on)"
    )


def _range_text(since: str | None, until: str | None) -> str:
    if since is None:
        return f"up to {until}" if until else "since the first commit"
    return f"in ({since}, {until or 'now'}]"


def _versions_text(versions: Sequence[int]) -> str:
    shown = ", ".join(str(v) for v in versions[:SHOWN])
    return shown + (f" and {len(versions) - SHOWN} more" if len(versions) > SHOWN else "")
