"""The one Delta commit of a run: new files in, replaced files out, new deletion vectors.

On a COPY_ON_WRITE table the commit goes through delta-rs. On a MERGE_ON_READ table (the
deletionVectors feature) the runner writes the log entry itself (runner.delta.log_entry),
because delta-rs can neither add a file with a deletion vector nor remove one with it.

A new table is first created empty (version 0) with its runner.* settings, because delta-rs
accepts custom configuration keys only on that path; each run then commits one version.

delta-rs refuses a commit with removes whenever another writer removed any file since this
run read the table, even in other buckets. So on a refusal the runner reloads the table: if
no bucket it rewrites was touched by the other writer, it commits the same files again on
the new version; otherwise it raises BucketClash, and the run merges those buckets again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import structlog
from deltalake import DeltaTable, Field, TableFeatures
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

from runner.delta.directory import require_files
from runner.delta.log_entry import (
    CHECKPOINT_INTERVAL,
    NewDeletionVector,
    NewFile,
    add_action,
    commit_info,
    now_ms,
    publish,
    re_add_action,
    remove_action,
    txn_action,
)
from runner.delta.snapshot import DataFile, Group, TableSnapshot, open_table
from runner.errors import CommitConflictError
from runner.storage.location import TableLocation

log = structlog.get_logger(__name__)

COMMIT_ATTEMPTS = 5


class BucketClash(CommitConflictError):
    """Another writer committed changes to buckets this run rewrites: the run must merge
    those buckets again on `latest` before it can commit."""

    def __init__(self, buckets: list[Group], latest: TableSnapshot):
        self.buckets = buckets
        self.latest = latest
        shown = ", ".join(f"{pp or '<root>'}#{b}" for pp, b in buckets[:5])
        super().__init__(
            f"another writer committed version {latest.version} of {latest.uri} and rewrote "
            f"{len(buckets)} bucket(s) this run rewrites too ({shown})"
        )


class _VersionTaken(Exception):
    """Another writer published the version this run's own log entry was for."""


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


def commit_files(
    snapshot: TableSnapshot,
    schema: pa.Schema,
    added: Sequence[NewFile],
    removed: Sequence[DataFile],
    rewritten: set[Group],
    metadata: dict[str, Any],
    batch: str | None = None,
    still_valid: Callable[[TableSnapshot], str | None] | None = None,
    deletion_vectors: Sequence[NewDeletionVector] = (),
) -> int:
    """Commit adds, removes and new deletion vectors as ONE version; returns the version.

    `still_valid` looks at the table another writer left before this run commits on top of
    it: a message means this run's commit would now be wrong (its checkpoints went stale).

    `batch` is an app id recorded in the same commit (a Delta `txn` action), so that a
    re-run of the batch can tell it was committed.

    `rewritten` are the buckets this run replaces or creates: another writer's commit that
    touched none of them is not a conflict, only a reason to commit again on top of it.
    A stored file given a deletion vector counts as read: if another writer changed its
    deletion vector meanwhile, its bucket clashes too (no delete is lost).
    """
    read = [*removed, *(d.file for d in deletion_vectors)]
    new_dvs = [d.deletion_vector.relative_path for d in deletion_vectors]
    require_files(snapshot.location, [*(f.path for f in added), *filter(None, new_dvs)], "run")
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        try:
            if snapshot.has_deletion_vectors:
                _publish_entry(snapshot, added, removed, deletion_vectors, metadata, batch)
            else:
                assert not deletion_vectors, "deletion vectors on a table without the feature"
                _commit_once(snapshot, schema, added, removed, metadata, batch)
            snapshot.table.update_incremental()
            return snapshot.table.version()
        except (CommitFailedError, _VersionTaken) as exc:
            latest = open_table(snapshot.location)
            assert latest is not None
            if latest.configuration != snapshot.configuration:
                raise CommitConflictError(
                    f"the settings of {snapshot.uri} changed while this run wrote (version "
                    f"{latest.version}, for example a bucket expansion); its files follow the "
                    "old layout, so nothing of this run was committed: run the pipeline again"
                ) from exc
            problem = still_valid(latest) if still_valid else None
            if problem:
                raise CommitConflictError(problem) from exc
            if batch and latest.table.transaction_version(batch) is not None:
                raise CommitConflictError(
                    f"batch {batch} was committed by another run meanwhile (version "
                    f"{latest.version}); nothing of this run was committed"
                ) from exc
            clashes = _clashing_buckets(latest, read, rewritten)
            if clashes:
                raise BucketClash(clashes, latest) from exc
            log.info("commit_retry", attempt=attempt, on_version=latest.version)
            snapshot = latest
    raise CommitConflictError(
        f"{snapshot.uri} kept changing: {COMMIT_ATTEMPTS} commit attempts were overtaken by "
        "other writers; nothing was committed: run the pipeline again"
    )


def _clashing_buckets(
    latest: TableSnapshot, read: Sequence[DataFile], rewritten: set[Group]
) -> list[Group]:
    """Buckets whose files changed since this run read them: a file it replaces or gives a
    deletion vector is gone or has another deletion vector now, or a bucket it writes
    holds a file it did not read."""
    read_paths = {f.path for f in read}
    live = latest.files_by_group()
    live_files = {(f.path, f.deletion_vector) for files in live.values() for f in files}
    gone = {
        (f.partition_path, f.bucket) for f in read if (f.path, f.deletion_vector) not in live_files
    }
    grown = {g for g in rewritten if {f.path for f in live.get(g, [])} - read_paths}
    return sorted(gone | grown)


def _table_schema(snapshot: TableSnapshot, schema: pa.Schema) -> pa.Schema:
    """The schema to commit with: the table's own when it holds every column of this run's
    files, so a column another writer added meanwhile is kept (older files read it null)."""
    current = snapshot.arrow_schema()
    return current if set(schema.names) <= set(current.names) else schema


def _commit_once(
    snapshot: TableSnapshot,
    schema: pa.Schema,
    added: Sequence[NewFile],
    removed: Sequence[DataFile],
    metadata: dict[str, Any],
    batch: str | None,
) -> None:
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [
        AddAction(f.path, f.size, {}, now, True, f.stats) for f in added
    ]
    actions += [RemoveAction(f.path, True, now, f.size, {}) for f in removed]
    snapshot.table.create_write_transaction(
        actions,
        mode="append",
        schema=DeltaSchema.from_arrow(_table_schema(snapshot, schema)),
        commit_properties=CommitProperties(
            custom_metadata={"runner": metadata},
            app_transactions=[Transaction(batch, 1, now)] if batch else None,
        ),
    )


def _publish_entry(
    snapshot: TableSnapshot,
    added: Sequence[NewFile],
    removed: Sequence[DataFile],
    deletion_vectors: Sequence[NewDeletionVector],
    metadata: dict[str, Any],
    batch: str | None,
) -> None:
    """The commit of a MERGE_ON_READ table, as the runner's own log entry."""
    now = now_ms()
    actions: list[dict[str, Any]] = [commit_info("WRITE", metadata, now)]
    if batch:
        actions.append(txn_action(batch, now))
    for update in deletion_vectors:
        actions += [remove_action(update.file, now, data_change=True), re_add_action(update, now)]
    actions += [remove_action(f, now, data_change=True) for f in removed]
    actions += [add_action(f, now, data_change=True) for f in added]
    version = snapshot.version + 1
    if not publish(snapshot.location, version, actions):
        raise _VersionTaken(version)
    if version % CHECKPOINT_INTERVAL == 0:
        try:
            location = snapshot.location
            DeltaTable(location.uri, storage_options=location.storage_options()).create_checkpoint()
        except DeltaError as exc:  # a reader replays a longer log; nothing is wrong
            log.warning("checkpoint_failed", version=version, error=str(exc))
