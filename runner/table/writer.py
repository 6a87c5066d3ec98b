"""The executor-side writer: one parquet file per (partition path, bucket), with Delta stats.

It runs inside `mapInArrow` on rows sorted by (partition path, bucket, record key). Each row
carries an `_action`: rows marked insert, update or keep are written; the others are only
counted. A bucket whose rows did not change is not rewritten: its file is dropped and the
driver keeps the old one.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from runner.index.naming import data_file_name

ACTION = "__runner_action"
WRITTEN_ACTIONS = ("insert", "update", "keep")
# Counted per group; every action that is not written is one of these or a silent companion.
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
        return value.isoformat()  # type: ignore[attr-defined]
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
            if f.name not in self.mins or lo < self.mins[f.name]:  # type: ignore[operator]
                self.mins[f.name] = lo
            if f.name not in self.maxs or hi > self.maxs[f.name]:  # type: ignore[operator]
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
    """The function handed to mapInArrow; picklable, so it travels to the executors."""

    table_uri: str
    instant: str
    file_schema: pa.Schema
    file_ids: dict[tuple[str, int], str]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        token = f"{ctx.partitionId()}-{ctx.stageId()}-{ctx.attemptNumber()}" if ctx else "0-0-0"
        fs, root = pafs.FileSystem.from_uri(self.table_uri)
        seqno = _SeqNo(self.instant, ctx.partitionId() if ctx else 0)
        current: _GroupWriter | None = None
        for batch in batches:
            if batch.num_rows == 0:
                continue
            table = pa.Table.from_batches([batch])
            for group, part in _split_groups(table):
                if current is None or current.group != group:
                    if current is not None:
                        yield current.finish()
                    name = data_file_name(self.file_ids[group], token, self.instant)
                    rel = f"{group[0]}/{name}" if group[0] else name
                    current = _GroupWriter(group, fs, f"{root}/{rel}", rel, self.file_schema)
                current.add(part, seqno)
        if current is not None:
            yield current.finish()


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


def _split_groups(table: pa.Table) -> Iterator[tuple[tuple[str, int], pa.Table]]:
    """Contiguous runs of equal (partition path, bucket) in a sorted table."""
    pp = table.column("_partition_path")
    bucket = table.column("_bucket")
    keys = pc.binary_join_element_wise(pp, pc.cast(bucket, pa.string()), "\x00")
    ends = pc.run_end_encode(keys.combine_chunks()).run_ends.to_pylist()
    start = 0
    for end in ends:
        yield (pp[start].as_py(), bucket[start].as_py()), table.slice(start, end - start)
        start = end


class _GroupWriter:
    def __init__(self, group, fs: pafs.FileSystem, full_path: str, rel: str, schema: pa.Schema):
        self.group = group
        self.fs = fs
        self.full_path = full_path
        self.rel = rel
        self.schema = schema
        self.stats = _Stats(schema)
        self.counts = dict.fromkeys(COUNTED_ACTIONS, 0)
        self.writer: pq.ParquetWriter | None = None

    def add(self, part: pa.Table, seqno: _SeqNo) -> None:
        actions = part.column(ACTION)
        for action, count in zip(*_value_counts(actions), strict=True):
            if action in self.counts:
                self.counts[action] += count
        rows = part.filter(pc.is_in(actions, pa.array(WRITTEN_ACTIONS)))
        if rows.num_rows == 0:
            return
        new = pc.is_null(rows.column("_commit_seqno"))
        seq = pc.if_else(new, seqno.take(rows.num_rows), rows.column("_commit_seqno"))
        rows = rows.set_column(rows.schema.get_field_index("_commit_seqno"), "_commit_seqno", seq)
        rows = rows.select(self.schema.names).cast(self.schema)
        if self.writer is None:
            self.fs.create_dir(self.full_path.rsplit("/", 1)[0], recursive=True)
            self.writer = pq.ParquetWriter(
                self.fs.open_output_stream(self.full_path), self.schema, compression="snappy"
            )
        self.writer.write_table(rows)
        self.stats.add(rows)

    def finish(self) -> pa.RecordBatch:
        changed = any(self.counts[a] for a in ("insert", "update", "deleted"))
        path, size = None, 0
        if self.writer is not None:
            self.writer.close()
            if changed:
                path, size = self.rel, self.fs.get_file_info(self.full_path).size
            else:
                self.fs.delete_file(self.full_path)  # same rows as the stored file: keep that
        row = {
            "partition_path": self.group[0],
            "bucket": self.group[1],
            "path": path,
            "size": size,
            "num_records": self.stats.rows if path else 0,
            "stats": self.stats.to_json() if path else None,
            "changed": changed,
            **self.counts,
        }
        return pa.RecordBatch.from_pylist([row], schema=RESULT_SCHEMA)


def _value_counts(values: pa.ChunkedArray) -> tuple[list[str], list[int]]:
    counts = pc.value_counts(values.combine_chunks())
    return counts.field("values").to_pylist(), counts.field("counts").to_pylist()
