"""The executor-side writer of a bucket expansion: stored rows into their new buckets' files.

Rows arrive with their new `_bucket` already computed by Spark. With multiple_rehash each
task holds the rows of ONE old bucket file, whose rows can only go to buckets b, b+N, ...,
so the task keeps one open file per new bucket it meets (at most the expansion factor) and
streams into them: no shuffle, memory bounded by row groups. With overwrite the rows come
shuffled and sorted by (partition path, bucket), and each file is closed when its group ends.
Rows are copied as they are: only `_bucket` changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from runner import faults
from runner.index.naming import data_file_name
from runner.table.writer import BucketFile, conform, split_groups

Group = tuple[str, int]

REGROUP_RESULT_SCHEMA = pa.schema(
    [
        pa.field("partition_path", pa.string()),
        pa.field("bucket", pa.int32()),
        pa.field("path", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("num_records", pa.int64()),
        pa.field("stats", pa.string()),
    ]
)


@dataclass(frozen=True)
class RegroupJob:
    """The function handed to mapInArrow; picklable, so it travels to the executors."""

    table_uri: str
    instant: str
    file_schema: pa.Schema
    file_ids: dict[Group, str]
    sorted_groups: bool  # True: groups arrive one after another (overwrite)
    fault: str | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        token = f"{ctx.partitionId()}-{ctx.stageId()}-{ctx.attemptNumber()}" if ctx else "0-0-0"
        fs, root = pafs.FileSystem.from_uri(self.table_uri)
        open_files: dict[Group, tuple[str, BucketFile]] = {}
        for batch in batches:
            if batch.num_rows == 0:
                continue
            table = pa.Table.from_batches([batch])
            if not self.sorted_groups:
                table = table.sort_by([("_partition_path", "ascending"), ("_bucket", "ascending")])
            for group, rows in split_groups(table):
                if self.sorted_groups and group not in open_files:
                    yield from self._close_all(open_files)
                if group not in open_files:
                    name = data_file_name(self.file_ids[group], token, self.instant)
                    rel = f"{group[0]}/{name}" if group[0] else name
                    open_files[group] = (rel, BucketFile(fs, f"{root}/{rel}", self.file_schema))
                open_files[group][1].write(conform(rows, self.file_schema))
        yield from self._close_all(open_files)

    def _close_all(self, open_files: dict[Group, tuple[str, BucketFile]]):
        for (pp, bucket), (rel, out) in sorted(open_files.items()):
            out.close()
            faults.maybe_fail("after_bucket_file", self.fault or "")
            row = {
                "partition_path": pp,
                "bucket": bucket,
                "path": rel,
                "size": out.size,
                "num_records": out.stats.rows,
                "stats": out.stats.to_json(),
            }
            yield pa.RecordBatch.from_pylist([row], schema=REGROUP_RESULT_SCHEMA)
        open_files.clear()
