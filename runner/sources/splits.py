"""How a bulk load's input files are split into Spark tasks: as many as a multiple of the
cores, each about the same bytes.

Spark packs files into tasks of at most `spark.sql.files.maxPartitionBytes` (each file
counted with `openCostInBytes` more), largest first, and starts a new task when the next file
does not fit. Twenty files of 13 MB on 2 cores so make tasks of 7, 7 and 6 files: the third
runs alone while a core idles, and a bulk load's tasks (keys in Spark, rows written in
Python) are all its work. Here the same packing is given a task size that comes out at a
multiple of the cores (docs/performance.md, "bulk_insert against Spark's writer").

A task may hold more than `maxPartitionBytes`, up to BULK_TASK_BYTES: every task of a load
writes a base file into each bucket its rows touch, so tasks beyond the cores' one wave add
files, not speed. At TPC-H's scale factor 10 (2.1 GB, 160 buckets, 2 cores) 128 MiB tasks
left 20 files of 0.7 MB in every bucket; a delete then gave 3,200 files a deletion vector,
which delta-rs 1.6.6 could not read (docs/performance.md, "TPC-H refresh sets").
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession

from runner.storage.location import local_path

MAX_PARTITION_BYTES = "spark.sql.files.maxPartitionBytes"
MIN_PARTITION_NUM = "spark.sql.files.minPartitionNum"
# The most input bytes a bulk load's task reads when it streams its rows to the writers
# (their buffers bounded by parquet_file.TASK_BUFFER_BYTES): a larger task costs no memory,
# only the time a failed task takes to run again. Rows that Spark sorts first keep Spark's
# task size (a larger sort spills).
BULK_TASK_BYTES = 4 * 2**30


def balanced_split_settings(
    spark: SparkSession, frame: DataFrame, *, streamed: bool
) -> dict[str, str]:
    """Spark settings under which `frame`'s input files make equal tasks, a multiple of the
    cores in number, each at most Spark's task size, or BULK_TASK_BYTES when the tasks
    stream their rows to the writers (`streamed`: not through a sort in Spark); none when
    the spec chose the task size itself (either setting), when the files are not local (an
    object store's sizes would cost a listing), when one is gone, or when it reads none.
    Every listed file counts, also those a filter on partition columns leaves unread (the
    tasks then come out smaller, never fewer than Spark's)."""
    if any(
        spark.conf.get(key, None) is not None for key in (MAX_PARTITION_BYTES, MIN_PARTITION_NUM)
    ):
        return {}
    paths = [local_path(f) for f in frame.inputFiles()]
    if not paths or any(p is None for p in paths):
        return {}
    try:
        sizes = [os.path.getsize(p) for p in paths if p is not None]
    except OSError:  # moved since the listing: the read says so, or skips it as told
        return {}
    conf = spark._jsparkSession.sessionState().conf()  # the byte sizes, parsed by Spark
    return split_settings(
        sizes,
        spark.sparkContext.defaultParallelism,
        max(int(conf.filesMaxPartitionBytes()), BULK_TASK_BYTES if streamed else 0),
        int(conf.filesOpenCostInBytes()),
    )


def split_settings(
    sizes: Sequence[int], cores: int, max_task_bytes: int, open_cost: int
) -> dict[str, str]:
    """The task size that packs files of `sizes` bytes into a multiple of `cores` tasks of
    at most about `max_task_bytes` file bytes each.

    Spark adds a file to a task while the task's bytes so far (each file counted with the
    open cost) plus the file's own size stay within the task size. For equal files of s
    bytes, n to a task, that holds for the n-th file and not the next for any task size in
    [share - open cost, share + s), share being a task's counted bytes: the middle of that
    range keeps unequal files within half a file of their share. A file larger than a
    share is cut into pieces of the task size, so the task size is then the share itself.
    minPartitionNum 1 keeps Spark from lowering the size to total bytes / cores.
    """
    if not sizes or cores < 1:
        return {}
    waves = max(1, math.ceil(sum(sizes) / (cores * max_task_bytes)))
    tasks = waves * cores
    share = math.ceil((sum(sizes) + open_cost * len(sizes)) / tasks)  # as Spark counts
    largest = max(sizes)
    size = share if largest >= share else share + (largest - open_cost) // 2
    return {MAX_PARTITION_BYTES: str(max(1, size)), MIN_PARTITION_NUM: "1"}
