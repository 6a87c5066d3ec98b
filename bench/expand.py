"""Expansion benchmarks: multiple_rehash beside overwrite and beside a plain pyarrow copy.

The same R-row table (N buckets x 8 partitions) is grown to 2N buckets each way, from a
fresh copy each time. The pyarrow copy reads and rewrites every file of the table with the
same compression and no other work: the floor any rewrite of the table pays.
"""

from __future__ import annotations

import shutil
import statistics
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from bench.write import checksum, delta_dataset, parquet_dataset, spec_file, timed, write_source
from runner.actions.expand import ExpansionRequest, expand_table
from runner.pipeline.run import run_pipeline


def run_expand_benchmarks(
    spark, work: Path, rows: int, repeats: int, buckets: int, warmup: bool = True
) -> list[dict]:
    src = work / "expand_src"
    expected = write_source(src, rows, seed=5)
    pristine = work / "expand_pristine"
    run_pipeline(
        spec_file(work / "expand_load", "bulk_insert", src, pristine, buckets), spark=spark
    )
    table = work / "expand_table"
    spec = spec_file(work / "expand", "upsert", src, table, buckets)

    def fresh() -> None:
        shutil.rmtree(table, ignore_errors=True)
        shutil.copytree(pristine, table)

    times = {}
    for policy in ("multiple_rehash", "overwrite"):
        times[policy] = timed(
            repeats,
            fresh,
            lambda p=policy: expand_table(spec, ExpansionRequest(2 * buckets, p), spark=spark),
            warmup=warmup,
        )
        after = delta_dataset(table)
        assert checksum(after) == expected, policy
        top = pc.max(after.to_table(columns=["_bucket"]).column("_bucket")).as_py()
        assert top >= buckets, policy

    copy_dir = work / "expand_copy"
    files = DeltaTable(str(pristine)).file_uris()

    def copy_files() -> None:
        def one(i_path: tuple[int, str]) -> None:
            i, path = i_path
            pq.write_table(pq.read_table(path), copy_dir / f"{i}.parquet", compression="zstd")

        with ThreadPoolExecutor(max_workers=2) as pool:  # the 2 cores Spark gets
            list(pool.map(one, enumerate(files)))

    times["copy"] = timed(
        repeats,
        lambda: (shutil.rmtree(copy_dir, ignore_errors=True), copy_dir.mkdir()),
        copy_files,
        warmup=warmup,
    )
    assert checksum(parquet_dataset(copy_dir)) == expected
    return [
        {
            "scenario": f"expand {buckets} -> {2 * buckets} buckets, {rows:,} rows x 8 "
            "partitions: multiple_rehash",
            "runner_s": statistics.median(times["multiple_rehash"]),
            "peers": {
                "runner overwrite (reshuffle)": statistics.median(times["overwrite"]),
                "pyarrow copy of the files (floor)": statistics.median(times["copy"]),
            },
        }
    ]
