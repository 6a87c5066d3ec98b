"""The executor side of a compaction: each bucket's live rows folded into one file.

A task receives bucket descriptions (one row per bucket: its group and its files with their
deletion vectors, as JSON), reads each file's live rows with pyarrow, sorts them by key and
writes one new base file of the bucket's file group. Rows are copied as they are (their
`_commit_time` and `_commit_seqno` included): a compaction changes no data.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from runner import faults
from runner.delta.arrow_read import live_batches
from runner.delta.deletion_vectors import DeletionVector
from runner.index.naming import data_file_path
from runner.storage.location import TableLocation
from runner.storage.meta_columns import RECORD_KEY
from runner.storage.parquet_file import BucketFile
from runner.write import tombstones
from runner.write.regroup_writer import REGROUP_RESULT_SCHEMA
from runner.write.task import task_token

BUCKETS_SCHEMA = pa.schema(
    [
        pa.field("partition_path", pa.string()),
        pa.field("bucket", pa.int32()),
        pa.field("file_id", pa.string()),
        pa.field("files", pa.string()),  # JSON list of {"path", "deletionVector"}
    ]
)


@dataclass(frozen=True)
class CompactJob:
    """mapInArrow over BUCKETS_SCHEMA rows; one REGROUP_RESULT_SCHEMA row per bucket."""

    table: TableLocation
    instant: str
    file_schema: pa.Schema
    fault: str | None = None

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        _, token = task_token()
        fs, root = self.table.filesystem()
        for batch in batches:
            for bucket in batch.to_pylist():
                yield self._compact(fs, root, token, bucket)

    def _compact(
        self, fs: pafs.FileSystem, root: str, token: str, bucket: dict[str, Any]
    ) -> pa.RecordBatch:
        pp, number = bucket["partition_path"], bucket["bucket"]
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
        rel = data_file_path(pp, bucket["file_id"], token, self.instant)
        out = BucketFile(fs, f"{root}/{rel}", self.file_schema)
        if parts:
            rows = pa.concat_tables(parts)
            out.write(rows.take(pc.sort_indices(rows, [(RECORD_KEY, "ascending")])))
        footer = tombstones.carried(fs, root, [f["path"] for f in files])
        if footer is not None:  # a change feed's deleted keys stay remembered
            tombstones.attach(out, footer, (pp, number))
        written = out.close()
        faults.maybe_fail("after_bucket_file", self.fault or "")
        row = {
            "partition_path": pp,
            "bucket": number,
            "path": rel if written else None,  # every row of the bucket was deleted
            "size": out.size,
            "num_records": out.stats.rows,
            "stats": out.stats.to_json() if written else None,
        }
        return pa.RecordBatch.from_pylist([row], schema=REGROUP_RESULT_SCHEMA)
