"""Delta table sources: another table read in full, or only what changed since the last
run (`incremental: {since: last}`), so pipelines chain table to table.

An incremental read of a table with Delta's change data feed reads the changes of the
versions after the checkpoint (runner/delta/change_feed.py), deletes included: each key's
last change is handed on (runner/sources/delta_changes.py), so a delete in the source
deletes the key downstream. Without a change feed deletes cannot be seen, and the run
refuses, unless the source says `deletes: ignore`: then the instants of the source's
commits after the checkpoint are taken from its log, the files whose `_commit_time`
statistics can hold one of them are kept, and the rows are filtered to those instants (old
files are never scanned; it needs a runner table, with `_commit_time` like Hudi's
`_hoodie_commit_time`).

A restore of the table in the versions read (runner/delta/restores.py) is followed by its
net change: the versions it undid and the restore itself are skipped, so the pipeline is
handed neither a batch nor its undo. Where the pipeline has already read versions a
restore undid, the read keeps every version (the restore's undo takes them out again) and
says so (`DeltaRead.net.undone`): whether the pipeline can follow is decided by its target
(runner/sources/restored_source.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import structlog
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from runner.delta.change_feed import ChangePlan, has_change_feed, plan_changes
from runner.delta.deletion_vectors import DeletionVector
from runner.delta.log_replay import DELETION_VECTORS, deletion_vectors
from runner.delta.restores import NetChanges, net_changes
from runner.delta.snapshot import add_actions
from runner.errors import UserError
from runner.spec.model import Incremental
from runner.storage.location import locate, storage_options
from runner.storage.meta_columns import COMMIT_TIME

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class DeltaRead:
    paths: list[str]  # data files to read (absolute URIs)
    instants: list[str] | None  # keep only rows of these commits (None: every row)
    version: int  # the source version read
    files_total: int
    bytes: int
    # files of `paths` with a deletion vector, by file name: their deleted rows are dropped
    deletion_vectors: dict[str, DeletionVector]
    changes: ChangePlan | None = None  # read the change data feed of these versions instead
    net: NetChanges | None = None  # an incremental read's versions: applied, skipped, undone


def open_source_table(uri: str, where: str) -> DeltaTable:
    try:
        table = DeltaTable(uri, storage_options=storage_options(uri))
    except TableNotFoundError:
        raise UserError(f"{where}: no Delta table at {uri}") from None
    if table.metadata().partition_columns:
        raise UserError(
            f"{where}: {uri} is a Delta table partitioned by "
            f"{', '.join(table.metadata().partition_columns)}; the runner reads unpartitioned "
            "Delta tables (its own are), partitioned ones need delta-spark"
        )
    features = table.protocol().reader_features or []
    if features and set(features) - {"timestampNtz", DELETION_VECTORS}:
        raise UserError(
            f"{where}: {uri} uses Delta reader features {', '.join(features)}, which reading "
            "its parquet files directly would get wrong; read it with delta-spark"
        )
    return table


def plan_delta_read(uri: str, since: Any, incremental: Incremental | None, where: str) -> DeltaRead:
    """The files (and commit instants, or changes) of one read of the table at `uri`."""
    table = open_source_table(uri, where)
    version = table.version()
    actions = add_actions(table).to_pylist()
    # the log's paths are URL-encoded; Spark wants them as they are on disk
    root = uri.rstrip("/")
    if incremental is None or since is None:
        paths = [f"{root}/{unquote(row['path'])}" for row in actions]
        size = sum(row["size_bytes"] for row in actions)
        return DeltaRead(paths, None, version, len(actions), size, _vectors(table, uri, paths))
    start = _checkpoint_version(since, where)
    net = _net_changes(uri, start, version)
    if incremental.deletes == "propagate":
        return _changes_read(uri, table, net, len(actions), where)
    if COMMIT_TIME not in table.schema().to_arrow().names:
        raise UserError(
            f"{where}: incremental since: last needs a runner table (a {COMMIT_TIME} column); "
            f"{uri} has none. Read it in full (drop `incremental`)"
        )
    skipped = net.skipped
    instants = sorted(
        {
            str(c["runner"]["instant"])
            for c in table.history()
            if c["version"] > start
            and c["version"] not in skipped
            and isinstance(c.get("runner"), dict)
            # an expansion moves rows without changing them, a checkpoint commit has none
            and c["runner"].get("operation") not in ("expand", "checkpoint")
            and c["runner"].get("instant")
        }
    )
    keep = [row for row in actions if _may_hold(row, instants)]
    paths = [f"{root}/{unquote(row['path'])}" for row in keep]
    size = sum(r["size_bytes"] for r in keep)
    vectors = _vectors(table, uri, paths)
    return DeltaRead(paths, instants, version, len(actions), size, vectors, net=net)


def _net_changes(uri: str, start: int, version: int) -> NetChanges:
    """The versions after the checkpoint `start` to apply, those a restore undid skipped."""
    if start >= version:
        return NetChanges(start, version, ())
    net = net_changes(locate(uri), start, version)
    if net.skipped:
        log.info("source_restore_followed", source=uri, skipped=sorted(net.skipped))
    if net.undone is not None:
        log.warning(
            "source_restore_undid_versions_read",
            source=uri,
            restore=net.undone.restore,
            restored=net.undone.restored,
            undone=list(net.undone.versions),
        )
    return net


def _changes_read(
    uri: str, table: DeltaTable, net: NetChanges, files_total: int, where: str
) -> DeltaRead:
    """The source's change data feed after the checkpoint, the versions a restore undid
    (and the restore) left out."""
    if not has_change_feed(table):
        raise UserError(no_change_feed(uri, where))
    version = table.version()
    if not net.read:  # caught up, or every version after the checkpoint undone
        return DeltaRead([], [], version, files_total, 0, {}, None, net)
    plan = plan_changes(locate(uri), table, net.since + 1, version, net.skipped)
    instants = [v.instant for v in plan.versions if v.files]
    paths = [f.path for f in plan.files]
    return DeltaRead(paths, instants, version, files_total, 0, {}, plan, net)


def no_change_feed(uri: str, where: str) -> str:
    """Why `{since: last}` cannot hand on the deletes of the table at `uri`, and the fix
    (a run's refusal, and `runner validate`'s: runner/commands/spec_facts.py)."""
    return (
        f"{where}: {uri} keeps no change data feed, so its deletes cannot be handed on; "
        "set target.change_data_feed: true in the pipeline that writes it (deletes are "
        "then recorded from its next run on), or set `deletes: ignore` in this source's "
        "incremental to read its inserted and updated rows only"
    )


def _vectors(table: DeltaTable, uri: str, paths: list[str]) -> dict[str, DeletionVector]:
    """The deletion vectors of the files to read (a MERGE_ON_READ runner table has some)."""
    names = {p.rsplit("/", 1)[-1] for p in paths}
    return {
        name: vector
        for path, vector in deletion_vectors(locate(uri), table).items()
        if (name := path.rsplit("/", 1)[-1]) in names
    }


def _checkpoint_version(since: Any, where: str) -> int:
    value = since.get("version") if isinstance(since, dict) else since
    try:
        return int(value)  # type: ignore[arg-type]  # a wrong type is the error below
    except (TypeError, ValueError):
        raise UserError(
            f"{where}: checkpoint {since!r} is not a table version; give a version number"
        ) from None


def _may_hold(row: dict[str, Any], instants: list[str]) -> bool:
    low, high = row.get(f"min.{COMMIT_TIME}"), row.get(f"max.{COMMIT_TIME}")
    if low is None or high is None:
        return bool(instants)  # no statistics: the file must be read
    return any(low <= i <= high for i in instants)
