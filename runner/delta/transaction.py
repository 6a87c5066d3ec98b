"""Every commit the runner makes, and how a commit that another writer overtook resolves.

A writer (a run, a bucket expansion, a compaction) says what it commits as a `Commit`: the
files it adds, the stored files it removes, the stored files it keeps with a new deletion
vector, the buckets it writes, a new configuration if any, its files' schema, an app
transaction id, and what the version's commitInfo records. `commit()` publishes it as the
version after the snapshot the writer read, in ONE loop for every writer:

1. **Publish.** delta-rs commits what it can: a data change (adds and removes) on a table
   without deletion vectors. Everything else is a log entry the runner builds here from
   runner/delta/log_entry.py's actions and publishes itself (a hard link, or S3's
   conditional put): an add with a deletion vector (a MERGE_ON_READ run), change data
   files (`cdc` actions: a table with Delta's change data feed), any commit to a table
   with the typeWidening feature (delta-rs refuses to write one), a new
   configuration together with files (an expansion), `dataChange: false` (a compaction),
   files of an older version added back as it logged them (a restore).
   Either way the publication fails when another writer took that version. Entries the
   runner writes are checkpointed every 100 versions, as delta-rs checkpoints its own.
2. **Version taken.** The table is reloaded and the writer's conflict rule compares it
   with what the writer read:
   - nothing the writer depends on changed: the same commit goes again on the new version
     (a run gives up after a few such rounds; expansion and compaction go on);
   - buckets the writer writes changed (a `BucketClash`): with a `Resolver`, the writer
     redoes its commit for the new version (a run merges its batch again into those buckets,
     up to `target.commit_retries` times; a compaction drops them) and that commit goes on;
     without one, or past its attempts, the clash is the error;
   - anything else (the settings changed, another run moved this pipeline's checkpoints,
     the batch was committed meanwhile, an expansion's partitions changed): the commit stops
     with the rule's error; nothing was committed.

Each rule sits beside the action it is for: a run's `RunRule` in
runner/pipeline/commit_stage.py (settings, checkpoint guard, batch id, buckets), an
expansion's `ExpansionRule` in runner/actions/expand.py (settings or schema, the files of
the regrown partitions or split buckets), a compaction's `CompactionRule` in
runner/actions/compact.py (settings, buckets), `RewriteRule` in
runner/actions/table_change.py (no other commit at all: a schema rewrite, a restore).
delta-rs refuses a commit with removes whenever another writer removed any file since the
read, even in other buckets; the rules are why such a refusal is usually just a
reason to commit again. Every action reaches `commit()` through
runner/actions/table_change.py, which holds the guards and fault points around it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import structlog
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction
from deltalake.transaction import Transaction as AppTransaction

from runner.delta.directory import require_files
from runner.delta.log_entry import (
    BATCH_UNDONE,
    CHECKPOINT_INTERVAL,
    NewDeletionVector,
    NewFile,
    add_action,
    cdc_action,
    commit_info,
    metadata_action,
    now_ms,
    publish,
    re_add_action,
    remove_action,
    restored_add_action,
    txn_action,
)
from runner.delta.snapshot import DataFile, Group, TableSnapshot, open_table
from runner.errors import CommitConflictError

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class Commit:
    """What one writer commits as one version."""

    writer: str  # "run", "expansion", "compaction": named in errors
    operation: str  # commitInfo's operation: WRITE, RUNNER EXPAND, OPTIMIZE
    metadata: Mapping[str, Any]  # commitInfo's `runner` entry
    added: tuple[NewFile, ...] = ()
    change_files: tuple[NewFile, ...] = ()  # Delta's change data feed: `cdc` actions
    removed: tuple[DataFile, ...] = ()
    deletion_vectors: tuple[NewDeletionVector, ...] = ()  # stored files re-added with a new DV
    buckets: frozenset[Group] = frozenset()  # buckets it replaces or creates
    configuration: Mapping[str, str] | None = None  # a new metaData configuration
    schema: pa.Schema | None = None  # its files' schema (None: the table's)
    schema_json: str | None = None  # a new Delta schema for the metaData (with configuration)
    protocol: Mapping[str, Any] | None = None  # a new protocol action (features it needs)
    app_id: str | None = None  # a Delta app transaction (`txn`): this batch is committed
    data_change: bool = True  # False: no row changed (expansion, compaction)
    # a restore: files of an older version added back as it logged them (stats, deletion
    # vector), and app transactions set back (BATCH_UNDONE: a batch it took out)
    restored: tuple[DataFile, ...] = ()
    transactions: tuple[tuple[str, int], ...] = ()

    @property
    def read(self) -> list[DataFile]:
        """The stored files it replaces or gives a deletion vector: what it read."""
        return [*self.removed, *(d.file for d in self.deletion_vectors)]

    @property
    def new_paths(self) -> list[str]:
        """The files its version names anew: data files and deletion vector files (a
        restore's files added back included)."""
        dvs = [d.deletion_vector for d in self.deletion_vectors]
        dvs += [f.deletion_vector for f in self.restored if f.deletion_vector]
        paths = [f.path for f in (*self.added, *self.change_files)]
        paths += [f.path for f in self.restored]
        return [*paths, *filter(None, (d.relative_path for d in dvs))]


class BucketClash(CommitConflictError):
    """Another writer committed changes to buckets this commit writes: the writer must redo
    those buckets on `latest` before it can commit."""

    def __init__(self, buckets: list[Group], latest: TableSnapshot):
        self.buckets = buckets
        self.latest = latest
        shown = ", ".join(f"{pp or '<root>'}#{b}" for pp, b in buckets[:5])
        super().__init__(
            f"another writer committed version {latest.version} of {latest.uri} and rewrote "
            f"{len(buckets)} bucket(s) this run rewrites too ({shown})"
        )


class ConflictRule(Protocol):
    def conflict(
        self, changes: Commit, read: TableSnapshot, latest: TableSnapshot, attempt: int
    ) -> CommitConflictError | None:
        """Why `changes`, built on `read`, may not go again on `latest` after `attempt`
        overtaken attempts: None to commit again, a BucketClash to redo buckets, another
        error to stop."""
        ...


@dataclass(frozen=True)
class Resolver:
    """How a writer answers a BucketClash: `resolve` returns what to commit on the clash's
    `latest` instead (None: nothing is left to commit), at most `attempts` times (None: each
    time); past them the commit fails with `gave_up(clash, attempts)`, or the clash."""

    resolve: Callable[[BucketClash], Commit | None]
    attempts: int | None = None
    gave_up: Callable[[BucketClash, int], str] | None = None


class _VersionTaken(Exception):
    """Another writer published the version the runner's own log entry was for."""


def commit(
    snapshot: TableSnapshot,
    changes: Commit,
    rule: ConflictRule,
    resolver: Resolver | None = None,
) -> int | None:
    """Publish `changes` as the version after `snapshot`, resolving conflicts by `rule` and
    `resolver` (see the module docstring); the version committed, or None when the resolver
    left nothing to commit."""
    require_files(snapshot.location, changes.new_paths, changes.writer)
    attempt = resolved = 0
    while True:
        try:
            return _publish(snapshot, changes)
        except (CommitFailedError, _VersionTaken) as exc:
            attempt += 1
            latest = open_table(snapshot.location)
            assert latest is not None
            conflict = rule.conflict(changes, snapshot, latest, attempt)
            if conflict is None:
                log.info(
                    "commit_retry",
                    writer=changes.writer,
                    attempt=attempt,
                    on_version=latest.version,
                )
            elif not isinstance(conflict, BucketClash) or resolver is None:
                raise conflict from exc
            elif resolver.attempts is not None and resolved == resolver.attempts:
                if resolver.gave_up is None:
                    raise conflict from exc
                raise CommitConflictError(resolver.gave_up(conflict, resolved)) from conflict
            else:
                resolved += 1
                redone = resolver.resolve(conflict)
                if redone is None:
                    return None
                changes, attempt = redone, 0
                require_files(latest.location, changes.new_paths, changes.writer)
            snapshot = latest


def changed_buckets(changes: Commit, latest: TableSnapshot) -> list[Group]:
    """Buckets whose files changed since the writer read them: a file it replaces or gives a
    deletion vector is gone or has another deletion vector now, or a bucket it writes holds
    a file it did not read."""
    read = changes.read
    read_paths = {f.path for f in read}
    live = latest.files_by_group()
    live_files = {(f.path, f.deletion_vector) for files in live.values() for f in files}
    gone = {
        (f.partition_path, f.bucket) for f in read if (f.path, f.deletion_vector) not in live_files
    }
    grown = {g for g in changes.buckets if {f.path for f in live.get(g, [])} - read_paths}
    return sorted(gone | grown)


def batch_committed(table: DeltaTable, app_id: str) -> bool:
    """The batch of `app_id` is committed to `table`: its app transaction is there and no
    restore undid it since."""
    return table.transaction_version(app_id) not in (None, BATCH_UNDONE)


def _publish(snapshot: TableSnapshot, changes: Commit) -> int:
    """One attempt: the version published; CommitFailedError or _VersionTaken when another
    writer took it."""
    if (
        changes.configuration is None
        and changes.data_change
        and not changes.change_files
        and not changes.restored
        and not changes.transactions
        and not snapshot.has_deletion_vectors
        and not snapshot.has_type_widening
    ):
        assert not changes.deletion_vectors, "deletion vectors on a table without the feature"
        _commit_with_delta_rs(snapshot, changes)
        snapshot.table.update_incremental()
        return snapshot.table.version()
    version = snapshot.version + 1
    _publish_entry(snapshot, changes)
    snapshot.table.update_incremental()
    if version % CHECKPOINT_INTERVAL == 0:
        try:
            location = snapshot.location
            DeltaTable(location.uri, storage_options=location.storage_options()).create_checkpoint()
        except DeltaError as exc:  # a reader replays a longer log; nothing is wrong
            log.warning("checkpoint_failed", version=version, error=str(exc))
    return version


def _commit_with_delta_rs(snapshot: TableSnapshot, changes: Commit) -> None:
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [
        AddAction(f.path, f.size, {}, now, True, f.stats) for f in changes.added
    ]
    actions += [RemoveAction(f.path, True, now, f.size, {}) for f in changes.removed]
    app_id = changes.app_id
    snapshot.table.create_write_transaction(
        actions,
        mode="append",
        schema=DeltaSchema.from_arrow(_table_schema(snapshot, changes.schema)),
        commit_properties=CommitProperties(
            custom_metadata={"runner": dict(changes.metadata)},
            app_transactions=[AppTransaction(app_id, 1, now)] if app_id else None,
        ),
    )


def _table_schema(snapshot: TableSnapshot, schema: pa.Schema | None) -> pa.Schema:
    """The schema to commit with: the table's own when it holds every column of this
    commit's files, so a column another writer added meanwhile is kept (older files read it
    null)."""
    current = snapshot.arrow_schema()
    if schema is None or set(schema.names) <= set(current.names):
        return current
    return schema


def _publish_entry(snapshot: TableSnapshot, changes: Commit) -> None:
    """The runner's own log entry for `changes` as the version after `snapshot`."""
    version = snapshot.version + 1
    if not publish(snapshot.location, version, _entry(snapshot, changes)):
        raise _VersionTaken(version)


def _entry(snapshot: TableSnapshot, changes: Commit) -> list[dict[str, Any]]:
    now = now_ms()
    actions = [commit_info(changes.operation, dict(changes.metadata), now)]
    if changes.app_id:
        actions.append(txn_action(changes.app_id, now))
    actions += [txn_action(app_id, now, version) for app_id, version in changes.transactions]
    if changes.protocol is not None:
        actions.append({"protocol": dict(changes.protocol)})
    if changes.configuration is not None:
        actions.append(metadata_action(snapshot.table, changes.configuration, changes.schema_json))
    for update in changes.deletion_vectors:
        actions += [remove_action(update.file, now, data_change=True), re_add_action(update, now)]
    actions += [remove_action(f, now, changes.data_change) for f in changes.removed]
    actions += [add_action(f, now, changes.data_change) for f in changes.added]
    actions += [restored_add_action(f, now) for f in changes.restored]
    actions += [cdc_action(f) for f in changes.change_files]
    return actions
