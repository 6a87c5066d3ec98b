"""The executor-side writers of a bucket expansion: stored rows into their new buckets' files.

multiple_rehash and split (RehashJob): Spark computes each stored row's new bucket and sends
them as bitmaps (runner/actions/rehash_bitmaps.py); each task then reads whole old bucket
files with pyarrow and streams their live rows into the files of their new buckets b, b+N,
... (at most k open). The table's rows never pass through Spark rows or a shuffle, like the
merge handle of a write. overwrite (RegroupJob): the rows come shuffled and sorted by
(partition path, new bucket, record key), and each file is closed when its group ends. Rows
are copied as they are: only `_bucket` changes.

File groups (runner/write/file_groups.py) survive an expansion. A rehash writes each old
file group's rows into one file group per new bucket (its id derived from the old group's,
so tasks holding files of one old group agree): an old group's keys lie in its own range,
so the new bucket's groups keep disjoint ranges, each about the old group's size over k.
An overwrite's sorted rows are cut into groups of about `rows_per_group` rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from runner import faults
from runner.delta.deletion_vectors import keep_mask
from runner.delta.snapshot import DataFile, Group
from runner.errors import RunnerError
from runner.index.naming import data_file_path, derived_file_id
from runner.storage.location import TableLocation
from runner.storage.meta_columns import BUCKET, PARTITION_PATH, RECORD_KEY
from runner.storage.parquet_file import BucketFile, OpenFiles, conform
from runner.write.task import task_token
from runner.write.writer import split_groups

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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


# An open file of an expansion: its new bucket, and which part of it ("" the bucket's one
# file; else an old file group's id, or an overwrite's group number).
Part = tuple[str, int, str]


class _Outputs:
    """The open new-bucket files of a task, and the result row of each closed one."""

    def __init__(self, job: RehashJob | RegroupJob):
        _, token = task_token()
        fs, root = job.table.filesystem()
        self.files: OpenFiles[Part] = OpenFiles(
            fs,
            root,
            job.file_schema,
            lambda p: data_file_path(p[0], job.file_id(p), token, job.instant),
            key_filters=job.key_filters,
        )
        self.fs, self.root, self.schema, self.fault = fs, root, job.file_schema, job.fault
        self.closed: set[Part] = set()

    def write(self, part: Part, rows: pa.Table) -> None:
        if part in self.closed:
            raise RunnerError(
                f"rows of bucket {part[1]} of {part[0]!r} arrived after its file was "
                "closed; nothing was committed"
            )
        self.files.write(part, conform(rows, self.schema))

    def close(self, part: Part) -> Iterator[pa.RecordBatch]:
        """Close one file; its result row."""
        rel, out = self.files.close(part)
        yield self._closed(part, rel, out)

    def close_all(self) -> Iterator[pa.RecordBatch]:
        for part, rel, out in self.files.close_all():
            yield self._closed(part, rel, out)

    def _closed(self, part: Part, rel: str, out: BucketFile) -> pa.RecordBatch:
        self.closed.add(part)
        faults.maybe_fail("after_bucket_file", self.fault or "")
        row = {
            "partition_path": part[0],
            "bucket": part[1],
            "path": rel,
            "size": out.size,
            "num_records": out.stats.rows,
            "stats": out.stats.to_json(),
        }
        return pa.RecordBatch.from_pylist([row], schema=REGROUP_RESULT_SCHEMA)


def _file_id(file_ids: Mapping[Group, str], instant: str, part: Part) -> str:
    """A new file's group id: the plan's for its bucket, or one derived from its part."""
    pp, bucket, piece = part
    return derived_file_id(bucket, instant, pp, piece) if piece else file_ids[(pp, bucket)]


# The rows of a rehash's bitmaps (runner/actions/rehash_bitmaps.py): in WORD of an old file
# (rows WORD*64 to WORD*64+63), the rows whose new bucket is BUCKET have their bit set in
# BITS (bit i: row WORD*64+i).
WORD, BITS = "word", "bits"
WORD_ROWS = 64


@dataclass(frozen=True)
class RehashJob:
    """mapInArrow over one row per task (its number, `id`): task i splits the old files of
    `tasks[i]` (an old bucket's files together, one after the other) into their new
    buckets, each row by its bit in the file's `bitmaps[i][n]`. Rows a deletion vector
    deletes are dropped here; the bitmaps cover every stored row."""

    table: TableLocation
    instant: str
    file_schema: pa.Schema
    file_ids: dict[Group, str]
    fault: str | None = None
    keep_groups: bool = False  # one new group per old file group and new bucket
    key_filters: bool = False  # the files carry them (runner/storage/key_filter.py)
    tasks: tuple[tuple[DataFile, ...], ...] = ()
    bitmaps: tuple[tuple[pa.Table, ...], ...] = ()

    def file_id(self, part: Part) -> str:
        return _file_id(self.file_ids, self.instant, part)

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.column("id").to_pylist():
                yield from self._task(self.tasks[task], self.bitmaps[task])

    def _task(
        self, files: Sequence[DataFile], bitmaps: Sequence[pa.Table]
    ) -> Iterator[pa.RecordBatch]:
        out = _Outputs(self)
        old_bucket: Group | None = None  # the new files stay open while its files come
        for stored, its_bitmaps in zip(files, bitmaps, strict=True):
            if (stored.partition_path, stored.bucket) != old_bucket:
                yield from out.close_all()
                old_bucket = (stored.partition_path, stored.bucket)
            self._split_file(out, stored, its_bitmaps)
        yield from out.close_all()

    def _split_file(self, out: _Outputs, stored: DataFile, bitmaps: pa.Table) -> None:
        """Write one old file's live rows into its new buckets' files."""
        path = f"{out.root}/{stored.path}"  # in the table's file system, as pyarrow names it
        rows = pq.ParquetFile(path, filesystem=out.fs)
        count = rows.metadata.num_rows
        buckets = new_buckets(bitmaps, count, path)
        live = keep_mask(out.fs, out.root, stored.deletion_vector, count)
        pp, piece = stored.partition_path, stored.file_id if self.keep_groups else ""
        offset = 0
        for batch in rows.iter_batches():
            part = pa.Table.from_batches([batch])
            kept = live[offset : offset + part.num_rows]
            chosen = buckets[offset : offset + part.num_rows]
            offset += part.num_rows
            if not kept.all():
                part, chosen = part.filter(pa.array(kept)), chosen[kept]
            new = pa.array(chosen)
            part = part.set_column(part.schema.get_field_index(BUCKET), BUCKET, new)
            for bucket in pc.unique(new).to_pylist():
                out.write((pp, bucket, piece), part.filter(pc.equal(new, bucket)))


def new_buckets(bitmaps: pa.Table, count: int, path: str) -> np.ndarray:
    """The new bucket of each of a file's `count` rows, from its bitmaps; an error unless
    they give every row exactly one."""
    words = bitmaps.column(WORD).to_numpy()
    bits = bitmaps.column(BITS).to_numpy().astype("<i8")
    set_bits = np.unpackbits(bits.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    word, bit = np.nonzero(set_bits)
    rows = words[word] * WORD_ROWS + bit
    buckets = np.full(count, -1, dtype=np.int32)
    if rows.size == count and (count == 0 or (rows.min() >= 0 and rows.max() < count)):
        buckets[rows] = bitmaps.column(BUCKET).to_numpy()[word]
    if rows.size != count or (buckets < 0).any():
        raise RunnerError(
            f"{path}: Spark gave {rows.size} of its {count} rows a new bucket, not each once; "
            "nothing was committed"
        )
    return buckets


def rows_per_group(files: Sequence[DataFile], rows: int, group_bytes: int | None) -> int | None:
    """How many of `rows` (read from `files`) make a file group of about `group_bytes`, as
    the files store them; None: one group per bucket (no target size, or no rows)."""
    if not group_bytes or not rows:
        return None
    per_row = sum(f.size for f in files) / rows
    return max(1, int(group_bytes / per_row))


@dataclass(frozen=True)
class RegroupJob:
    """mapInArrow over whole rows, shuffled and sorted by (partition path, new bucket,
    record key); a new bucket's rows cut into groups of about `rows_per_group` (None:
    one file per new bucket), each cut between two keys."""

    table: TableLocation
    instant: str
    file_schema: pa.Schema
    file_ids: dict[Group, str]
    fault: str | None = None
    rows_per_group: int | None = None
    key_filters: bool = False  # the files carry them (runner/storage/key_filter.py)

    def file_id(self, part: Part) -> str:
        return _file_id(self.file_ids, self.instant, part)

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out = _Outputs(self)
        current: Group | None = None
        number, written = 0, 0  # the bucket's group being written, and its rows so far
        for batch in batches:
            if batch.num_rows == 0:
                continue
            for group, rows in split_groups(pa.Table.from_batches([batch])):
                if group != current:
                    yield from out.close_all()
                    current, number, written = group, 0, 0
                while self.rows_per_group and written + rows.num_rows > self.rows_per_group:
                    cut = _cut_after(rows, self.rows_per_group - written)
                    if cut == rows.num_rows:
                        break  # the rest is one key: it stays in this group
                    out.write((*group, str(number or "")), rows.slice(0, cut))
                    yield from out.close((*group, str(number or "")))
                    rows, number, written = rows.slice(cut), number + 1, 0
                out.write((*group, str(number or "")), rows)
                written += rows.num_rows
        yield from out.close_all()


def _cut_after(rows: pa.Table, at: int) -> int:
    """Where to cut rows sorted by key at or after `at`: not between two rows of one key."""
    keys = rows.column(RECORD_KEY)
    at = max(at, 1)
    while at < rows.num_rows and keys[at] == keys[at - 1]:
        at += 1
    return at


def regrouped(spark: SparkSession, rows: DataFrame, groups: int) -> DataFrame:
    """What a RegroupJob takes: `rows` shuffled by (partition path, bucket) into at most one
    task per group (of `groups`) and sorted by key in each task."""
    shuffle = int(spark.conf.get("spark.sql.shuffle.partitions") or "8")
    return rows.repartition(
        max(1, min(groups, shuffle)), PARTITION_PATH, BUCKET
    ).sortWithinPartitions(PARTITION_PATH, BUCKET, RECORD_KEY)
