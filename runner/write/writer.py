"""The executor-side writer: the new files of each touched (partition path, bucket).

It runs inside `mapInArrow` on the incoming rows, sorted by (partition path, bucket, record
key) and marked by Spark as `candidate` (the batch's winner for its key) or `duplicate`.
Stored rows never cross the shuffle: each bucket's stored files are read here, next to its
incoming rows, the way Hudi's merge handle works. A bucket whose rows did not change is not
touched: the driver keeps its stored files.

A changed bucket is either rewritten whole into one new file (copy-on-write), or, on a
MERGE_ON_READ table, keeps its files: the rows the batch replaces or deletes get a deletion
vector on their file, and the batch's rows go into one new delta file of the bucket's file
group. The bucket's earlier delta files go into that new file too while they are small next
to its base file (see DeltaFileLimits.fold_fraction), so a bucket settles at a base file and
one delta file. The per-bucket choice: a bucket that already holds `max_delta_files` files,
or whose deleted fraction would pass `max_deleted_fraction`, is rewritten instead.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from runner import faults
from runner.delta.arrow_read import kept_batches
from runner.delta.deletion_vectors import DeletionVectorFile, read_deleted_rows
from runner.delta.snapshot import DataFile, Group
from runner.index.naming import data_file_path
from runner.storage.location import TableLocation
from runner.storage.meta_columns import BUCKET, COMMIT_SEQNO, PARTITION_PATH, RECORD_KEY
from runner.storage.parquet_file import BucketFile, conform
from runner.write import tombstones
from runner.write.bucket_merge import (
    BucketMerge,
    MergeSettings,
    merge_bucket,
    run_bounds,
    stored_key_columns,
    summarize_stored,
)
from runner.write.cdc_apply import Applied, apply_changes
from runner.write.field_merge import Merger, load_merger, merge_fields

ACTION = "__runner_action"
# What mapInArrow runs on the executors (or runner/write/driver_merge.py on driver threads).
ExecutorJob = Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]
# Counted per bucket and summed into the run summary.
COUNTED_ACTIONS = (
    *("insert", "update", "deleted", "duplicate", "stale", "delete_missing"),
    *("late", "superseded", "closed"),  # a change feed's (runner/write/cdc_apply.py)
)

RESULT_SCHEMA = pa.schema(
    [
        pa.field("partition_path", pa.string()),
        pa.field("bucket", pa.int32()),
        pa.field("path", pa.string()),  # the new file, if any
        pa.field("size", pa.int64()),
        pa.field("num_records", pa.int64()),
        pa.field("stats", pa.string()),
        pa.field("changed", pa.bool_()),
        pa.field("rewritten", pa.bool_()),  # the bucket's stored files are replaced
        # merge-on-read: JSON list of {"path", "deletionVector"} for stored files losing rows
        pa.field("deletion_vectors", pa.string()),
        pa.field("dv_path", pa.string()),  # the DV file written, if any
        pa.field("dv_size", pa.int64()),
        # merge-on-read: JSON list of the delta files folded into the new file (removed)
        pa.field("folded", pa.string()),
        *[pa.field(a, pa.int64()) for a in COUNTED_ACTIONS],
    ]
)


def result_row(group: Group | None, **values: object) -> dict[str, object]:
    """A RESULT_SCHEMA row for `group` (None: a row about no bucket): nothing written,
    nothing counted, unless `values` say otherwise."""
    return {
        "partition_path": group[0] if group else None,
        "bucket": group[1] if group else None,
        "path": None,
        "size": 0,
        "num_records": 0,
        "stats": None,
        "changed": False,
        "rewritten": False,
        "deletion_vectors": None,
        "dv_path": None,
        "dv_size": 0,
        "folded": None,
        **dict.fromkeys(COUNTED_ACTIONS, 0),
        **values,
    }


@dataclass(frozen=True)
class DeltaFileLimits:
    """When a MERGE_ON_READ bucket is rewritten rather than given another delta file."""

    max_files: int
    max_deleted_fraction: float
    # Delta files are folded into the bucket's new delta file while together they hold at
    # most this fraction of the bytes of the bucket's largest (base) file: rewriting them
    # costs little next to the file opens and reads they save every reader.
    fold_fraction: float = 0.25

    def folded(self, stored: list[DataFile]) -> list[int]:
        """Indices of the delta files (every file but the largest) to fold, smallest first."""
        if len(stored) < 2:
            return []
        by_size = sorted(range(len(stored)), key=lambda i: stored[i].size)
        budget = self.fold_fraction * stored[by_size[-1]].size
        chosen: list[int] = []
        for i in by_size[:-1]:
            budget -= stored[i].size
            if budget < 0:
                break
            chosen.append(i)
        return chosen


# A copy-on-write bucket whose stored files hold at most this many bytes is read once,
# whole, and its kept rows taken from memory: reading the key columns first and the whole
# rows again cost a small file a third more than the rewrite itself (two opens, two reads).
# Larger buckets are read twice, the second time row group by row group, so one task never
# holds a large bucket's rows.
WHOLE_READ_MAX_BYTES = 16 * 2**20


@dataclass(frozen=True)
class _StoredKeys:
    """The live rows of a bucket's stored files: key (and ordering) columns, with each
    row's file (index into the bucket's file list) and position in that file."""

    rows: pa.Table
    files: np.ndarray
    positions: np.ndarray
    deleted: list[np.ndarray]  # per file, the positions its current DV deletes
    whole: list[pa.Table] | None = None  # per file, every row and column, if read whole


@dataclass(frozen=True)
class WriteJob:
    """The function handed to mapInArrow; picklable, so it travels to the executors.

    Rows arrive grouped by (partition path, bucket) and sorted by key. For each bucket the
    job reads the stored files' keys, decides with `merge_bucket`, then writes the bucket's
    new content (a rewrite, or deletion vectors and a delta file).
    """

    table: TableLocation  # with the object store settings the driver resolved
    instant: str
    file_schema: pa.Schema
    file_ids: dict[Group, str]
    stored: dict[Group, list[DataFile]]  # the bucket's live files
    merge: MergeSettings
    fault: str | None = None  # RUNNER_FAULT of the driver, for crash tests
    delta_files: DeltaFileLimits | None = None  # None: copy-on-write

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        partition, token = task_token()
        fs, root = self.table.filesystem()
        seqno = SeqNo(self.instant, partition)
        # merge_mode custom: one instance of the user's merger per task (or driver thread)
        merger = load_merger(self.merge.merger) if self.merge.merger else None
        group: Group | None = None
        parts: list[pa.Table] = []
        for batch in batches:
            if batch.num_rows == 0:
                continue
            for key, part in split_groups(pa.Table.from_batches([batch])):
                if key != group and parts:
                    yield self._write_bucket(fs, root, token, seqno, group, parts, merger)
                    parts = []
                group = key
                parts.append(part)
        if parts:
            yield self._write_bucket(fs, root, token, seqno, group, parts, merger)

    def _write_bucket(
        self,
        fs: pafs.FileSystem,
        root: str,
        token: str,
        seqno: SeqNo,
        group: Group | None,
        parts: list[pa.Table],
        merger: Merger | None,
    ) -> pa.RecordBatch:
        assert group is not None, "a bucket's rows come with its group"
        every_row = pa.concat_tables(parts)
        counts = dict.fromkeys(COUNTED_ACTIONS, 0)
        actions = every_row.column(ACTION)
        if self.merge.cdc is None:  # a change feed's events are counted where applied
            counts["duplicate"] = pc.sum(pc.equal(actions, "duplicate")).as_py() or 0
        incoming = every_row.filter(pc.equal(actions, "candidate"))
        stored = self.stored.get(group, [])
        keys = self._stored_keys(fs, root, stored)
        # only stored rows whose key the batch holds matter: one hash lookup per stored key,
        # then the per-key summary and the decision over those few rows
        batch_keys = incoming.column(RECORD_KEY)
        matched = pc.is_in(keys.rows.column(RECORD_KEY), value_set=batch_keys).to_numpy(
            zero_copy_only=False
        )
        matched_rows = np.flatnonzero(matched)
        candidates = keys.rows.take(matched_rows)
        applied: Applied | None = None
        if self.merge.merges_fields:  # the new rows take fields of the stored ones
            parts = list(self._live_rows(fs, root, stored, keys, matched, range(len(stored))))
            stored_rows = pa.concat_tables(parts) if parts else self.file_schema.empty_table()
            if self.merge.cdc is not None:
                applied = self._apply_changes(fs, root, stored, every_row, stored_rows)
                decision = applied.merge
            else:
                decision = merge_fields(
                    every_row, stored_rows, self.merge, self.file_schema, merger
                )
        else:
            decision = merge_bucket(incoming, summarize_stored(candidates, self.merge), self.merge)
        for action, count in decision.counts.items():
            counts[action] += count
        row = result_row(group, **counts)
        row["changed"] = any(counts[a] for a in ("insert", "update", "deleted")) or bool(
            applied and applied.tombstones_changed
        )
        if not row["changed"]:  # the stored files stay as they are
            return pa.RecordBatch.from_pylist([row], schema=RESULT_SCHEMA)

        new_file = BucketFile(fs, f"{root}/{self._relative(group, token)}", self.file_schema)
        dropped = self._dropped_rows(keys.rows.num_rows, matched_rows, candidates, decision)
        if self._rewrites(stored, keys, dropped):
            for part in self._live_rows(fs, root, stored, keys, ~dropped, range(len(stored))):
                new_file.write(part)  # the rows that stay: not deleted before, not replaced now
            row["rewritten"] = True
        else:
            assert self.delta_files is not None
            folded = self.delta_files.folded(stored)
            for part in self._live_rows(fs, root, stored, keys, ~dropped, folded):
                new_file.write(part)
            row.update(self._attach_deletion_vectors(fs, root, stored, keys, dropped, folded))
            if folded:
                row["folded"] = json.dumps([stored[i].path for i in folded])
        new = decision.write
        seq_index = new.schema.get_field_index(COMMIT_SEQNO)
        new_file.write(
            conform(new.set_column(seq_index, COMMIT_SEQNO, seqno.take(len(new))), self.file_schema)
        )
        if applied is not None and applied.tombstones.num_rows:
            tombstones.attach(new_file, tombstones.encode(applied.tombstones), group)
        closed = new_file.close()
        faults.maybe_fail("after_bucket_file", self.fault or "")
        if closed:  # no file when every row of the bucket was deleted, or none was added
            row.update(
                path=self._relative(group, token),
                size=new_file.size,
                num_records=new_file.stats.rows,
                stats=new_file.stats.to_json(),
            )
        return pa.RecordBatch.from_pylist([row], schema=RESULT_SCHEMA)

    def _apply_changes(
        self,
        fs: pafs.FileSystem,
        root: str,
        stored: list[DataFile],
        every_row: pa.Table,
        stored_rows: pa.Table,
    ) -> Applied:
        """A change feed's events over the stored rows of their keys and the bucket's
        tombstones (in its files' footers, those younger than cdc.tombstone_hours)."""
        cdc, scd = self.merge.cdc, self.merge.scd
        assert cdc is not None and scd is not None, "merge_settings sets both for a feed"
        sequence_type = self.file_schema.field(cdc.sequence_by).type
        remembered = tombstones.read(fs, root, [f.path for f in stored], sequence_type)
        remembered = tombstones.unexpired(remembered, self.instant, cdc.tombstone_hours)
        return apply_changes(
            every_row, stored_rows, remembered, cdc, scd, self.file_schema, self.instant
        )

    def _relative(self, group: Group, token: str) -> str:
        return data_file_path(group[0], self.file_ids[group], token, self.instant)

    def _stored_keys(self, fs: pafs.FileSystem, root: str, stored: list[DataFile]) -> _StoredKeys:
        """The key columns of the bucket's stored rows that no deletion vector deletes."""
        columns = stored_key_columns(self.merge)
        read_whole = self.delta_files is None and (
            sum(f.size for f in stored) <= WHOLE_READ_MAX_BYTES
        )
        tables, files, positions, deleted = [], [], [], []
        whole: list[pa.Table] | None = [] if read_whole else None
        for index, f in enumerate(stored):
            parquet = pq.ParquetFile(f"{root}/{f.path}", filesystem=fs)
            table = parquet.read() if whole is not None else parquet.read(columns=columns)
            if whole is not None:
                whole.append(table)
            gone = (
                read_deleted_rows(fs, root, f.deletion_vector)
                if f.deletion_vector
                else np.empty(0, np.uint64)
            )
            where = np.arange(table.num_rows, dtype=np.int64)
            if len(gone):
                live = np.ones(table.num_rows, dtype=bool)
                live[gone.astype(np.int64)] = False
                table, where = table.filter(pa.array(live)), where[live]
            tables.append(table.select(columns))
            files.append(np.full(len(where), index, dtype=np.int32))
            positions.append(where)
            deleted.append(gone)
        if not tables:
            empty = self.file_schema.empty_table().select(columns)
            return _StoredKeys(empty, np.empty(0, np.int32), np.empty(0, np.int64), [])
        return _StoredKeys(
            pa.concat_tables(tables),
            np.concatenate(files),
            np.concatenate(positions),
            deleted,
            whole,
        )

    def _live_rows(
        self,
        fs: pafs.FileSystem,
        root: str,
        stored: list[DataFile],
        keys: _StoredKeys,
        chosen: np.ndarray,
        files: Iterable[int],
    ) -> Iterator[pa.Table]:
        """Whole rows, every column, of the stored files at `files`: the live rows `chosen`
        (a mask over keys.rows) picks, from memory when the bucket was read whole, else
        row group by row group."""
        for index in files:
            mine = keys.files == index
            if not chosen[mine].any():
                continue
            keep = np.zeros(stored[index].num_records, dtype=bool)
            keep[keys.positions[mine]] = chosen[mine]
            if keys.whole is not None:
                yield conform(keys.whole[index].filter(pa.array(keep)), self.file_schema)
                continue
            parquet = pq.ParquetFile(f"{root}/{stored[index].path}", filesystem=fs)
            yield from kept_batches(parquet, keep, self.file_schema)

    @staticmethod
    def _dropped_rows(
        live_rows: int, matched_rows: np.ndarray, candidates: pa.Table, decision: BucketMerge
    ) -> np.ndarray:
        """Which live stored rows the batch replaces or deletes (a mask over keys.rows);
        `candidates` are the rows at `matched_rows`, those whose key is in the batch."""
        mask = np.zeros(live_rows, dtype=bool)
        if len(decision.drop_keys):
            hit = pc.is_in(candidates.column(RECORD_KEY), value_set=decision.drop_keys)
            mask[matched_rows[hit.to_numpy(zero_copy_only=False)]] = True
        return mask

    def _rewrites(self, stored: list[DataFile], keys: _StoredKeys, dropped: np.ndarray) -> bool:
        """Copy-on-write for this bucket: always on a COPY_ON_WRITE table; on MERGE_ON_READ
        when the bucket has too many files or would have too many deleted rows."""
        limits = self.delta_files
        if limits is None or not stored:
            return True
        stored_rows = sum(f.num_records for f in stored)
        deleted = sum(len(d) for d in keys.deleted) + int(np.count_nonzero(dropped))
        return (
            len(stored) >= limits.max_files or deleted > limits.max_deleted_fraction * stored_rows
        )

    def _attach_deletion_vectors(
        self,
        fs: pafs.FileSystem,
        root: str,
        stored: list[DataFile],
        keys: _StoredKeys,
        dropped: np.ndarray,
        folded: list[int],
    ) -> dict[str, object]:
        """One DV file for the bucket: per stored file losing rows (folded files aside: they
        go), the union of the rows its current DV deletes and the rows the batch drops now."""
        dv_file = DeletionVectorFile(fs, root, self.instant)
        vectors = []
        for index, f in enumerate(stored):
            if index in folded:
                continue
            now = keys.positions[(keys.files == index) & dropped]
            if not len(now):
                continue
            rows = np.union1d(keys.deleted[index], now.astype(np.uint64))
            vectors.append({"path": f.path, "deletionVector": dv_file.add(rows).to_log()})
        if not vectors:
            return {}
        size = dv_file.close()
        faults.maybe_fail("after_deletion_vector", self.fault or "")
        return {
            "deletion_vectors": json.dumps(vectors),
            "dv_path": dv_file.relative_path,
            "dv_size": size,
        }


def task_token() -> tuple[int, str]:
    """The Spark task's partition and Hudi's write token, <partition>-<stage>-<attempt>,
    which names every file the task writes (a retried task writes other files). A job run
    on the driver (runner/write/driver_merge.py) gets its worker's from `driver_task`."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        given: tuple[int, str] | None = getattr(_driver_task, "token", None)
        return given or (0, "0-0-0")
    return ctx.partitionId(), f"{ctx.partitionId()}-{ctx.stageId()}-{ctx.attemptNumber()}"


_driver_task = threading.local()


@contextmanager
def driver_task(partition: int, token: str) -> Iterator[None]:
    """Run an executor job on this driver thread as task `partition` with write `token`."""
    _driver_task.token = (partition, token)
    try:
        yield
    finally:
        _driver_task.token = None


@dataclass
class SeqNo:
    """Hudi-style `_commit_seqno`: <instant>_<task partition>_<row counter>."""

    instant: str
    partition: int
    next: int = 0

    def take(self, n: int) -> pa.Array:
        start, self.next = self.next, self.next + n
        counter = pc.cast(pa.array(np.arange(start, start + n, dtype=np.int64)), pa.string())
        return pc.binary_join_element_wise(f"{self.instant}_{self.partition}_", counter, "")


def group_codes(table: pa.Table) -> pa.Array:
    """One integer per row, equal exactly where (partition path, bucket) is: the partition
    path's index among the table's distinct ones, times 2**32, plus the bucket. Sorting or
    comparing these costs a fraction of doing so on the strings. For keyed rows only: an
    int32 bucket and no nulls (rows without a key are set aside before any write)."""
    paths = pc.dictionary_encode(table.column(PARTITION_PATH).combine_chunks())
    index = pc.cast(paths.indices, pa.int64())
    bucket = pc.cast(table.column(BUCKET).combine_chunks(), pa.int64())
    return pc.add(pc.multiply(index, 1 << 32), bucket)


def split_groups(
    table: pa.Table, codes: pa.Array | None = None
) -> Iterator[tuple[tuple[str, int], pa.Table]]:
    """Contiguous runs of equal (partition path, bucket) in a table sorted by them, or in
    the order of `codes` (its group_codes, as group_order sorts them)."""
    pp = table.column(PARTITION_PATH)
    bucket = table.column(BUCKET)
    for start, end in run_bounds(group_codes(table) if codes is None else codes):
        yield (pp[start].as_py(), bucket[start].as_py()), table.slice(start, end - start)


def group_order(table: pa.Table) -> tuple[pa.Array, pa.Array]:
    """The order that puts a table's rows group by group (the groups in no particular
    order), and the rows' group_codes in that order."""
    codes = group_codes(table)
    order = pc.sort_indices(codes)
    return order, codes.take(order)
