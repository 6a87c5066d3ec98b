"""Delta log entries the runner writes itself, and how it publishes them.

delta-rs commits add and remove actions, but an `add` with a deletion vector and a commit
that changes the configuration together with files are beyond its API. For those the runner
writes the JSON entry as the Delta protocol defines it and publishes it the way Delta's
local log store does: written to a temporary file, then hard-linked to its version's name,
which fails if that version exists. That needs a local or mounted file system.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import structlog

from runner import faults
from runner.errors import UserError
from runner.table.deletion_vectors import DeletionVector
from runner.table.snapshot import DataFile
from runner.table.storage import filesystem, is_local

log = structlog.get_logger(__name__)

# The characters delta-rs leaves unescaped in a log path (checked against deltalake 1.6.6).
_PATH_SAFE = "/:=,+&!$'();@"
# delta-rs checkpoints its own commits every 100 versions; entries the runner writes get
# the same, or every reader would replay an ever longer log.
CHECKPOINT_INTERVAL = 100


@dataclass(frozen=True)
class NewFile:
    path: str
    size: int
    stats: str


@dataclass(frozen=True)
class NewDeletionVector:
    """A stored file that stays, with a deletion vector replacing its current one."""

    file: DataFile
    deletion_vector: DeletionVector


def log_path(path: str) -> str:
    """A table-relative file path as the Delta log stores it (percent-encoded)."""
    return quote(path, safe=_PATH_SAFE)


def local_root(uri: str, what: str) -> Path:
    """The table's directory; refuses a table on an object store, saying what needs it."""
    if not is_local(uri):
        raise UserError(
            f"{uri}: {what} needs the table on a local or mounted file system, and this one "
            "is on an object store: the runner publishes that commit itself, with an atomic "
            "hard link, and an object store has none. Put the table on a local or mounted "
            "(shared) file system"
        )
    return Path(filesystem(uri)[1])


def publish(log_dir: Path, version: int, actions: Sequence[dict[str, Any]]) -> bool:
    """Write `actions` as version `version`; False when another writer took that version."""
    entry = "".join(json.dumps(a) + "\n" for a in actions)
    tmp = log_dir / f".{version:020d}.json.{uuid.uuid4().hex}.tmp"
    tmp.write_text(entry)
    try:
        faults.maybe_fail("log_entry_written")  # the entry exists, not yet under its name
        os.link(tmp, log_dir / f"{version:020d}.json")
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def now_ms() -> int:
    return int(time.time() * 1000)


def commit_info(operation: str, metadata: dict[str, Any], now: int) -> dict[str, Any]:
    return {
        "commitInfo": {
            "timestamp": now,
            "operation": operation,
            "operationParameters": {},
            "clientVersion": "runner",
            "runner": metadata,
        }
    }


def remove_action(f: DataFile, now: int, data_change: bool) -> dict[str, Any]:
    """Remove a live file: with its current deletion vector, as the protocol identifies a
    file by path and DV (without it, readers would keep the file)."""
    remove: dict[str, Any] = {
        "path": log_path(f.path),
        "deletionTimestamp": now,
        "dataChange": data_change,
        "extendedFileMetadata": True,
        "partitionValues": {},
        "size": f.size,
    }
    if f.deletion_vector:
        remove["deletionVector"] = f.deletion_vector.to_log()
    return {"remove": remove}


def add_action(f: NewFile, now: int, data_change: bool) -> dict[str, Any]:
    return {
        "add": {
            "path": log_path(f.path),
            "partitionValues": {},
            "size": f.size,
            "modificationTime": now,
            "dataChange": data_change,
            "stats": f.stats,
        }
    }


def re_add_action(update: NewDeletionVector, now: int) -> dict[str, Any]:
    """The stored file again, same path and size, with its new deletion vector. Its stats
    stay those of its physical rows; min/max may now be wider than the live rows."""
    f = update.file
    stats = json.loads(f.stats) if f.stats else {"numRecords": f.num_records}
    stats["tightBounds"] = False
    action = add_action(NewFile(f.path, f.size, json.dumps(stats)), now, data_change=True)
    action["add"]["deletionVector"] = update.deletion_vector.to_log()
    return action


def txn_action(app_id: str, now: int) -> dict[str, Any]:
    return {"txn": {"appId": app_id, "version": 1, "lastUpdated": now}}
