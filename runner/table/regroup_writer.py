"""The executor-side writer of a bucket expansion: stored rows into their new buckets' files.

Rows arrive with their new `_bucket` computed by Spark and their old one in OLD_BUCKET.
With multiple_rehash a task reads whole old bucket files, one after another, and the rows
of old bucket b can only go to buckets b, b+N, ...: so the task keeps the new files of ONE
old bucket open (at most the expansion factor) and closes them when the next old bucket's
rows begin. No shuffle, and few open files. With overwrite the rows come shuffled and
sorted by (partition path, new bucket), and each file is closed when its group ends.
Rows are copied as they are: only `_bucket` changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from runner import faults
from runner.errors import RunnerError
from runner.index.naming import data_file_name
from runner.table.writer import BucketFile, conform, split_groups

Group = tuple[str, int]
OLD_BUCKET = "__runner_old_bucket"

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
    sorted_groups: bool  # True: rows arrive sorted by new bucket (overwrite)
    fault: str | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        token = f"{ctx.partitionId()}-{ctx.stageId()}-{ctx.attemptNumber()}" if ctx else "0-0-0"
        fs, root = pafs.FileSystem.from_uri(self.table_uri)
        open_files: dict[Group, tuple[str, BucketFile]] = {}
        closed: set[Group] = set()
        source: Group | None = None  # the old bucket (or sorted group) being read
        run_column = "_bucket" if self.sorted_groups else OLD_BUCKET
        for batch in batches:
            if batch.num_rows == 0:
                continue
            for run_key, run in split_groups(pa.Table.from_batches([batch]), run_column):
                if run_key != source:
                    yield from self._close_all(open_files, closed)
                    source = run_key
                if not self.sorted_groups:
                    run = run.sort_by([("_bucket", "ascending")])
                for group, rows in split_groups(run):
                    if group in closed:
                        raise RunnerError(
                            f"rows of bucket {group[1]} of {group[0]!r} arrived after its file "
                            "was closed; nothing was committed"
                        )
                    if group not in open_files:
                        name = data_file_name(self.file_ids[group], token, self.instant)
                        rel = f"{group[0]}/{name}" if group[0] else name
                        out = BucketFile(fs, f"{root}/{rel}", self.file_schema)
                        open_files[group] = (rel, out)
                    open_files[group][1].write(conform(rows, self.file_schema))
        yield from self._close_all(open_files, closed)

    def _close_all(self, open_files: dict[Group, tuple[str, BucketFile]], closed: set[Group]):
        for (pp, bucket), (rel, out) in sorted(open_files.items()):
            out.close()
            closed.add((pp, bucket))
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
