"""A run's table before its commit: its creation, its new columns.

A new table is first created empty (version 0) with its runner.* settings, because delta-rs
accepts custom configuration keys only on that path; each run then commits one version
(runner/delta/transaction.py). A new column is added by delta-rs' `alter.add_columns` just
before the data commit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa
import structlog
from deltalake import DeltaTable, Field, TableFeatures
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import DeltaError

from runner.errors import CommitConflictError
from runner.storage.location import TableLocation

log = structlog.get_logger(__name__)


def create_table(
    location: TableLocation,
    name: str,
    schema: pa.Schema,
    settings: Mapping[str, str],
    deletion_vectors: bool = False,
) -> DeltaTable:
    """A new empty table; with the deletionVectors feature for a MERGE_ON_READ table
    (reader and writer version 3/7 with that one feature)."""
    try:
        table = DeltaTable.create(
            location.uri,
            schema=DeltaSchema.from_arrow(schema),
            storage_options=location.storage_options(),
            name=name,
            configuration=dict(settings),
            raise_if_key_not_exists=False,
        )
        if deletion_vectors:
            table.alter.add_feature(
                TableFeatures.DeletionVectors, allow_protocol_versions_increase=True
            )
        return table
    except DeltaError as exc:
        raise CommitConflictError(
            f"could not create the table at {location.uri} (another run may have created it): {exc}"
        ) from exc


def add_columns(table: DeltaTable, fields: Sequence[pa.Field]) -> None:
    delta = DeltaSchema.from_arrow(pa.schema(list(fields)))
    table.alter.add_columns([Field(f.name, f.type, nullable=True) for f in delta.fields])
    log.info("columns_added", columns=[f.name for f in fields], version=table.version())
