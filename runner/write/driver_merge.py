"""Small batches merged on the driver: the bucket writers of a Spark write job, run on
driver threads over the batch collected as Arrow.

A Spark write job costs about 0.8 s whatever its size (scheduling, the shuffle by bucket,
the window that picks each key's winner, Python workers starting), while pyarrow rewrites
the few MiB a small batch touches in a few hundredths of that. Here each key's winner is
picked with one pyarrow sort, the touched buckets are dealt to threads (pyarrow's reads,
merges and zstd writes release the GIL), and each thread runs the executor job a Spark task
would run (runner/write/writer.py), with a write token of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runner.delta.snapshot import Group
from runner.storage.meta_columns import RECORD_KEY
from runner.write.bucket_merge import ACTION, SEQ
from runner.write.task import driver_task
from runner.write.writer import ExecutorJob, group_codes, split_groups

_NAN_FIRST = "__runner_nan"  # sort helper: Spark orders NaN above every other number
_GROUP = "__runner_group"  # sort helper: the row's (partition path, bucket) as one integer


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
    """The batch a bucket after another (group_codes order), sorted by record key in each,
    each row marked as runner/pipeline/winners.py's window marks it: `candidate` for a key's
    winner (greatest precombine value, nulls lowest, ties to the later input row),
    `duplicate` for the rest; every row a candidate without `dedupe`."""
    codes = group_codes(rows)
    ordering = rows.append_column(_GROUP, codes)
    keys: list[tuple[str, str, str]] = [
        (_GROUP, "ascending", "at_end"),
        (RECORD_KEY, "ascending", "at_end"),
    ]
    if dedupe and precombine_field and precombine_field in rows.column_names:
        value = rows.column(precombine_field)
        if pa.types.is_floating(value.type):
            nan = pc.fill_null(pc.is_nan(value), False)
            ordering = ordering.append_column(_NAN_FIRST, nan)
            keys.append((_NAN_FIRST, "descending", "at_end"))
        keys.append((precombine_field, "descending", "at_end"))
    keys.append((SEQ, "descending", "at_end"))
    order = pc.sort_indices(ordering, sort_keys=keys)
    ordered = rows.take(order).drop_columns([SEQ])
    first = pa.array(np.ones(ordered.num_rows, dtype=bool))
    if dedupe and ordered.num_rows:
        # the first row of each (bucket, key) run wins (keyed rows have a record key)
        group, key = codes.take(order), ordered.column(RECORD_KEY).combine_chunks()
        changed = pc.or_(pc.not_equal(group[1:], group[:-1]), pc.not_equal(key[1:], key[:-1]))
        first = pa.concat_arrays([pa.array([True]), pc.fill_null(changed, True)])
    action = pc.if_else(first, "candidate", "duplicate")
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
