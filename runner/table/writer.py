"""The executor-side writer: one parquet file per (partition path, bucket), with Delta stats.

It runs inside `mapInArrow` on the incoming rows, sorted by (partition path, bucket, record
key) and marked by Spark as `candidate` (the batch's winner for its key) or `duplicate`.
Stored rows never cross the shuffle: each bucket's stored file is read here, next to its
incoming rows, the way Hudi's merge handle works. A bucket whose rows did not change is not
rewritten: the driver keeps its stored file.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from runner import faults
from runner.index.naming import data_file_name
from runner.table.bucket_merge import (
    MergeSettings,
    merge_bucket,
    stored_key_columns,
    summarize_stored,
)
from runner.table.meta import BUCKET, COMMIT_SEQNO, PARTITION_PATH, RECORD_KEY
from runner.table.snapshot import Group
from runner.table.storage import TableLocation

ACTION = "__runner_action"
# Distinct in every row: a dictionary page would only be built and thrown away.
_UNIQUE_COLUMNS = (COMMIT_SEQNO, RECORD_KEY)
# Counted per bucket and summed into the run summary.
COUNTED_ACTIONS = ("insert", "update", "deleted", "duplicate", "stale", "delete_missing")

RESULT_SCHEMA = pa.schema(
    [
        pa.field("partition_path", pa.string()),
        pa.field("bucket", pa.int32()),
        pa.field("path", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("num_records", pa.int64()),
        pa.field("stats", pa.string()),
        pa.field("changed", pa.bool_()),
        *[pa.field(a, pa.int64()) for a in COUNTED_ACTIONS],
    ]
)


def _stat_value(value: object, typ: pa.DataType, upper: bool) -> object | None:
    """A min/max value as Delta's JSON statistics want it, or None to leave it out."""
    if value is None:
        return None
    if pa.types.is_floating(typ):
        return None if math.isnan(value) or math.isinf(value) else value  # type: ignore[arg-type]
    if pa.types.is_integer(typ) or pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return value
    if pa.types.is_date32(typ):
        return str(value.isoformat())  # type: ignore[attr-defined]
    if pa.types.is_timestamp(typ):
        ts: dt.datetime = value  # type: ignore[assignment]
        # Delta stats have millisecond precision: round the max up so pruning stays safe.
        ms = ts.replace(microsecond=ts.microsecond // 1000 * 1000)
        if upper and ms != ts:
            ms += dt.timedelta(milliseconds=1)
        if ms.tzinfo is not None:
            ms = ms.astimezone(dt.UTC).replace(tzinfo=None)
        return ms.isoformat(timespec="milliseconds") + "Z"
    return None


@dataclass
class _Stats:
    """Running min, max and null count per top-level column of one file."""

    schema: pa.Schema
    mins: dict[str, object] = field(default_factory=dict)
    maxs: dict[str, object] = field(default_factory=dict)
    nulls: dict[str, int] = field(default_factory=dict)
    rows: int = 0

    def add(self, table: pa.Table) -> None:
        self.rows += table.num_rows
        for f in self.schema:
            if pa.types.is_nested(f.type):
                continue
            column = table.column(f.name)
            self.nulls[f.name] = self.nulls.get(f.name, 0) + column.null_count
            if f.type == pa.bool_() or pa.types.is_decimal(f.type) or pa.types.is_binary(f.type):
                continue
            mm = pc.min_max(column)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if lo is None:
                continue
            if f.name not in self.mins or lo < self.mins[f.name]:
                self.mins[f.name] = lo
            if pa.types.is_floating(f.type) and pc.any(pc.is_nan(column)).as_py():
                # min_max skips NaN, which sorts above every number: the file gets no bounds
                # (NaN stays the max, as no comparison with it is true)
                self.maxs[f.name] = math.nan
            elif f.name not in self.maxs or hi > self.maxs[f.name]:
                self.maxs[f.name] = hi

    def to_json(self) -> str:
        mins, maxs = {}, {}
        for f in self.schema:
            lo = _stat_value(self.mins.get(f.name), f.type, upper=False)
            hi = _stat_value(self.maxs.get(f.name), f.type, upper=True)
            if lo is not None and hi is not None:
                mins[f.name], maxs[f.name] = lo, hi
        return json.dumps(
            {"numRecords": self.rows, "minValues": mins, "maxValues": maxs, "nullCount": self.nulls}
        )


@dataclass(frozen=True)
class WriteJob:
    """The function handed to mapInArrow; picklable, so it travels to the executors.

    Rows arrive grouped by (partition path, bucket) and sorted by key. For each bucket the
    job reads the stored file's keys, decides with `merge_bucket`, then streams the kept
    stored rows and the new rows into the bucket's new file.
    """

    table: TableLocation  # with the object store settings the driver resolved
    instant: str
    file_schema: pa.Schema
    file_ids: dict[tuple[str, int], str]
    stored: dict[tuple[str, int], list[str]]  # the bucket's current files, table-relative
    merge: MergeSettings
    fault: str | None = None  # RUNNER_FAULT of the driver, for crash tests

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx else 0
        token = f"{partition}-{ctx.stageId()}-{ctx.attemptNumber()}" if ctx else "0-0-0"
        fs, root = self.table.filesystem()
        seqno = _SeqNo(self.instant, partition)
        group: Group | None = None
        parts: list[pa.Table] = []
        for batch in batches:
            if batch.num_rows == 0:
                continue
            for key, part in split_groups(pa.Table.from_batches([batch])):
                if key != group and parts:
                    yield self._write_bucket(fs, root, token, seqno, group, parts)
                    parts = []
                group = key
                parts.append(part)
        if parts:
            yield self._write_bucket(fs, root, token, seqno, group, parts)

    def _write_bucket(
        self,
        fs: pafs.FileSystem,
        root: str,
        token: str,
        seqno: _SeqNo,
        group: Group | None,
        parts: list[pa.Table],
    ) -> pa.RecordBatch:
        assert group is not None, "a bucket's rows come with its group"
        incoming = pa.concat_tables(parts)
        counts = dict.fromkeys(COUNTED_ACTIONS, 0)
        actions = incoming.column(ACTION)
        counts["duplicate"] = pc.sum(pc.equal(actions, "duplicate")).as_py() or 0
        incoming = incoming.filter(pc.equal(actions, "candidate"))
        stored_paths = [f"{root}/{p}" for p in self.stored.get(group, [])]
        decision = merge_bucket(incoming, self._stored_keys(fs, stored_paths), self.merge)
        for action, count in decision.counts.items():
            counts[action] += count
        row = {
            "partition_path": group[0],
            "bucket": group[1],
            "path": None,
            "size": 0,
            "num_records": 0,
            "stats": None,
            **counts,
        }
        row["changed"] = any(counts[a] for a in ("insert", "update", "deleted"))
        if not row["changed"]:  # the stored file stays as it is
            return pa.RecordBatch.from_pylist([row], schema=RESULT_SCHEMA)

        name = data_file_name(self.file_ids[group], token, self.instant)
        rel = f"{group[0]}/{name}" if group[0] else name
        out = BucketFile(fs, f"{root}/{rel}", self.file_schema)
        for path in stored_paths:
            for batch in pq.ParquetFile(path, filesystem=fs).iter_batches():
                kept = pa.Table.from_batches([batch])
                if len(decision.drop_keys):
                    kept = kept.filter(
                        pc.invert(pc.is_in(kept.column(RECORD_KEY), decision.drop_keys))
                    )
                out.write(conform(kept, self.file_schema))
        new = decision.write
        seq_index = new.schema.get_field_index(COMMIT_SEQNO)
        out.write(
            conform(new.set_column(seq_index, COMMIT_SEQNO, seqno.take(len(new))), self.file_schema)
        )
        closed = out.close()
        faults.maybe_fail("after_bucket_file", self.fault or "")
        if closed:  # no file when every row of the bucket was deleted
            row.update(
                path=rel, size=out.size, num_records=out.stats.rows, stats=out.stats.to_json()
            )
        return pa.RecordBatch.from_pylist([row], schema=RESULT_SCHEMA)

    def _stored_keys(self, fs: pafs.FileSystem, paths: list[str]) -> pa.Table:
        """Per stored key of the bucket: row count and greatest precombine value."""
        columns = stored_key_columns(self.merge)
        tables = [pq.read_table(p, columns=columns, filesystem=fs) for p in paths]
        stored = pa.concat_tables(tables) if tables else self.file_schema.empty_table()
        return summarize_stored(stored.select(columns), self.merge)


@dataclass
class _SeqNo:
    """Hudi-style `_commit_seqno`: <instant>_<task partition>_<row counter>."""

    instant: str
    partition: int
    next: int = 0

    def take(self, n: int) -> pa.Array:
        start, self.next = self.next, self.next + n
        counter = pc.cast(pa.array(range(start, start + n), pa.int64()), pa.string())
        return pc.binary_join_element_wise(f"{self.instant}_{self.partition}_", counter, "")


def split_groups(
    table: pa.Table, bucket_column: str = BUCKET
) -> Iterator[tuple[tuple[str, int], pa.Table]]:
    """Contiguous runs of equal (partition path, bucket) in a sorted table."""
    pp = table.column(PARTITION_PATH)
    bucket = table.column(bucket_column)
    keys = pc.binary_join_element_wise(pp, pc.cast(bucket, pa.string()), "\x00")
    ends = pc.run_end_encode(keys.combine_chunks()).run_ends.to_pylist()
    start = 0
    for end in ends:
        yield (pp[start].as_py(), bucket[start].as_py()), table.slice(start, end - start)
        start = end


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """In the file schema's column order and types; columns a stored file lacks are null."""
    columns = [
        table.column(f.name) if f.name in table.column_names else pa.nulls(len(table), f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, names=schema.names).cast(schema)


class BucketFile:
    """One bucket's new parquet file, opened on the first rows, with running statistics."""

    def __init__(self, fs: pafs.FileSystem, full_path: str, schema: pa.Schema):
        self.fs = fs
        self.full_path = full_path
        self.schema = schema
        self.stats = _Stats(schema)
        self.writer: pq.ParquetWriter | None = None
        self.stream: pa.NativeFile | None = None
        self.size = 0

    def write(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        if self.writer is None:
            if self.fs.type_name == "local":  # an object store has no directories to make
                self.fs.create_dir(self.full_path.rsplit("/", 1)[0], recursive=True)
            self.stream = self.fs.open_output_stream(self.full_path)
            self.writer = pq.ParquetWriter(
                self.stream,
                self.schema,
                compression="zstd",  # about half of snappy's size here; every Delta reader has it
                use_dictionary=[n for n in self.schema.names if n not in _UNIQUE_COLUMNS],
            )
        self.writer.write_table(rows)
        self.stats.add(rows)

    def close(self) -> bool:
        """Finish the file; False when no row was written (and so no file exists)."""
        if self.writer is None or self.stream is None:
            return False
        self.writer.close()  # leaves the stream open: it was handed a stream, not a path
        self.size = self.stream.tell()
        self.stream.close()  # on an object store, this completes the upload
        return True
