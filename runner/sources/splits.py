"""How a bulk load's input files are split into Spark tasks: as many as a multiple of the
cores, each about the same bytes.

Spark packs files into tasks of at most `spark.sql.files.maxPartitionBytes` (each file
counted with `openCostInBytes` more), largest first, and starts a new task when the next file
does not fit. Twenty files of 13 MB on 2 cores so make tasks of 7, 7 and 6 files: the third
runs alone while a core idles, and a bulk load's tasks (keys in Spark, rows written in
Python) are all its work. Here the same packing is given a task size that comes out at a
multiple of the cores (docs/performance.md, "bulk_insert against Spark's writer").
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession

from runner.storage.location import local_path

MAX_PARTITION_BYTES = "spark.sql.files.maxPartitionBytes"
MIN_PARTITION_NUM = "spark.sql.files.minPartitionNum"


def balanced_split_settings(spark: SparkSession, frame: DataFrame) -> dict[str, str]:
    """Spark settings under which `frame`'s input files make equal tasks, a multiple of the
    cores in number; none when the spec chose the task size itself (either setting), when
    the files are not local (an object store's sizes would cost a listing), when one is
    gone, or when it reads none. Every listed file counts, also those a filter on partition
    columns leaves unread (the tasks then come out smaller, never fewer than Spark's)."""
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
        int(conf.filesMaxPartitionBytes()),
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
