"""The Spark side of a rehash (multiple_rehash, split): each stored row's new bucket, as bits.

Spark reads the bucket function's inputs from the old files, computes each row's new bucket
with the table's bucket expression, and folds the rows into 64-row words: one row per (file,
new bucket, word), with a bit set for each of the word's rows that goes to that bucket. The
driver gets about one row per 64 records and new bucket, and hands each writer task the
bitmaps of its files (runner/write/regroup_writer.py RehashJob). One row per record, put
back in file order by a local sort, cost twice the time at 5,000,000 rows.

Rows a deletion vector deletes are counted too (no join to drop them), so that a file's
bitmaps cover every row it stores; the writer drops them with the vector, as it reads.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from runner.delta.snapshot import DataFile, Group, TableSnapshot
from runner.delta.spark_read import FILE_NAME, ROW_INDEX, read_stored_rows
from runner.errors import RunnerError
from runner.index.bucket import layout_bucket_column
from runner.keygen import build_key_generator
from runner.services.expansion_plan import ExpansionPlan
from runner.spec.model import Target
from runner.storage.meta_columns import BUCKET, PARTITION_PATH
from runner.write.regroup_writer import BITS, FILE, WORD, WORD_ROWS

_BIT = f"shiftleft(1L, CAST(pmod({ROW_INDEX}, {WORD_ROWS}) AS INT))"


def bitmap_frame(
    spark: SparkSession, snapshot: TableSnapshot, target: Target, plan: ExpansionPlan
) -> DataFrame:
    """(FILE_NAME, BUCKET, WORD, BITS) of every stored row of the plan's files."""
    rows = read_stored_rows(spark, snapshot, plan.files)
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


def task_files(files: list[DataFile], tasks: int) -> list[list[DataFile]]:
    """The files split among at most `tasks` writer tasks by bytes, each old bucket's files
    in one task and one after the other (they write into the same new files)."""
    buckets: dict[Group, list[DataFile]] = {}
    for f in sorted(files, key=lambda f: f.path):
        buckets.setdefault((f.partition_path, f.bucket), []).append(f)
    count = max(1, min(tasks, len(buckets)))
    held: list[list[DataFile]] = [[] for _ in range(count)]
    load = [0] * count
    # the largest bucket first, each to the task with the fewest bytes so far
    for group in sorted(buckets, key=lambda g: (-sum(f.size for f in buckets[g]), g)):
        i = load.index(min(load))
        held[i].extend(buckets[group])
        load[i] += sum(f.size for f in buckets[group])
    return [files for files in held if files]


def bitmaps_by_task(bitmaps: pa.Table, tasks: list[list[DataFile]]) -> tuple[pa.Table, ...]:
    """Each task's bitmaps, FILE numbering the file among the task's, sorted by FILE."""
    names = [f.path.rsplit("/", 1)[-1] for held in tasks for f in held]
    index = pc.index_in(bitmaps.column(FILE_NAME), value_set=pa.array(names))
    if index.null_count:
        stray = bitmaps.column(FILE_NAME).filter(pc.is_null(index))[0].as_py()
        raise RunnerError(f"Spark read a file ({stray}) that is not one of this expansion")
    sizes = np.array([len(held) for held in tasks])
    firsts = np.concatenate([[0], np.cumsum(sizes)])
    global_index = index.to_numpy(zero_copy_only=False)
    task_of = np.searchsorted(firsts, global_index, side="right") - 1
    table = pa.table(
        {
            FILE: pa.array(global_index - firsts[task_of], pa.int32()),
            BUCKET: bitmaps.column(BUCKET),
            WORD: bitmaps.column(WORD),
            BITS: bitmaps.column(BITS),
        }
    )
    out = []
    for task in range(len(tasks)):
        mine = table.filter(pa.array(task_of == task))
        out.append(mine.take(pc.sort_indices(mine, [(FILE, "ascending")])))
    return tuple(out)
