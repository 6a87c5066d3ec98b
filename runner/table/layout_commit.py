"""One Delta version that changes the table's configuration and its files together.

A bucket expansion must swap every file of the partitions it regrows AND the bucket counts
in the configuration at once: a reader or writer must see the old layout or the new one,
never new files under old counts. delta-rs has no call that commits a metaData action with
add/remove actions, so this module writes that one log entry itself, as the Delta protocol
defines it, and publishes it the way Delta's local log store does: the entry is written to a
temporary file and hard-linked to its version's name, which fails if the version exists.

Writers that read the table before this version fail their own commit with delta-rs'
"Metadata changed since last commit" and are told to run again (see commit.py).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import structlog

from runner.errors import CommitConflictError, UserError
from runner.table.commit import NewFile
from runner.table.snapshot import DataFile, TableSnapshot, open_table
from runner.table.storage import filesystem, is_local

log = structlog.get_logger(__name__)

# The characters delta-rs leaves unescaped in a log path (checked against deltalake 1.6.6).
_PATH_SAFE = "/:=,+&!$'();@"


def log_path(path: str) -> str:
    """A table-relative file path as the Delta log stores it (percent-encoded)."""
    return quote(path, safe=_PATH_SAFE)


def local_root(uri: str) -> Path:
    """The table's directory; refuses a table on an object store, with what to do instead."""
    if not is_local(uri):
        raise UserError(
            f"{uri}: bucket expansion (runner expand, plan, index.expansion) needs the table "
            "on a local or mounted file system, and this one is on an object store: the "
            "expansion commits new bucket counts and files as one Delta version, which the "
            "runner publishes with an atomic hard link, and an object store has none. The "
            "table keeps its bucket counts; writes, reads and runner clean work as before"
        )
    return Path(filesystem(uri)[1])


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
    log_dir = local_root(snapshot.uri) / "_delta_log"
    read_files = {f.path for f in removed}
    while True:
        version = snapshot.version + 1
        entry = _entry(snapshot, configuration, added, removed, metadata, operation)
        tmp = log_dir / f".{version:020d}.json.{uuid.uuid4().hex}.tmp"
        tmp.write_text(entry)
        try:
            os.link(tmp, log_dir / f"{version:020d}.json")
            return version
        except FileExistsError:
            latest = open_table(snapshot.location)
            assert latest is not None
            _check_not_overtaken(snapshot, latest, partitions, read_files)
            log.info("relayout_commit_retry", on_version=latest.version)
            snapshot = latest
        finally:
            tmp.unlink(missing_ok=True)


def _check_not_overtaken(
    before: TableSnapshot, latest: TableSnapshot, partitions: set[str], read_files: set[str]
) -> None:
    if latest.configuration != before.configuration or (
        latest.table.schema().to_json() != before.table.schema().to_json()
    ):
        raise CommitConflictError(
            f"another writer changed the settings or schema of {latest.uri} (version "
            f"{latest.version}) during the expansion; nothing was committed: run it again"
        )
    now = {f.path for f in latest.files() if f.partition_path in partitions}
    if now != read_files:
        raise CommitConflictError(
            f"another writer changed files of the partitions being expanded (version "
            f"{latest.version} of {latest.uri}); nothing was committed: run the expansion again"
        )


def _entry(
    snapshot: TableSnapshot,
    configuration: Mapping[str, str],
    added: Sequence[NewFile],
    removed: Sequence[DataFile],
    metadata: dict[str, Any],
    operation: str,
) -> str:
    now = int(time.time() * 1000)
    meta = snapshot.table.metadata()
    actions: list[dict[str, Any]] = [
        {
            "commitInfo": {
                "timestamp": now,
                "operation": operation,
                "operationParameters": {},
                "clientVersion": "runner",
                "runner": metadata,
            }
        },
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
    actions += [
        {
            "remove": {
                "path": log_path(f.path),
                "deletionTimestamp": now,
                "dataChange": False,
                "extendedFileMetadata": True,
                "partitionValues": {},
                "size": f.size,
            }
        }
        for f in removed
    ]
    actions += [
        {
            "add": {
                "path": log_path(f.path),
                "partitionValues": {},
                "size": f.size,
                "modificationTime": now,
                "dataChange": False,
                "stats": f.stats,
            }
        }
        for f in added
    ]
    return "".join(json.dumps(a) + "\n" for a in actions)
