"""The executor side of a bulk_insert: each input task writes the rows it read, no shuffle.

bulk_insert writes only into empty partitions and keeps every row (without filter_dupes), so
neither stored rows nor another task's rows change what a bucket's file holds: each task
sorts its own rows by (partition path, bucket), as Spark's `partitionBy` writer sorts by its
partition columns, and writes one file per bucket it holds. A bucket so gets up to one base
file per input task, all in one file group (the id is derived from the run's instant, so
tasks agree without talking); the next copy-on-write rewrite of the bucket, or `runner
compact`, folds them into one. The rows that an expectation rejects or that cannot be keyed
are counted in the same pass: the run reads its input once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from runner import faults
from runner.index.naming import data_file_name, derived_file_id
from runner.table.meta import COMMIT_SEQNO, COMMIT_TIME, PARTITION_PATH
from runner.table.parquet_file import BucketFile, conform
from runner.table.snapshot import Group
from runner.table.storage import TableLocation
from runner.table.writer import RESULT_SCHEMA, SeqNo, result_row, split_groups, task_token

# The verdict columns of the rows the job receives (ops/merge.py::bulk_rows names them so):
# a row's fate (null: write it; drop, quarantine, fail) and the rule(s) it broke.
FATE = "__runner_bulk_fate"
RULE = "__runner_bulk_rule"

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


@dataclass(frozen=True)
class BulkJob:
    """mapInArrow over the batch in file layout plus FATE and RULE, each task's rows sorted
    by (partition path, bucket); picklable, so it travels to the executors."""

    table: TableLocation
    instant: str
    file_schema: pa.Schema
    occupied: frozenset[str]  # partition paths of the table that hold data
    fault: str | None = None

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        partition, token = task_token()
        fs, root = self.table.filesystem()
        seqno = SeqNo(self.instant, partition)
        set_aside: Counter[tuple[str, str | None]] = Counter()
        group: Group | None = None
        out: tuple[str, BucketFile] | None = None  # the open file: path in the table, writer
        for batch in batches:
            rows = pa.Table.from_batches([batch])
            fate = rows.column(FATE)
            if fate.null_count < rows.num_rows:  # some rows are dropped, quarantined or fail
                rejected = (
                    rows.filter(pc.is_valid(fate))
                    .group_by([FATE, RULE])
                    .aggregate([(FATE, "count")])
                )
                for r in rejected.to_pylist():
                    set_aside[(r[FATE], r[RULE])] += r[f"{FATE}_count"]
                rows = rows.filter(pc.is_null(fate))
            if self.occupied:
                busy = pc.is_in(rows.column(PARTITION_PATH), pa.array(sorted(self.occupied)))
                if pc.any(busy).as_py():
                    taken = (
                        rows.filter(busy)
                        .group_by(PARTITION_PATH)
                        .aggregate([(PARTITION_PATH, "count")])
                    )
                    for r in taken.to_pylist():
                        set_aside[(OCCUPIED, r[PARTITION_PATH])] += r[f"{PARTITION_PATH}_count"]
                    rows = rows.filter(pc.invert(busy))
            for key, part in split_groups(rows.drop_columns([FATE, RULE])):
                if key != group or out is None:
                    if out is not None and group is not None:
                        yield self._finish(group, *out)
                    rel = self._relative(key, token)
                    group, out = key, (rel, BucketFile(fs, f"{root}/{rel}", self.file_schema))
                part = conform(part, self.file_schema)
                n = part.num_rows
                at = part.schema.get_field_index(COMMIT_TIME)
                instant = pa.repeat(pa.scalar(self.instant, pa.string()), n)
                part = part.set_column(at, COMMIT_TIME, instant)
                seq = part.schema.get_field_index(COMMIT_SEQNO)
                part = part.set_column(seq, COMMIT_SEQNO, seqno.take(n))
                out[1].write(part)
        if out is not None and group is not None:
            yield self._finish(group, *out)
        for (fate_name, rule), n in sorted(set_aside.items(), key=str):
            yield _result(None, fate=fate_name, rule=rule, rows=n)

    def _relative(self, group: Group, token: str) -> str:
        name = data_file_name(bulk_file_id(self.instant, group), token, self.instant)
        return f"{group[0]}/{name}" if group[0] else name

    def _finish(self, group: Group, rel: str, out: BucketFile) -> pa.RecordBatch:
        out.close()  # a group only starts with rows, so the file exists
        faults.maybe_fail("after_bucket_file", self.fault or "")
        n = out.stats.rows
        return _result(
            group, path=rel, size=out.size, num_records=n, stats=out.stats.to_json(),
            changed=True, insert=n, rows=n,
        )  # fmt: skip


def _result(group: Group | None, **values: object) -> pa.RecordBatch:
    row = result_row(group, fate=None, rule=None, rows=0)
    return pa.RecordBatch.from_pylist([{**row, **values}], schema=BULK_RESULT_SCHEMA)
