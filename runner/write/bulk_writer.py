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
and place (bucket and row index in one number), in file order, reads the rows from the file,
sorts each chunk of them by bucket and writes into files that stay open to the task's end.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from runner import faults
from runner.delta.snapshot import Group
from runner.index.naming import data_file_path, derived_file_id
from runner.storage.location import TableLocation
from runner.storage.meta_columns import (
    BUCKET,
    COMMIT_SEQNO,
    COMMIT_TIME,
    PARTITION_PATH,
    RECORD_KEY,
)
from runner.storage.parquet_file import OpenFiles, conform
from runner.storage.parquet_rows import ParquetRows
from runner.write.bucket_merge import run_bounds
from runner.write.task import SeqNo, task_token
from runner.write.writer import RESULT_SCHEMA, group_order, result_row, split_groups

# The columns of the rows the job receives besides the key columns (ops/merge.py names them
# so): a row's verdict, null to write it, else its fate (drop, quarantine, fail) and the
# rule(s) it broke joined by VERDICT_SEPARATOR (one column: two mostly-null string columns
# cost seconds of the hand-off at 20M rows); and, when the job reads the rows from the
# source files itself, each row's file and its place: bucket * 2**PLACE_BITS + row index in
# the file. Every column costs the hand-off per row (the bucket as a column of its own made
# the key stream 16 % slower at 5M rows), so the two numbers travel as one.
VERDICT = "__runner_bulk_verdict"
VERDICT_SEPARATOR = "\x1f"
SOURCE_FILE = "__runner_source_file"
SOURCE_PLACE = "__runner_source_place"
SOURCE_ROW = "__runner_source_row"
PLACE_BITS = 36  # row indexes up to 68.7 billion rows a file
# bucket ids below this fit the rest of a signed 64-bit place (a table's bucket count is at
# most 99,999,999; a table past this after expansions gets its rows from Spark)
PLACE_BUCKETS = 1 << (63 - PLACE_BITS)

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
# at most): what a task holds besides its files' buffered rows. A million made the Python
# side of a lineitem load a quarter slower (the system time of fresh allocations: 0.9-2.4 s
# against 0.2-0.3 s for 3M rows); 250,000 and 500,000 measured alike.
SOURCE_CHUNK_ROWS = 250_000


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
    key_filters: bool = False  # the files carry them (runner/storage/key_filter.py)

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        partition, token = task_token()
        fs, root = self.table.filesystem()
        files: OpenFiles[Group] = OpenFiles(
            fs,
            root,
            self.file_schema,
            lambda g: self._relative(g, token),
            key_filters=self.key_filters,
        )
        seqno = SeqNo(self.instant, partition)
        set_aside: Counter[tuple[str, str | None]] = Counter()
        waiting: list[pa.Table] = []  # key rows whose source rows are still to be read
        for batch in batches:
            rows = self._kept(pa.Table.from_batches([batch]), set_aside)
            if self.source is None:  # sorted rows: a group's file is done when the next starts
                for group, part in split_groups(rows.drop_columns([VERDICT])):
                    if group not in files.open:
                        yield from self._finish(files)
                    files.write(group, self._with_commit_columns(part, seqno))
                continue
            waiting.append(rows)
            if sum(t.num_rows for t in waiting) >= SOURCE_CHUNK_ROWS:
                self._write_from_source(pa.concat_tables(waiting), files, seqno)
                waiting = []
        if waiting:
            self._write_from_source(pa.concat_tables(waiting), files, seqno)
        yield from self._finish(files)
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

    def _write_from_source(self, keys: pa.Table, files: OpenFiles[Group], seqno: SeqNo) -> None:
        """Read the rows of `keys` from their source files, then write them by bucket."""
        assert self.source is not None
        paths = keys.column(SOURCE_FILE)
        for start, end in run_bounds(paths):
            run = unpack_places(keys.slice(start, end - start))
            order, codes = group_order(run)
            run = run.take(order)  # bucket by bucket, and the rows are read in that order
            data = self.source.take(paths[start].as_py(), run.column(SOURCE_ROW).combine_chunks())
            for name in (PARTITION_PATH, RECORD_KEY, BUCKET):
                data = data.append_column(name, run.column(name))
            # in file layout once a run, not once a bucket: with 160 buckets a bucket's part
            # of a run is ~1,500 rows, and the calls per part cost a load ~7 % of its time
            data = self._with_commit_columns(data, seqno)
            for group, part in split_groups(data, codes=codes):
                files.write(group, part)

    def _with_commit_columns(self, part: pa.Table, seqno: SeqNo) -> pa.Table:
        """The rows in file layout, with this commit's instant and sequence numbers (built
        here: constants need not cross the Arrow hand-off)."""
        part = conform(part, self.file_schema)
        n = part.num_rows
        at = part.schema.get_field_index(COMMIT_TIME)
        part = part.set_column(at, COMMIT_TIME, pa.repeat(pa.scalar(self.instant), n))
        seq = part.schema.get_field_index(COMMIT_SEQNO)
        return part.set_column(seq, COMMIT_SEQNO, seqno.take(n))

    def _relative(self, group: Group, token: str) -> str:
        return data_file_path(group[0], bulk_file_id(self.instant, group), token, self.instant)

    def _finish(self, files: OpenFiles[Group]) -> Iterator[pa.RecordBatch]:
        """Close the open files; a result row each."""
        for group, rel, out in files.close_all():
            faults.maybe_fail("after_bucket_file", self.fault or "")
            n = out.stats.rows
            yield _result(
                group, path=rel, size=out.size, num_records=n, stats=out.stats.to_json(),
                changed=True, insert=n, rows=n,
            )  # fmt: skip


def places_overflow(largest_modulus: int) -> str | None:
    """Why a row's place cannot hold the table's bucket ids (so Spark sends the rows), or
    None."""
    if largest_modulus <= PLACE_BUCKETS:
        return None
    return f"bucket ids up to {largest_modulus - 1:,}, past the {PLACE_BUCKETS - 1:,} a place holds"


def unpack_places(keys: pa.Table) -> pa.Table:
    """SOURCE_ROW, PARTITION_PATH, RECORD_KEY and BUCKET of key rows that carry SOURCE_PLACE."""
    place = keys.column(SOURCE_PLACE)
    row = pc.bit_wise_and(place, pa.scalar((1 << PLACE_BITS) - 1, pa.int64()))
    bucket = pc.cast(pc.shift_right(place, pa.scalar(PLACE_BITS, pa.int64())), pa.int32())
    return pa.table(
        {
            SOURCE_ROW: row,
            PARTITION_PATH: keys.column(PARTITION_PATH),
            RECORD_KEY: keys.column(RECORD_KEY),
            BUCKET: bucket,
        }
    )


def _result(group: Group | None, **values: object) -> pa.RecordBatch:
    row = result_row(group, fate=None, rule=None, rows=0)
    return pa.RecordBatch.from_pylist([{**row, **values}], schema=BULK_RESULT_SCHEMA)
