"""The Spark side of a rehash (multiple_rehash, split): each stored row's new bucket, as bits.

Spark reads the bucket function's inputs from the old files, computes each row's new bucket
with the table's bucket expression, and folds the rows into 64-row words: one row per (file,
new bucket, word), with a bit set for each of the word's rows that goes to that bucket. The
driver gets about one row per 64 records and new bucket (about 2.5 bytes a stored row, in
rounds of whole old buckets past ROUND_ROWS), and hands each writer task the bitmaps of its
files (runner/write/regroup_writer.py RehashJob). Handing the writers one row per record,
put back in file order by a local sort, made Spark's part 1.7 times as long at 5,000,000
rows.

Rows a deletion vector deletes are counted too (no join to drop them), so that a file's
bitmaps cover every row it stores; the writer drops them with the vector, as it reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from runner.actions.expansion_plan import ExpansionPlan
from runner.delta.snapshot import DataFile, Group, TableSnapshot
from runner.delta.spark_read import FILE_NAME, ROW_INDEX, read_stored_rows
from runner.errors import RunnerError
from runner.index.bucket import layout_bucket_column
from runner.keygen import build_key_generator
from runner.spec.model import Target
from runner.storage.meta_columns import BUCKET, PARTITION_PATH
from runner.write.bucket_merge import run_bounds
from runner.write.regroup_writer import BITS, WORD, WORD_ROWS

_BIT = f"shiftleft(1L, CAST(pmod({ROW_INDEX}, {WORD_ROWS}) AS INT))"


# Stored rows whose bitmaps the driver holds at a time: a larger expansion goes in rounds
# of whole old buckets (its bitmaps are about 2.5 bytes a row: 100 MB a round).
ROUND_ROWS = 40_000_000


def bitmap_frame(
    spark: SparkSession,
    snapshot: TableSnapshot,
    target: Target,
    plan: ExpansionPlan,
    files: Sequence[DataFile],
) -> DataFrame:
    """(FILE_NAME, BUCKET, WORD, BITS) of every stored row of `files` (of the plan's)."""
    rows = read_stored_rows(spark, snapshot, files)
    word = F.shiftright(F.col(ROW_INDEX), WORD_ROWS.bit_length() - 1)
    new_bucket = new_bucket_column(rows, target, plan)
    return rows.groupBy(F.col(FILE_NAME), new_bucket.alias(BUCKET), word.alias(WORD)).agg(
        F.bit_or(F.expr(_BIT)).alias(BITS)
    )


def new_bucket_column(rows: DataFrame, target: Target, plan: ExpansionPlan) -> Column:
    """Each stored row's bucket in the plan's new layout (the table's bucket expression)."""
    return layout_bucket_column(
        target.index.hash_fields,
        plan.layout_after,
        F.col(PARTITION_PATH),
        build_key_generator(target.key_generator).strings(rows.schema),
    )


def rounds(files: Sequence[DataFile], most_rows: int | None = None) -> list[list[DataFile]]:
    """The files in rounds of whole old buckets of at most `most_rows` (ROUND_ROWS) stored
    rows (a larger bucket alone)."""
    most_rows = most_rows or ROUND_ROWS
    out: list[list[DataFile]] = [[]]
    held = 0
    for bucket in _by_old_bucket(files).values():
        rows = sum(f.num_records for f in bucket)
        if out[-1] and held + rows > most_rows:
            out.append([])
            held = 0
        out[-1].extend(bucket)
        held += rows
    return out


def task_files(files: Sequence[DataFile], tasks: int) -> list[list[DataFile]]:
    """The files split among at most `tasks` writer tasks by bytes, each old bucket's files
    in one task and one after the other (they write into the same new files)."""
    buckets = _by_old_bucket(files)
    count = max(1, min(tasks, len(buckets)))
    held: list[list[DataFile]] = [[] for _ in range(count)]
    load = [0] * count
    # the largest bucket first, each to the task with the fewest bytes so far
    for group in sorted(buckets, key=lambda g: (-sum(f.size for f in buckets[g]), g)):
        i = load.index(min(load))
        held[i].extend(buckets[group])
        load[i] += sum(f.size for f in buckets[group])
    return [files for files in held if files]


def bitmaps_by_file(
    bitmaps: pa.Table, tasks: Sequence[Sequence[DataFile]]
) -> tuple[tuple[pa.Table, ...], ...]:
    """The bitmaps of each file of each task, in the tasks' file order."""
    names = [f.path.rsplit("/", 1)[-1] for held in tasks for f in held]
    index = pc.index_in(bitmaps.column(FILE_NAME), value_set=pa.array(names)).combine_chunks()
    if index.null_count:
        stray = bitmaps.column(FILE_NAME).filter(pc.is_null(index))[0].as_py()
        raise RunnerError(f"Spark read a file ({stray}) that is not one of this expansion")
    order = pc.sort_indices(index)
    found, rows = index.take(order), bitmaps.select([BUCKET, WORD, BITS])
    per_file = [rows.schema.empty_table()] * len(names)  # a file of no rows has no bitmaps
    for start, end in run_bounds(found):
        # a take, not a slice: a pickled slice carries its whole parent's buffers
        per_file[found[start].as_py()] = rows.take(order.slice(start, end - start))
    out, first = [], 0
    for held in tasks:
        out.append(tuple(per_file[first : first + len(held)]))
        first += len(held)
    return tuple(out)


def _by_old_bucket(files: Sequence[DataFile]) -> dict[Group, list[DataFile]]:
    buckets: dict[Group, list[DataFile]] = {}
    for f in sorted(files, key=lambda f: f.path):
        buckets.setdefault((f.partition_path, f.bucket), []).append(f)
    return buckets
