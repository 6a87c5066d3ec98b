"""One Delta version that changes the table's configuration and its files together.

A bucket expansion must swap every file of the partitions it regrows AND the bucket counts
in the configuration at once: a reader or writer must see the old layout or the new one,
never new files under old counts. delta-rs has no call that commits a metaData action with
add/remove actions, so the runner writes that one log entry itself (runner.delta.log_entry).

Writers that read the table before this version fail their own commit with delta-rs'
"Metadata changed since last commit" and are told to run again (see commit.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from runner.delta.directory import require_files
from runner.delta.log_entry import (
    NewFile,
    add_action,
    check_log_writable,
    commit_info,
    now_ms,
    publish,
    remove_action,
)
from runner.delta.snapshot import DataFile, TableSnapshot, open_table
from runner.errors import CommitConflictError
from runner.storage.location import TableLocation

log = structlog.get_logger(__name__)


def check_expandable(location: TableLocation) -> None:
    """Refuses, before any work, a table whose layout commit the runner cannot publish."""
    check_log_writable(location, "bucket expansion (runner expand, plan, index.expansion)")


def commit_relayout(
    snapshot: TableSnapshot,
    configuration: Mapping[str, str],
    added: Sequence[NewFile],
    removed: Sequence[DataFile],
    partitions: set[str],
    metadata: dict[str, Any],
    operation: str = "RUNNER EXPAND",
) -> int:
    """Commit the new configuration, the removes and the adds as ONE version; returns it.

    If another writer committed meanwhile, the commit moves on top of it only when that
    writer changed neither the table's metadata nor any file of `partitions`.
    """
    read_files = {(f.path, f.deletion_vector) for f in removed}
    require_files(snapshot.location, [f.path for f in added], "expansion")
    while True:
        version = snapshot.version + 1
        if publish(
            snapshot.location,
            version,
            _actions(snapshot, configuration, added, removed, metadata, operation),
        ):
            return version
        latest = open_table(snapshot.location)
        assert latest is not None
        _check_not_overtaken(snapshot, latest, partitions, read_files)
        log.info("relayout_commit_retry", on_version=latest.version)
        snapshot = latest


def _check_not_overtaken(
    before: TableSnapshot,
    latest: TableSnapshot,
    partitions: set[str],
    read_files: set[tuple[str, Any]],
) -> None:
    if latest.configuration != before.configuration or (
        latest.table.schema().to_json() != before.table.schema().to_json()
    ):
        raise CommitConflictError(
            f"another writer changed the settings or schema of {latest.uri} (version "
            f"{latest.version}) during the expansion; nothing was committed: run it again"
        )
    # a deletion vector added meanwhile changes a file as much as replacing it
    now = {(f.path, f.deletion_vector) for f in latest.files() if f.partition_path in partitions}
    if now != read_files:
        raise CommitConflictError(
            f"another writer changed files of the partitions being expanded (version "
            f"{latest.version} of {latest.uri}); nothing was committed: run the expansion again"
        )


def _actions(
    snapshot: TableSnapshot,
    configuration: Mapping[str, str],
    added: Sequence[NewFile],
    removed: Sequence[DataFile],
    metadata: dict[str, Any],
    operation: str,
) -> list[dict[str, Any]]:
    now = now_ms()
    meta = snapshot.table.metadata()
    actions: list[dict[str, Any]] = [
        commit_info(operation, metadata, now),
        {
            "metaData": {
                "id": meta.id,
                "name": meta.name,
                "description": meta.description,
                "format": {"provider": "parquet", "options": {}},
                "schemaString": snapshot.table.schema().to_json(),
                "partitionColumns": list(meta.partition_columns),
                "createdTime": meta.created_time,
                "configuration": dict(configuration),
            }
        },
    ]
    actions += [remove_action(f, now, data_change=False) for f in removed]
    actions += [add_action(f, now, data_change=False) for f in added]
    return actions
