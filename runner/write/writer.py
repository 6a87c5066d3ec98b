"""The executor job of a write: the batch's rows of each touched bucket merged with its
stored rows, and the bucket's new files written; one result row per file group written.

It runs inside `mapInArrow` (or on driver threads, runner/write/driver_merge.py) on the
incoming rows, sorted by (partition path, bucket, record key) and marked by Spark as
`candidate` (the batch's winner for its key) or `duplicate`. Per bucket, its rows are
routed to its file groups by key range (runner/write/file_groups.py), and per group:

1. its stored side is read next to its rows (runner/write/stored_bucket.py): the key
   columns of its live stored rows, never shuffled;
2. the task's merge rule decides what the rows become (runner/write/merge_rules.py);
3. a bucket whose rows did not change is not touched: the driver keeps its stored files;
4. a changed one is written by the handle the table's handles pick for it
   (runner/write/handles.py), which says which stored files it replaces and which get a
   deletion vector.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runner.delta.snapshot import DataFile, Group
from runner.index.naming import data_file_path
from runner.storage.location import TableLocation
from runner.storage.meta_columns import BUCKET, PARTITION_PATH, RECORD_KEY
from runner.write.bucket_merge import ACTION as ACTION  # its home is bucket_merge
from runner.write.bucket_merge import MergeSettings, run_bounds, stored_key_columns
from runner.write.change_rows import change_rows, unchanged_keys, without_keys
from runner.write.file_groups import FileGroup, file_groups, route
from runner.write.handles import BucketOutput, Handles
from runner.write.merge_rules import BucketBatch, Merged, MergeRule, merge_rule
from runner.write.stored_bucket import StoredBucket
from runner.write.task import SeqNo, WriteTask, task_token

# What mapInArrow runs on the executors (or runner/write/driver_merge.py on driver threads).
ExecutorJob = Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]

# Counted per bucket and summed into the run summary.
COUNTED_ACTIONS = (
    *("insert", "update", "deleted", "duplicate", "stale", "delete_missing"),
    *("late", "superseded", "closed"),  # a change feed's (runner/write/cdc_apply.py)
    "unchanged",  # equal to the stored row: left alone (target.skip_unchanged)
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
        # JSON list of the stored files the commit removes: every file of a rewritten file
        # group, or the delta files a merge-on-read group folded into its new one
        pa.field("replaced", pa.string()),
        # JSON list of {"path", "size", "num_records", "stats"}: the files of the groups a
        # rewrite split off (runner/write/file_groups.py)
        pa.field("more_files", pa.string()),
        pa.field("cdc_path", pa.string()),  # the change data file written, if any
        pa.field("cdc_size", pa.int64()),
        # the stored files the write looked for its keys in, and those of them whose key
        # filters ruled every key out (their keys not read: runner/storage/key_filter.py)
        pa.field("stored_files", pa.int64()),
        pa.field("files_ruled_out", pa.int64()),
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
        "replaced": None,
        "more_files": None,
        "cdc_path": None,
        "cdc_size": 0,
        "stored_files": 0,
        "files_ruled_out": 0,
        **dict.fromkeys(COUNTED_ACTIONS, 0),
        **values,
    }


@dataclass(frozen=True)
class WriteJob:
    """The function handed to mapInArrow; picklable, so it travels to the executors.

    Rows arrive grouped by (partition path, bucket) and sorted by key; the job writes one
    bucket after the other, with one merge rule for the task (`merge_rule`) and the
    handle `handles` picks for each changed bucket.
    """

    table: TableLocation  # with the object store settings the driver resolved
    instant: str
    file_schema: pa.Schema
    file_ids: dict[Group, str]
    stored: dict[Group, list[DataFile]]  # the bucket's live files
    merge: MergeSettings
    handles: Handles
    change_feed: bool = False  # write the change data file of each changed bucket
    fault: str | None = None  # RUNNER_FAULT of the driver, for crash tests
    file_group_bytes: int | None = None  # a file group's target size; None: groups off

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        partition, token = task_token()
        fs, root = self.table.filesystem()
        seqno = SeqNo(self.instant, partition)
        task = WriteTask(
            *(fs, root, self.file_schema, self.instant, token, seqno, self.fault or ""),
            key_filters=self.handles.key_filters,
        )
        rule = merge_rule(self.merge, self.file_schema, self.instant)
        rows = [
            self._write_group(task, rule, part, unit)
            for batch in _buckets(batches)
            for part, unit in self._units(batch)
        ]
        # one batch of result rows per task: a batch per bucket cost a spread upsert of
        # 128 buckets more than its merges' comparisons (docs/performance.md)
        yield pa.RecordBatch.from_pylist(rows, schema=RESULT_SCHEMA)

    def _units(self, batch: BucketBatch) -> Iterator[tuple[BucketBatch, FileGroup]]:
        """The batch's rows of each file group they fall in (runner/write/file_groups.py),
        with the group; a bucket without stored files is one new group. With groups off
        (a change feed's table: its tombstones are the bucket's), the bucket is one."""
        files = self.stored.get(batch.group, [])
        if not files:
            yield batch, FileGroup(self.file_ids[batch.group], (), None)
            return
        if self.file_group_bytes is None:
            units = [FileGroup(self.file_ids[batch.group], tuple(files), None)]
        else:
            units = file_groups(files)
        if len(units) == 1:
            yield batch, units[0]
            return
        where = route(batch.rows.column(RECORD_KEY), units)
        for index in np.unique(where):
            rows = batch.rows.filter(pa.array(where == index))
            yield BucketBatch(batch.group, rows), units[index]

    def _write_group(
        self, task: WriteTask, rule: MergeRule, batch: BucketBatch, unit: FileGroup
    ) -> dict[str, object]:
        """One file group's merge and write: its result row."""
        group = batch.group
        files = list(unit.files)
        stored = StoredBucket.read(
            task,
            files,
            stored_key_columns(self.merge),
            whole=self.handles.reads_whole(files),
            batch_keys=batch.candidates.column(RECORD_KEY),
        )
        merged = rule.merge(batch, stored)
        before = None  # whole stored rows of the keys the merge drops, once read
        if self.merge.skip_unchanged and merged.counts.get("update"):
            replaced = stored.dropped(merged.drop_keys)
            if self.change_feed or stored.whole is not None:  # whole rows wanted, or had
                before = stored.dropped_rows(replaced)
                same = unchanged_keys(before, merged.write)
            else:
                same = stored.unchanged_keys(replaced, merged.write)
            merged = leave_unchanged(merged, same)
        row = result_row(
            group,
            **merged.counts,
            changed=merged.changed,
            stored_files=len(files),
            files_ruled_out=len(stored.unread),
        )
        if merged.changed:  # else the stored files stay as they are
            dropped = stored.dropped(merged.drop_keys)
            handle = self.handles.handle_for(stored, dropped)
            relative = data_file_path(group[0], unit.file_id, task.token, self.instant)
            out = BucketOutput(task, group, relative, unit, self.file_group_bytes)
            merged = out.numbered(merged)
            row.update(handle.write(out, merged))
            if self.change_feed:
                before = stored.dropped_rows(dropped) if before is None else before
                before = before.filter(pc.is_in(before.column(RECORD_KEY), merged.drop_keys))
                changes = change_rows(before, merged.write, task.file_schema)
                row.update(out.change_file(changes))
        return row


def leave_unchanged(merged: Merged, same: pa.Array) -> Merged:
    """`merged` without the keys `same`, whose new row equals their stored row (target.
    skip_unchanged): the stored row stays where it is, counted as unchanged."""
    if not len(same):
        return merged
    counts = dict(merged.counts)
    counts["update"] -= len(same)
    counts["unchanged"] = counts.get("unchanged", 0) + len(same)
    drop = pc.filter(merged.drop_keys, pc.invert(pc.is_in(merged.drop_keys, value_set=same)))
    return replace(merged, drop_keys=drop, write=without_keys(merged.write, same), counts=counts)


def _buckets(batches: Iterable[pa.RecordBatch]) -> Iterator[BucketBatch]:
    """The rows of each bucket together (a bucket's rows may span batches)."""
    group: Group | None = None
    parts: list[pa.Table] = []
    for batch in batches:
        if batch.num_rows == 0:
            continue
        for key, part in split_groups(pa.Table.from_batches([batch])):
            if key != group and parts:
                assert group is not None
                yield BucketBatch(group, pa.concat_tables(parts))
                parts = []
            group = key
            parts.append(part)
    if parts:
        assert group is not None
        yield BucketBatch(group, pa.concat_tables(parts))


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
