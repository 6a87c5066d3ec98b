"""The one Delta commit of a run, through delta-rs: new files in, replaced files out.

A new table is first created empty (version 0) with its runner.* settings, because delta-rs
accepts custom configuration keys only on that path; each run then commits one version.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import structlog
from deltalake import DeltaTable, Field
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction

from runner.errors import CommitConflictError
from runner.table.snapshot import DataFile, TableSnapshot

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class NewFile:
    path: str
    size: int
    stats: str


def create_table(uri: str, name: str, schema: pa.Schema, settings: Mapping[str, str]) -> DeltaTable:
    try:
        return DeltaTable.create(
            uri,
            schema=DeltaSchema.from_arrow(schema),
            name=name,
            configuration=dict(settings),
            raise_if_key_not_exists=False,
        )
    except DeltaError as exc:
        raise CommitConflictError(
            f"could not create the table at {uri} (another run may have created it): {exc}"
        ) from exc


def add_columns(table: DeltaTable, fields: Sequence[pa.Field]) -> None:
    delta = DeltaSchema.from_arrow(pa.schema(list(fields)))
    table.alter.add_columns([Field(f.name, f.type, nullable=True) for f in delta.fields])
    log.info("columns_added", columns=[f.name for f in fields], version=table.version())


def commit_files(
    snapshot: TableSnapshot,
    schema: pa.Schema,
    added: Sequence[NewFile],
    removed: Sequence[DataFile],
    metadata: dict[str, Any],
) -> int:
    """Commit adds and removes as ONE version on top of the snapshot; returns the version."""
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [
        AddAction(f.path, f.size, {}, now, True, f.stats) for f in added
    ]
    actions += [RemoveAction(f.path, True, now, f.size, {}) for f in removed]
    try:
        snapshot.table.create_write_transaction(
            actions,
            mode="append",
            schema=DeltaSchema.from_arrow(schema),
            commit_properties=CommitProperties(custom_metadata={"runner": metadata}),
        )
    except CommitFailedError as exc:
        raise CommitConflictError(
            f"another writer changed {snapshot.uri} while this run wrote it ({exc}); "
            "nothing was committed: run the pipeline again"
        ) from exc
    snapshot.table.update_incremental()
    return snapshot.table.version()
