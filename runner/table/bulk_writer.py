"""The executor side of a bulk_insert: each input task writes the rows it read, no shuffle.

bulk_insert writes only into empty partitions and keeps every row (without filter_dupes), so
neither stored rows nor another task's rows change what a bucket's file holds: each task
sorts its own rows by (partition path, bucket), as Spark's `partitionBy` writer sorts by its
partition columns, and writes one file per bucket it holds. A bucket so gets up to one base
file per input task, all in one file group (the id is derived from the run's instant, so
tasks agree without talking); the next copy-on-write rewrite of the bucket, or `runner
compact`, folds them into one. The rows that an expectation rejects or that cannot be keyed
are counted in the same pass: the run reads its input once.

When the batch is a parquet source as it is, the rows themselves do not cross the Arrow
hand-off (runner/sources/file_rows.py): the job gets each row's key columns, verdict, file
and row index, in file order, reads the rows from the file, sorts each chunk of them by
bucket and writes into files that stay open to the task's end.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from runner import faults
from runner.index.naming import data_file_name, derived_file_id
from runner.table.meta import BUCKET, COMMIT_SEQNO, COMMIT_TIME, PARTITION_PATH, RECORD_KEY
from runner.table.parquet_file import ROW_GROUP_BYTES, BucketFile, conform
from runner.table.parquet_rows import ParquetRows
from runner.table.snapshot import Group
from runner.table.storage import TableLocation
from runner.table.writer import RESULT_SCHEMA, SeqNo, result_row, split_groups, task_token

# The columns of the rows the job receives besides the key columns (ops/merge.py names them
# so): a row's verdict, null to write it, else its fate (drop, quarantine, fail) and the
# rule(s) it broke joined by VERDICT_SEPARATOR (one column: two mostly-null string columns
# cost seconds of the hand-off at 20M rows); and, when the job reads the rows from the
# source files itself, each row's file and index in it.
VERDICT = "__runner_bulk_verdict"
VERDICT_SEPARATOR = "\x1f"
SOURCE_FILE = "__runner_source_file"
SOURCE_ROW = "__runner_source_row"

# The fate under which the job counts rows of a partition that already holds data (`rule`
# names the partition): bulk_insert refuses them, and writes none of them.
OCCUPIED = "occupied"

# The write job's result rows: one per file written (fate null, rows = its records), and
# one per (fate, rule) of the rows it set aside (rows = how many).
BULK_RESULT_SCHEMA = pa.schema(
    [
        *RESULT_SCHEMA,
        pa.field("fate", pa.string()),
        pa.field("rule", pa.string()),
        pa.field("rows", pa.int64()),
    ]
)


def bulk_file_id(instant: str, group: Group) -> str:
    """The file group id of a bucket a bulk_insert creates, alike in every task."""
    return derived_file_id(group[1], instant, group[0])


# Rows of the source files read at a time when the job reads them itself (a row group more
# at most): what a task holds besides its files' buffered rows.
SOURCE_CHUNK_ROWS = 1_000_000

# The buffered rows of all the files a task has open stay under this many bytes: past it,
# the largest buffers are written out as row groups.
TASK_BUFFER_BYTES = 4 * ROW_GROUP_BYTES


@dataclass(frozen=True)
class BulkJob:
    """mapInArrow over the batch's key columns plus VERDICT; picklable, so it travels to the
    executors. The rows come either in file layout, each task's sorted by (partition path,
    bucket), or as SOURCE_FILE and SOURCE_ROW, in file order, for `source` to read."""

    table: TableLocation
    instant: str
    file_schema: pa.Schema
    occupied: frozenset[str]  # partition paths of the table that hold data
    fault: str | None = None
    source: ParquetRows | None = None

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        partition, token = task_token()
        files = _TaskFiles(self, token, closes_passed_groups=self.source is None)
        seqno = SeqNo(self.instant, partition)
        set_aside: Counter[tuple[str, str | None]] = Counter()
        waiting: list[pa.Table] = []  # key rows whose source rows are still to be read
        for batch in batches:
            rows = self._kept(pa.Table.from_batches([batch]), set_aside)
            if self.source is None:
                for group, part in split_groups(rows.drop_columns([VERDICT])):
                    yield from files.write(group, self._with_commit_columns(part, seqno))
                continue
            waiting.append(rows)
            if sum(t.num_rows for t in waiting) >= SOURCE_CHUNK_ROWS:
                yield from self._write_from_source(pa.concat_tables(waiting), files, seqno)
                waiting = []
        if waiting:
            yield from self._write_from_source(pa.concat_tables(waiting), files, seqno)
        yield from files.close_all()
        for (fate_name, rule), n in sorted(set_aside.items(), key=str):
            yield _result(None, fate=fate_name, rule=rule, rows=n)

    def _kept(self, rows: pa.Table, set_aside: Counter[tuple[str, str | None]]) -> pa.Table:
        """The rows to write; the others are counted by fate and rule."""
        verdict = rows.column(VERDICT)
        if verdict.null_count < rows.num_rows:  # some rows are dropped, quarantined or fail
            counts = pc.value_counts(verdict.filter(pc.is_valid(verdict)).combine_chunks())
            for r in counts.to_pylist():
                fate, _, rule = r["values"].partition(VERDICT_SEPARATOR)
                set_aside[(fate, rule or None)] += r["counts"]
            rows = rows.filter(pc.is_null(verdict))
        if self.occupied:
            busy = pc.is_in(rows.column(PARTITION_PATH), pa.array(sorted(self.occupied)))
            if pc.any(busy).as_py():
                taken = pc.value_counts(rows.column(PARTITION_PATH).filter(busy).combine_chunks())
                for r in taken.to_pylist():
                    set_aside[(OCCUPIED, r["values"])] += r["counts"]
                rows = rows.filter(pc.invert(busy))
        return rows

    def _write_from_source(
        self, keys: pa.Table, files: _TaskFiles, seqno: SeqNo
    ) -> Iterator[pa.RecordBatch]:
        """Read the rows of `keys` from their source files, then write them by bucket."""
        assert self.source is not None
        for uri, run in _runs(keys, SOURCE_FILE):
            data = self.source.take(uri, run.column(SOURCE_ROW).combine_chunks())
            for name in (PARTITION_PATH, RECORD_KEY, BUCKET):
                data = data.append_column(name, run.column(name))
            order = pc.sort_indices(data, [(PARTITION_PATH, "ascending"), (BUCKET, "ascending")])
            for group, part in split_groups(data.take(order)):
                yield from files.write(group, self._with_commit_columns(part, seqno))

    def _with_commit_columns(self, part: pa.Table, seqno: SeqNo) -> pa.Table:
        """The rows in file layout, with this commit's instant and sequence numbers (built
        here: constants need not cross the Arrow hand-off)."""
        part = conform(part, self.file_schema)
        n = part.num_rows
        at = part.schema.get_field_index(COMMIT_TIME)
        part = part.set_column(at, COMMIT_TIME, pa.repeat(pa.scalar(self.instant), n))
        seq = part.schema.get_field_index(COMMIT_SEQNO)
        return part.set_column(seq, COMMIT_SEQNO, seqno.take(n))

    def relative_path(self, group: Group, token: str) -> str:
        name = data_file_name(bulk_file_id(self.instant, group), token, self.instant)
        return f"{group[0]}/{name}" if group[0] else name

    def finish(self, group: Group, rel: str, out: BucketFile) -> pa.RecordBatch:
        out.close()  # a file is opened with rows, so it exists
        faults.maybe_fail("after_bucket_file", self.fault or "")
        n = out.stats.rows
        return _result(
            group, path=rel, size=out.size, num_records=n, stats=out.stats.to_json(),
            changed=True, insert=n, rows=n,
        )  # fmt: skip


class _TaskFiles:
    """The files one task writes, one per (partition path, bucket) it meets. Sorted rows
    close each file when the next group starts; otherwise all stay open to the task's end,
    and their buffered rows together stay under TASK_BUFFER_BYTES."""

    def __init__(self, job: BulkJob, token: str, closes_passed_groups: bool):
        self.job, self.token = job, token
        self.fs, self.root = job.table.filesystem()
        self.closes_passed_groups = closes_passed_groups
        self.open: dict[Group, tuple[str, BucketFile]] = {}

    def write(self, group: Group, rows: pa.Table) -> Iterator[pa.RecordBatch]:
        if group not in self.open:
            if self.closes_passed_groups:
                yield from self.close_all()
            rel = self.job.relative_path(group, self.token)
            self.open[group] = (
                rel,
                BucketFile(self.fs, f"{self.root}/{rel}", self.job.file_schema),
            )
        self.open[group][1].write(rows)
        buffered = {g: f.pending_bytes for g, (_, f) in self.open.items()}
        while sum(buffered.values()) > TASK_BUFFER_BYTES:
            largest = max(buffered, key=buffered.__getitem__)
            self.open[largest][1].flush()
            buffered[largest] = 0

    def close_all(self) -> Iterator[pa.RecordBatch]:
        for group, (rel, out) in self.open.items():
            yield self.job.finish(group, rel, out)
        self.open = {}


def _runs(table: pa.Table, column: str) -> Iterator[tuple[str, pa.Table]]:
    """Contiguous runs of equal values of a string column."""
    ends = pc.run_end_encode(table.column(column).combine_chunks()).run_ends.to_pylist()
    start = 0
    for end in ends:
        yield table.column(column)[start].as_py(), table.slice(start, end - start)
        start = end


def _result(group: Group | None, **values: object) -> pa.RecordBatch:
    row = result_row(group, fate=None, rule=None, rows=0)
    return pa.RecordBatch.from_pylist([{**row, **values}], schema=BULK_RESULT_SCHEMA)
