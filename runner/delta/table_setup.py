"""A run's table before its commit: its creation, its new columns.

A new table is first created empty (version 0) with its runner.* settings, because delta-rs
accepts custom configuration keys only on that path; each run then commits one version
(runner/delta/transaction.py). The schema changes a run makes (new columns and fields,
widened types) are a version of their own, written by the runner just before the data commit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import structlog
from deltalake import DeltaTable, TableFeatures
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import DeltaError

from runner.delta.log_entry import commit_info, metadata_action, now_ms, publish
from runner.delta.schema import SchemaPlan
from runner.delta.schema_evolution import evolved_schema
from runner.delta.snapshot import (
    CHANGE_FEED_SETTING,
    TIMESTAMP_NTZ,
    TYPE_WIDENING,
    TYPE_WIDENING_SETTING,
    TableSnapshot,
    open_table,
)
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


def evolve_schema(snapshot: TableSnapshot, plan: SchemaPlan) -> TableSnapshot:
    """The table with the schema changes of `plan` (new columns and fields, widened types),
    as a version of its own written by the runner, before the data commit: delta-rs writes
    nothing to a table with the typeWidening feature. A widening first gives the table that
    feature (reader and writer, protocol 3/7) and delta.enableTypeWidening."""
    stored = json.loads(snapshot.table.schema().to_json())
    merged = json.loads(DeltaSchema.from_arrow(plan.file_schema).to_json())
    schema = evolved_schema(stored, merged, list(plan.changes))
    configuration = snapshot.configuration
    entry = [
        commit_info(
            "CHANGE COLUMN",
            {
                "operation": "schema_evolution",
                "schema_changes": [c.to_dict() for c in plan.changes],
            },
            now_ms(),
        )
    ]
    features = set(schema_features(snapshot, json.dumps(schema)))
    if plan.widens and configuration.get(TYPE_WIDENING_SETTING) != "true":
        features.add(TYPE_WIDENING)
        configuration = {**configuration, TYPE_WIDENING_SETTING: "true"}
    if features:
        entry.append({"protocol": with_features(snapshot, features)})
    entry.append(metadata_action(snapshot.table, configuration, json.dumps(schema)))
    version = snapshot.version + 1
    if not publish(snapshot.location, version, entry):
        raise CommitConflictError(
            f"another writer committed version {version} of {snapshot.uri} while this run "
            "changed its schema; nothing was committed: run the pipeline again"
        )
    log.info("schema_evolved", version=version, changes=[c.describe() for c in plan.changes])
    latest = open_table(snapshot.location)
    assert latest is not None
    return latest


# The features a writer version below 7 implies, by the version that brought each: a table
# moved to version 7 lists them (PROTOCOL.md, "Table Features").
_LEGACY_WRITER_FEATURES = (
    (2, "appendOnly"),
    (2, "invariants"),
    (3, "checkConstraints"),
    (4, "changeDataFeed"),
    (4, "generatedColumns"),
)


def schema_features(snapshot: TableSnapshot, schema_json: str) -> list[str]:
    """The reader and writer features a new schema needs that the table lacks: timestampNtz
    for a timestamp_ntz field (delta-rs and Polars refuse such a table without it)."""
    has = snapshot.table.protocol().reader_features or []
    if '"timestamp_ntz"' in schema_json and TIMESTAMP_NTZ not in has:
        return [TIMESTAMP_NTZ]
    return []


def with_features(snapshot: TableSnapshot, features: set[str]) -> dict[str, object]:
    """The table's protocol with `features` (reader and writer features): reader 3 and
    writer 7, with the features its older writer version implied listed."""
    protocol = snapshot.table.protocol()
    readers = set(protocol.reader_features or [])
    writers = set(protocol.writer_features or [])
    if protocol.min_writer_version < 7:
        writers |= {
            f for since, f in _LEGACY_WRITER_FEATURES if since <= protocol.min_writer_version
        }
    return {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": sorted(readers | features),
        "writerFeatures": sorted(writers | features),
    }
