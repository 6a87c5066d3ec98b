"""The executor side of a compaction: each bucket's live rows folded into sorted files, one
per file group.

A task receives bucket descriptions (one row per bucket: its group and its files with their
deletion vectors, as JSON), reads each file's live rows with pyarrow, sorts them by key and
cuts them into file groups of the target size (runner/write/file_groups.py): the bucket's
groups come out disjoint and sorted whatever they were, small neighbours merged, large ones
split. The first group keeps the bucket's first file group id. Rows are copied as they are
(their `_commit_time` and `_commit_seqno` included): a compaction changes no data.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from runner import faults
from runner.delta.arrow_read import live_batches
from runner.delta.deletion_vectors import DeletionVector
from runner.index.naming import data_file_path, new_file_id
from runner.storage.location import TableLocation
from runner.storage.meta_columns import RECORD_KEY
from runner.storage.parquet_file import BucketFile
from runner.write import tombstones
from runner.write.file_groups import cut_points, sorted_by_key
from runner.write.regroup_writer import REGROUP_RESULT_SCHEMA
from runner.write.task import task_token

BUCKETS_SCHEMA = pa.schema(
    [
        pa.field("partition_path", pa.string()),
        pa.field("bucket", pa.int32()),
        pa.field("file_id", pa.string()),
        pa.field("files", pa.string()),  # JSON list of {"path", "deletionVector"}
        pa.field("bytes_per_row", pa.float64()),  # what a row takes in its stored files
    ]
)


@dataclass(frozen=True)
class CompactJob:
    """mapInArrow over BUCKETS_SCHEMA rows; one REGROUP_RESULT_SCHEMA row per file group
    written."""

    table: TableLocation
    instant: str
    file_schema: pa.Schema
    fault: str | None = None
    file_group_bytes: int | None = None  # None: one file per bucket (a change feed's table)
    key_filters: bool = False  # the files carry them (runner/storage/key_filter.py)

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        _, token = task_token()
        fs, root = self.table.filesystem()
        for batch in batches:
            for bucket in batch.to_pylist():
                yield self._compact(fs, root, token, bucket)

    def _compact(
        self, fs: pafs.FileSystem, root: str, token: str, bucket: dict[str, Any]
    ) -> pa.RecordBatch:
        files = json.loads(bucket["files"])
        parts = [
            part
            for f in files
            for part in live_batches(
                fs,
                root,
                f["path"],
                DeletionVector.from_log(f["deletionVector"]) if f["deletionVector"] else None,
                self.file_schema,
            )
        ]
        rows = sorted_by_key(pa.concat_tables(parts) if parts else self.file_schema.empty_table())
        keys = rows.column(RECORD_KEY).combine_chunks()
        cuts = (
            cut_points(keys, bucket["bytes_per_row"], self.file_group_bytes)
            if self.file_group_bytes
            else []
        )
        bounds = [0, *cuts, rows.num_rows]
        written = [
            self._write(fs, root, token, bucket, rows.slice(start, end - start), index)
            for index, (start, end) in enumerate(itertools.pairwise(bounds))
        ]
        faults.maybe_fail("after_bucket_file", self.fault or "")
        return pa.RecordBatch.from_pylist(written, schema=REGROUP_RESULT_SCHEMA)

    def _write(
        self,
        fs: pafs.FileSystem,
        root: str,
        token: str,
        bucket: dict[str, Any],
        rows: pa.Table,
        index: int,
    ) -> dict[str, Any]:
        """The file of the bucket's `index`-th file group (the first keeps the bucket's
        first file group id, and a change feed's tombstones); its result row."""
        pp, number = bucket["partition_path"], bucket["bucket"]
        file_id = bucket["file_id"] if index == 0 else new_file_id(number)
        rel = data_file_path(pp, file_id, token, self.instant)
        out = BucketFile(fs, f"{root}/{rel}", self.file_schema, key_filter=self.key_filters)
        out.write(rows)
        if index == 0:
            paths = [f["path"] for f in json.loads(bucket["files"])]
            footer = tombstones.carried(fs, root, paths)
            if footer is not None:  # a change feed's deleted keys stay remembered
                tombstones.attach(out, footer, (pp, number))
        closed = out.close()
        return {
            "partition_path": pp,
            "bucket": number,
            "path": rel if closed else None,  # every row of the bucket was deleted
            "size": out.size,
            "num_records": out.stats.rows,
            "stats": out.stats.to_json() if closed else None,
        }
