"""A run's table before its commit: its creation, its new columns.

A new table is first created empty (version 0) with its runner.* settings, because delta-rs
accepts custom configuration keys only on that path; each run then commits one version
(runner/delta/transaction.py). A new column is added by delta-rs' `alter.add_columns` just
before the data commit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import structlog
from deltalake import DeltaTable, Field, TableFeatures
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import DeltaError

from runner.delta.log_entry import commit_info, metadata_action, now_ms, publish
from runner.delta.snapshot import CHANGE_FEED_SETTING, TableSnapshot, open_table
from runner.errors import CommitConflictError
from runner.storage.location import TableLocation

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class TableFeaturesWanted:
    deletion_vectors: bool = False  # a MERGE_ON_READ table
    change_feed: bool = False  # target.change_data_feed


def create_table(
    location: TableLocation,
    name: str,
    schema: pa.Schema,
    settings: Mapping[str, str],
    features: TableFeaturesWanted,
) -> DeltaTable:
    """A new empty table; with the deletionVectors feature for a MERGE_ON_READ table
    (reader and writer version 3/7 with that feature), and the change data feed when
    wanted (writer version 4, or the changeDataFeed feature beside deletion vectors)."""
    configuration = dict(settings)
    if features.change_feed:
        configuration[CHANGE_FEED_SETTING] = "true"
    try:
        table = DeltaTable.create(
            location.uri,
            schema=DeltaSchema.from_arrow(schema),
            storage_options=location.storage_options(),
            name=name,
            configuration=configuration,
            raise_if_key_not_exists=False,
        )
        if features.deletion_vectors:
            # both at once: added alone, deletion vectors would drop the feed's writer
            # version 4 without listing its feature (checked with deltalake 1.6.6)
            wanted = [TableFeatures.DeletionVectors]
            if features.change_feed:
                wanted.append(TableFeatures.ChangeDataFeed)
            table.alter.add_feature(wanted, allow_protocol_versions_increase=True)
        return table
    except DeltaError as exc:
        raise CommitConflictError(
            f"could not create the table at {location.uri} (another run may have created it): {exc}"
        ) from exc


def enable_change_feed(snapshot: TableSnapshot) -> TableSnapshot:
    """The table with Delta's change data feed on, from the next version: its own version
    (a protocol that supports it and delta.enableChangeDataFeed), written by the runner, as
    delta-rs' own way adds table features this table does not use."""
    protocol = snapshot.table.protocol()
    action: dict[str, object] = {
        "minReaderVersion": protocol.min_reader_version,
        "minWriterVersion": max(protocol.min_writer_version, 4),
    }
    if protocol.min_writer_version >= 7:
        action["writerFeatures"] = sorted({*(protocol.writer_features or []), "changeDataFeed"})
    if protocol.min_reader_version >= 3:
        action["readerFeatures"] = sorted(protocol.reader_features or [])
    configuration = {**snapshot.configuration, CHANGE_FEED_SETTING: "true"}
    version = snapshot.version + 1
    entry = [
        commit_info("SET TBLPROPERTIES", {"operation": "enable_change_feed"}, now_ms()),
        {"protocol": action},
        metadata_action(snapshot.table, configuration),
    ]
    if not publish(snapshot.location, version, entry):
        raise CommitConflictError(
            f"another writer committed version {version} of {snapshot.uri} while the change "
            "data feed was being turned on; nothing was committed: run the pipeline again"
        )
    log.info("change_feed_enabled", version=version)
    latest = open_table(snapshot.location)
    assert latest is not None
    return latest


def add_columns(table: DeltaTable, fields: Sequence[pa.Field]) -> None:
    delta = DeltaSchema.from_arrow(pa.schema(list(fields)))
    table.alter.add_columns([Field(f.name, f.type, nullable=True) for f in delta.fields])
    log.info("columns_added", columns=[f.name for f in fields], version=table.version())
