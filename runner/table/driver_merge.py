"""Small batches merged on the driver: the bucket writers of a Spark write job, run on
driver threads over the batch collected as Arrow.

A Spark write job costs about 0.8 s whatever its size (scheduling, the shuffle by bucket,
the window that picks each key's winner, Python workers starting), while pyarrow rewrites
the few MiB a small batch touches in a few hundredths of that. Here each key's winner is
picked with one pyarrow sort, the touched buckets are dealt to threads (pyarrow's reads,
merges and zstd writes release the GIL), and each thread runs the executor job a Spark task
would run (runner/table/writer.py), with a write token of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runner.table.bucket_merge import SEQ, run_bounds
from runner.table.meta import BUCKET, PARTITION_PATH, RECORD_KEY
from runner.table.snapshot import Group
from runner.table.writer import ACTION, ExecutorJob, driver_task, split_groups

_NAN_FIRST = "__runner_nan"  # sort helper: Spark orders NaN above every other number


def orderable(type_: pa.DataType) -> bool:
    """Whether pyarrow orders values of this type as Spark does (by value; strings and
    binaries by their bytes), so that the driver picks the winner Spark's window would."""
    return bool(
        pa.types.is_integer(type_)
        or pa.types.is_floating(type_)
        or pa.types.is_decimal(type_)
        or pa.types.is_string(type_)
        or pa.types.is_large_string(type_)
        or pa.types.is_binary(type_)
        or pa.types.is_large_binary(type_)
        or pa.types.is_date(type_)
        or pa.types.is_timestamp(type_)
        or pa.types.is_boolean(type_)
    )


def mark_candidates(rows: pa.Table, precombine_field: str | None, dedupe: bool) -> pa.Table:
    """The batch sorted by (partition path, bucket, record key), each row marked as
    runner/ops/merge.py's window marks it: `candidate` for a key's winner (greatest
    precombine value, nulls lowest, ties to the later input row), `duplicate` for the rest;
    every row a candidate without `dedupe`."""
    keys: list[tuple[str, str, str]] = [
        (PARTITION_PATH, "ascending", "at_end"),
        (BUCKET, "ascending", "at_end"),
        (RECORD_KEY, "ascending", "at_end"),
    ]
    ordering = rows
    if dedupe and precombine_field and precombine_field in rows.column_names:
        value = rows.column(precombine_field)
        if pa.types.is_floating(value.type):
            nan = pc.fill_null(pc.is_nan(value), False)
            ordering = ordering.append_column(_NAN_FIRST, nan)
            keys.append((_NAN_FIRST, "descending", "at_end"))
        keys.append((precombine_field, "descending", "at_end"))
    keys.append((SEQ, "descending", "at_end"))
    ordered = rows.take(pc.sort_indices(ordering, sort_keys=keys)).drop_columns([SEQ])
    first = np.ones(ordered.num_rows, dtype=bool)
    if dedupe and ordered.num_rows:
        # the first row of each (partition path, bucket, key) run wins
        bucket = pc.cast(ordered.column(BUCKET), pa.string())
        keys = pc.binary_join_element_wise(
            ordered.column(PARTITION_PATH), bucket, ordered.column(RECORD_KEY), "\x00"
        )
        first[:] = False
        first[[start for start, _ in run_bounds(keys)]] = True
    action = pc.if_else(pa.array(first), "candidate", "duplicate")
    return ordered.append_column(ACTION, action)


def write_on_driver(
    job: ExecutorJob,
    rows: pa.Table,
    threads: int,
    round_: int,
    weight: Callable[[Group], int],
) -> list[dict[str, object]]:
    """Run `job` over `rows` (from mark_candidates) on up to `threads` driver threads, the
    buckets dealt heaviest first to the least loaded thread; the job's result rows.

    Thread i writes with token i-<round_>-0: a re-merge in the same run (round 1, 2, ...)
    never names a file as an earlier round did."""
    groups = list(split_groups(rows))
    if not groups:
        return []
    workers: list[list[pa.Table]] = [[] for _ in range(max(1, min(threads, len(groups))))]
    load = [0] * len(workers)
    for group, part in sorted(groups, key=lambda g: -(weight(g[0]) + g[1].num_rows)):
        lightest = load.index(min(load))
        workers[lightest].append(part)
        load[lightest] += weight(group) + part.num_rows

    def run(index: int) -> list[dict[str, object]]:
        with driver_task(index, f"{index}-{round_}-0"):
            batches = (batch for part in workers[index] for batch in part.to_batches())
            return [row for result in job(batches) for row in result.to_pylist()]

    with ThreadPoolExecutor(max_workers=len(workers), thread_name_prefix="driver-merge") as pool:
        done = [pool.submit(run, i) for i in range(len(workers))]
        return [row for future in done for row in future.result()]
