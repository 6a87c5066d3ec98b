"""The actions of a Delta log entry the runner writes itself, and how it publishes one.

delta-rs commits add and remove actions, but an `add` with a deletion vector and a commit
that changes the configuration together with files are beyond its API. For those the runner
writes the JSON entry as the Delta protocol defines it and publishes it so that it fails if
that version exists: on a local or mounted file system as Delta's local log store does
(a temporary file hard-linked to the version's name), on S3 as delta-rs does for its own
commits (a put with `If-None-Match: *`, which the store refuses for an existing key).
Which commit becomes such an entry, and in what order its actions come, is decided in one
place: runner/delta/transaction.py.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import structlog
from deltalake import DeltaTable

from runner import faults
from runner.delta.deletion_vectors import DeletionVector
from runner.delta.snapshot import DataFile
from runner.errors import UserError
from runner.storage.location import S3_SCHEMES, TableLocation, filesystem, scheme

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


def check_log_writable(location: TableLocation, what: str) -> None:
    """Refuses, before any work, a table whose log the runner cannot publish to safely."""
    if location.is_local:
        return
    if scheme(location.uri) not in S3_SCHEMES:
        raise UserError(
            f"{location.uri}: {what} needs the table on a local or mounted file system or on "
            "S3: the runner publishes that commit itself, with an atomic hard link or S3's "
            "conditional put, and this store offers neither to it"
        )
    told = [
        n
        for n in ("AWS_S3_LOCKING_PROVIDER", "AWS_S3_ALLOW_UNSAFE_RENAME")
        if n in location.settings
    ]
    if told:
        raise UserError(
            f"{location.uri}: {what} publishes its commit with S3's conditional put "
            f"(If-None-Match), and {' and '.join(told)} say this store is used without it: "
            "the runner cannot take part in delta-rs' lock, so it does not write this table's "
            "log. Use a store with conditional writes (AWS S3, recent MinIO) without those "
            "settings, or a local or mounted file system"
        )


def publish(location: TableLocation, version: int, actions: Sequence[dict[str, Any]]) -> bool:
    """Write `actions` as version `version`; False when another writer took that version."""
    entry = "".join(json.dumps(a) + "\n" for a in actions)
    name = f"_delta_log/{version:020d}.json"
    if location.is_local:
        return _link(Path(filesystem(location.uri)[1]) / name, entry)
    check_log_writable(location, "this commit")
    return _put_if_absent(location, name, entry)


def _link(path: Path, entry: str) -> bool:
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    tmp.write_text(entry)
    try:
        faults.maybe_fail("log_entry_written")  # the entry exists, not yet under its name
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def _put_if_absent(location: TableLocation, name: str, entry: str) -> bool:
    """One PUT of the whole entry, refused by the store when the key exists (HTTP 412; 409
    when another conditional write of the same key is in flight): nothing partial is ever
    visible, so there is no temporary object to clean up."""
    from botocore.exceptions import ClientError

    faults.maybe_fail("log_entry_written")  # the entry is ready, not yet published
    bucket, _, prefix = location.uri.split("://", 1)[1].partition("/")
    key = f"{prefix.strip('/')}/{name}" if prefix.strip("/") else name
    try:
        location.s3_client().put_object(
            Bucket=bucket, Key=key, Body=entry.encode(), IfNoneMatch="*"
        )
        return True
    except ClientError as exc:
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if error.get("Code") in ("PreconditionFailed", "ConditionalRequestConflict") or status in (
            409,
            412,
        ):
            return False
        raise


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


def cdc_action(f: NewFile) -> dict[str, Any]:
    """A change data file of the version (Delta's change data feed): rows with their
    `_change_type`, read instead of its adds and removes by a change feed reader."""
    return {
        "cdc": {
            "path": log_path(f.path),
            "partitionValues": {},
            "size": f.size,
            "dataChange": False,
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


def restored_add_action(f: DataFile, now: int) -> dict[str, Any]:
    """A file of an older version added back as that version logged it: its stats and its
    deletion vector then (a restore)."""
    stats = f.stats or json.dumps({"numRecords": f.num_records})
    action = add_action(NewFile(f.path, f.size, stats), now, data_change=True)
    if f.deletion_vector:
        action["add"]["deletionVector"] = f.deletion_vector.to_log()
    return action


def metadata_action(
    table: DeltaTable, configuration: Mapping[str, str], schema: str | None = None
) -> dict[str, Any]:
    """The table's metaData as `table` has it (id, name, schema...), with `configuration`
    (and `schema`, a Delta schema's JSON, when given)."""
    meta = table.metadata()
    return {
        "metaData": {
            "id": meta.id,
            "name": meta.name,
            "description": meta.description,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": schema or table.schema().to_json(),
            "partitionColumns": list(meta.partition_columns),
            "createdTime": meta.created_time,
            "configuration": dict(configuration),
        }
    }


# The app transaction version of a committed batch, and of one a restore undid (the Delta
# protocol keeps an app id's latest version; it has no way to take one out).
BATCH_COMMITTED = 1
BATCH_UNDONE = 0


def txn_action(app_id: str, now: int, version: int = BATCH_COMMITTED) -> dict[str, Any]:
    return {"txn": {"appId": app_id, "version": version, "lastUpdated": now}}
