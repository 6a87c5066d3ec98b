"""One parquet file of a bucket, written with pyarrow, with the Delta statistics of its rows
(and the set of such files a task keeps open).

Every writer of the runner (a run's bucket merge, an expansion, a compaction) writes
through BucketFile: zstd, dictionary pages where they pay, and min/max/null counts kept
while the rows stream through, so the commit needs no second read of the file.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from runner.storage.key_filter import FOOTER_KEY as KEY_FILTER
from runner.storage.key_filter import KeyFilter, key_hashes
from runner.storage.meta_columns import COMMIT_SEQNO, RECORD_KEY

# Distinct in every row: a dictionary page would only be built and thrown away.
_UNIQUE_COLUMNS = (COMMIT_SEQNO, RECORD_KEY)
# Other columns get a dictionary when at most half the values of a file's first rows (this
# many) are distinct. A dictionary of nearly distinct values (ids, amounts, free text) is as
# large as the values and costs a hash of each; without them, files of the bench's rows
# came out a quarter smaller and a quarter faster to write (docs/performance.md).
_DICTIONARY_SAMPLE_ROWS = 1_000


def dictionary_columns(schema: pa.Schema, rows: pa.Table) -> list[str]:
    """The top-level columns worth a dictionary in a file that starts with `rows`: those
    whose sampled values repeat, and dates (a file's days repeat, though its first rows
    may not show it: TPC-H's three date columns hold 2,526 days, and their dictionaries
    made a lineitem bucket's file 4 % faster to write and 2-4 % smaller; past 1 MiB of
    dictionary pyarrow writes plain). (pyarrow matches these names against leaf columns:
    a nested column's leaves get none, as before this choice was made per file.)"""
    sample = rows.slice(0, _DICTIONARY_SAMPLE_ROWS)
    chosen = []
    for f in schema:
        if f.name in _UNIQUE_COLUMNS or pa.types.is_nested(f.type):
            continue
        if (
            pa.types.is_null(f.type)
            or pa.types.is_date(f.type)
            or len(pc.unique(sample.column(f.name))) <= max(1, sample.num_rows // 2)
        ):
            chosen.append(f.name)
    return chosen


def writer_settings(schema: pa.Schema, first_rows: pa.Table) -> dict[str, object]:
    """How every runner file is written: zstd (about half of snappy's size here; every
    Delta reader has it), dictionaries where the first rows say they pay."""
    return {"compression": "zstd", "use_dictionary": dictionary_columns(schema, first_rows)}


def _is_string(typ: pa.DataType) -> bool:
    return bool(pa.types.is_string(typ) or pa.types.is_large_string(typ))


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
class FileStats:
    """Running min, max and null count per top-level column of one file."""

    schema: pa.Schema
    mins: dict[str, object] = field(default_factory=dict)
    maxs: dict[str, object] = field(default_factory=dict)
    nulls: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    unbounded: set[str] = field(default_factory=set)  # columns whose bounds are unknown

    def add(self, table: pa.Table) -> None:
        """Count `table`'s rows and nulls and widen the bounds; string columns' bounds come
        from `add_parquet_strings` (the parquet writer has them)."""
        self.rows += table.num_rows
        for f in self.schema:
            if pa.types.is_nested(f.type):
                continue
            column = table.column(f.name)
            self.nulls[f.name] = self.nulls.get(f.name, 0) + column.null_count
            if f.type == pa.bool_() or pa.types.is_decimal(f.type) or pa.types.is_binary(f.type):
                continue
            if _is_string(f.type):
                continue
            mm = pc.min_max(column)
            self.widen(f.name, mm["min"].as_py(), mm["max"].as_py())
            if pa.types.is_floating(f.type) and pc.any(pc.is_nan(column)).as_py():
                # min_max skips NaN, which sorts above every number: the file gets no bounds
                # (NaN stays the max, as no comparison with it is true)
                self.maxs[f.name] = math.nan

    def add_parquet_strings(self, metadata: pq.FileMetaData) -> None:
        """The bounds of the string columns, from the statistics the parquet writer kept for
        each row group: the same byte order as Arrow's, and no second pass over the rows
        (that pass was a sixth of a file's write time). A row group with values but no
        bounds (parquet leaves out values over 4 KiB) leaves the column without any."""
        leaves = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
        for f in self.schema:
            if not _is_string(f.type) or f.name not in leaves:
                continue
            for g in range(metadata.num_row_groups):
                chunk = metadata.row_group(g).column(leaves[f.name])
                stats = chunk.statistics
                if stats is not None and stats.has_min_max:
                    self.widen(f.name, stats.min, stats.max)
                elif stats is None or stats.null_count != chunk.num_values:
                    self.unbounded.add(f.name)

    def widen(self, name: str, lo: object, hi: object) -> None:
        if lo is None:
            return
        if name not in self.mins or lo < self.mins[name]:  # type: ignore[operator]
            self.mins[name] = lo
        if name not in self.maxs or hi > self.maxs[name]:  # type: ignore[operator]
            self.maxs[name] = hi

    def to_json(self) -> str:
        mins, maxs = {}, {}
        for f in self.schema:
            if f.name in self.unbounded:
                continue
            lo = _stat_value(self.mins.get(f.name), f.type, upper=False)
            hi = _stat_value(self.maxs.get(f.name), f.type, upper=True)
            if lo is not None and hi is not None:
                mins[f.name], maxs[f.name] = lo, hi
        return json.dumps(
            {"numRecords": self.rows, "minValues": mins, "maxValues": maxs, "nullCount": self.nulls}
        )


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """In the file schema's column order and types; columns a stored file lacks are null."""
    # most calls: a write calls this per bucket, per part (metadata compared too: rows read
    # from a data file carry its footer's entries, which `runner read` must not pass on)
    if table.schema.equals(schema, check_metadata=True):
        return table
    present = set(table.column_names)
    columns = [
        table.column(f.name) if f.name in present else pa.nulls(len(table), f.type) for f in schema
    ]
    pairs = zip(columns, schema, strict=True)
    if all(c.type == f.type and (f.nullable or not c.null_count) for c, f in pairs):
        return pa.Table.from_arrays(columns, schema=schema)  # a quarter of a cast's cost
    return pa.Table.from_arrays(columns, names=schema.names).cast(schema)


# Rows are buffered into row groups of about this much Arrow data before they are written:
# Spark hands the writer batches of 10,000 rows, and one row group per batch made files that
# every reader opens group by group (a few per cent slower to read with Polars). A task holds
# at most one such buffer per file it writes.
ROW_GROUP_BYTES = 64 * 1024 * 1024


class BucketFile:
    """One bucket's new parquet file, opened on the first rows, with running statistics;
    rows are written in row groups of ROW_GROUP_BYTES, not one per write call. A data file
    of a MERGE_ON_READ table gets the filter of its record keys in its footer
    (`key_filter`, runner/storage/key_filter.py); a change data file never does."""

    def __init__(self, fs: pafs.FileSystem, full_path: str, schema: pa.Schema, *, key_filter: bool):
        self.fs = fs
        self.full_path = full_path
        self.schema = schema
        self.stats = FileStats(schema)
        self.writer: pq.ParquetWriter | None = None
        self.stream: pa.NativeFile | None = None
        self.size = 0
        self.pending: list[pa.Table] = []
        self.pending_bytes = 0
        self.footer: list[pq.FileMetaData] = []  # the writer's, once closed
        self.metadata: dict[bytes, bytes] = {}  # key-value entries for the footer
        self.key_hashes: list[np.ndarray] | None = (
            [] if key_filter and RECORD_KEY in schema.names else None
        )

    def write(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        self.pending.append(rows)
        self.pending_bytes += rows.nbytes
        if self.pending_bytes >= ROW_GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows as one row group."""
        if not self.pending:
            return
        rows = pa.concat_tables(self.pending)
        self.pending, self.pending_bytes = [], 0
        # statistics and key hashes a row group at a time, not a write at a time: a bulk
        # load into 160 buckets writes each file ~1,500 rows at a time, and the calls per
        # write cost it more than the work (docs/performance.md, "TPC-H refresh sets")
        self.stats.add(rows)
        if self.key_hashes is not None:
            self.key_hashes.append(key_hashes(rows.column(RECORD_KEY)))
        writer = self.writer or self._open(rows)
        try:
            writer.write_table(rows, row_group_size=rows.num_rows)
        except BaseException:
            self._abandon()
            raise

    def _open(self, first_rows: pa.Table) -> pq.ParquetWriter:
        if self.fs.type_name == "local":  # an object store has no directories to make
            self.fs.create_dir(self.full_path.rsplit("/", 1)[0], recursive=True)
        self.stream = self.fs.open_output_stream(self.full_path)
        self.writer = pq.ParquetWriter(
            self.stream,
            self.schema,
            metadata_collector=self.footer,
            **writer_settings(self.schema, first_rows),
        )
        return self.writer

    def _abandon(self) -> None:
        """After a failed write (a full disk): the file is left to the run's cleanup, and
        the pyarrow writer must not try to finish it again when it is garbage-collected
        (that second error would print over the run's one-line error)."""
        if self.writer is not None:
            self.writer.is_open = False

    def close(self) -> bool:
        """Finish the file; False when no row was written (and so no file exists), unless
        its footer has entries to keep (runner/write/tombstones.py)."""
        self.flush()
        if self.key_hashes:  # rows were written
            hashes = np.concatenate(self.key_hashes)
            self.metadata[KEY_FILTER] = KeyFilter.of(hashes).encode()
            self.key_hashes = []
        if self.writer is None and self.metadata:
            self._open(self.schema.empty_table())
        if self.writer is None or self.stream is None:
            return False
        try:
            if self.metadata:
                self.writer.add_key_value_metadata(self.metadata)
            self.writer.close()  # leaves the stream open: it was handed a stream, not a path
        except BaseException:
            self._abandon()
            raise
        self.stats.add_parquet_strings(self.footer[0])
        self.size = self.stream.tell()
        self.stream.close()  # on an object store, this completes the upload
        return True


# The buffered rows of all the files a task keeps open stay under this many bytes: past it,
# the largest buffers are written out as row groups.
TASK_BUFFER_BYTES = 4 * ROW_GROUP_BYTES


# What names one of a task's open files: (partition path, bucket), or with a part of the
# bucket after it (a file group of an expansion, runner/write/regroup_writer.py).
FileKey = TypeVar("FileKey", tuple[str, int], tuple[str, int, str])


class OpenFiles(Generic[FileKey]):
    """The files a task writes, one per key (partition path, bucket, ...), each opened
    with its first rows; their buffered rows together stay under TASK_BUFFER_BYTES."""

    def __init__(
        self,
        fs: pafs.FileSystem,
        root: str,
        schema: pa.Schema,
        relative_path: Callable[[FileKey], str],
        *,
        key_filters: bool,
    ):
        self.fs, self.root, self.schema = fs, root, schema
        self.key_filters = key_filters  # runner/storage/key_filter.py
        self.relative_path: Callable[[FileKey], str] = relative_path
        self.open: dict[FileKey, tuple[str, BucketFile]] = {}
        self.buffered = 0  # the open files' pending bytes, together

    def write(self, group: FileKey, rows: pa.Table) -> None:
        if group not in self.open:
            rel = self.relative_path(group)
            out = BucketFile(
                self.fs, f"{self.root}/{rel}", self.schema, key_filter=self.key_filters
            )
            self.open[group] = (rel, out)
        out = self.open[group][1]
        before = out.pending_bytes
        out.write(rows)
        self.buffered += out.pending_bytes - before
        while self.buffered > TASK_BUFFER_BYTES:
            largest = max((f for _, f in self.open.values()), key=lambda f: f.pending_bytes)
            self.buffered -= largest.pending_bytes
            largest.flush()

    def close(self, key: FileKey) -> tuple[str, BucketFile]:
        """Close one open file: its path in the table and (closed) writer."""
        rel, out = self.open.pop(key)
        self.buffered -= out.pending_bytes
        out.close()
        return rel, out

    def close_all(self) -> Iterator[tuple[FileKey, str, BucketFile]]:
        """Close every open file, in key order: each one's key, path in the table and
        (closed) writer."""
        for group, (rel, out) in sorted(self.open.items()):
            out.close()  # a file is opened with rows, so it exists
            yield group, rel, out
        self.open, self.buffered = {}, 0
