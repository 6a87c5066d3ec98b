"""Write-path benchmarks: the runner beside the peers a user would compare it with.

    python -m bench write [--rows 200000] [--repeats 3] [--buckets 16]

Scenarios, each checked (row count and checksums equal across systems) before it is timed:
- bulk_insert of R rows vs Spark's own `partitionBy(...).parquet(...)` of the same rows;
- upsert of a 1 % batch into an R-row table vs delta-rs `DeltaTable.merge` and vs a naive
  Spark rewrite (anti-join, union, overwrite), with the bytes each one rewrites.
"""

from __future__ import annotations

import random
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml
from deltalake import DeltaTable, write_deltalake

from runner.commands.run import run_pipeline
from runner.spec import load_spec

CITIES = ["ams", "sf", "nyc", "sp", "tokyo", "lagos", "paris", "delhi"]


def make_rows(n: int, seed: int, ids: list[int] | None = None, ts: int = 1) -> pa.Table:
    rng = random.Random(seed)
    ids = ids if ids is not None else list(range(n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "city": [CITIES[i % len(CITIES)] for i in ids],
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "amount": [round(rng.uniform(0, 500), 2) for _ in ids],
            "note": [f"note-{rng.randrange(10**6):06d}" for _ in ids],
        }
    )


def checksum(table: pa.Table) -> tuple[int, int, float]:
    return (
        table.num_rows,
        pc.sum(table["id"]).as_py(),
        round(pc.sum(table["amount"]).as_py(), 2),
    )


def spec_file(work: Path, name: str, operation: str, source: Path, table: Path, buckets: int):
    spec = {
        "name": name,
        "sources": [{"name": "src", "format": "parquet", "path": str(source)}],
        "target": {
            "path": str(table),
            "operation": operation,
            "record_key": "id",
            "precombine_field": "ts",
            "key_generator": {"partition_fields": "city"},
            "index": {"buckets": buckets},
        },
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return load_spec(path)


def timed(repeats: int, prepare: Callable[[], None], run: Callable[[], object]) -> list[float]:
    """Seconds of each of `repeats` runs, after one untimed warm-up run (JIT, caches)."""
    prepare()
    run()
    times = []
    for _ in range(repeats):
        prepare()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*.parquet"))


FRACTIONS = (0.001, 0.01, 0.1)


def run_write_benchmarks(
    spark, work: Path, rows: int, repeats: int, buckets: int, fractions=FRACTIONS
) -> list[dict]:
    results = []
    base_src = work / "base_src"
    base_src.mkdir(parents=True)
    base = make_rows(rows, seed=1)
    pq.write_table(base, base_src / "part-0.parquet")
    expected = checksum(base)

    # 1. bulk_insert vs Spark partitionBy(...).parquet
    runner_table = work / "bulk_runner"
    spec = spec_file(work, "bulk", "bulk_insert", base_src, runner_table, buckets)
    t_runner = timed(
        repeats,
        lambda: shutil.rmtree(runner_table, ignore_errors=True),
        lambda: run_pipeline(spec, spark=spark),
    )
    assert checksum(DeltaTable(str(runner_table)).to_pyarrow_table()) == expected
    plain = work / "bulk_spark"

    def spark_write() -> None:
        spark.read.parquet(str(base_src)).write.mode("overwrite").partitionBy("city").parquet(
            str(plain)
        )

    t_spark = timed(repeats, lambda: None, spark_write)
    assert checksum(pq.read_table(plain)) == expected
    results.append(
        {
            "scenario": f"bulk_insert {rows:,} rows, {buckets} buckets x {len(CITIES)} partitions",
            "runner_s": statistics.median(t_runner),
            "peers": {"spark partitionBy().parquet": statistics.median(t_spark)},
        }
    )

    # 2. upserts of batches of each fraction of the table (updates, plus a tenth as many new
    #    keys): spread over every partition, and concentrated in one partition, the case a
    #    bucket index is made for
    delta_base = work / "delta_base"
    write_deltalake(str(delta_base), base, partition_by=["city"])
    rng = random.Random(2)
    ams = range(0, rows, len(CITIES))  # every id here is city "ams"
    for fraction in fractions:
        n = max(1, int(rows * fraction))
        spread = rng.sample(range(rows), n)
        one_partition = rng.sample(ams, min(n, len(ams)))
        for label, ids in (
            ("spread over all partitions", spread),
            ("in one partition", one_partition),
        ):
            new_keys = [rows + i * len(CITIES) for i in range(len(ids) // 10)]  # also "ams"
            results.append(
                _upsert(
                    spark,
                    work,
                    runner_table,
                    delta_base,
                    base_src,
                    base,
                    ids + new_keys,
                    f"upsert {len(ids) + len(new_keys):,} rows ({fraction:.1%}) {label} "
                    f"into {rows:,}",
                    repeats,
                    buckets,
                )
            )
    return results


def _upsert(spark, work, runner_table, delta_base, base_src, base, ids, label, repeats, buckets):
    batch = make_rows(len(ids), seed=3, ids=ids, ts=2)
    batch_src = work / "batch_src"
    shutil.rmtree(batch_src, ignore_errors=True)
    batch_src.mkdir()
    pq.write_table(batch, batch_src / "part-0.parquet")
    merged = {r["id"]: r for r in base.to_pylist()}
    merged.update({r["id"]: r for r in batch.to_pylist()})
    expected_after = checksum(pa.Table.from_pylist(list(merged.values()), schema=base.schema))
    written: dict[str, int] = {}
    replaced: dict[str, int] = {}  # bytes of stored files the upsert replaced
    touched: dict[str, int] = {}

    # the runner: the bulk-loaded table, copied fresh for every repeat
    upsert_spec = spec_file(work, "upsert", "upsert", batch_src, work / "upsert_runner", buckets)

    def runner_upsert() -> None:
        before = _live_files(DeltaTable(str(work / "upsert_runner")))
        summary = run_pipeline(upsert_spec, spark=spark)
        after = _live_files(DeltaTable(str(work / "upsert_runner")))
        written["runner"] = summary.bytes_written
        replaced["runner"] = sum(size for path, size in before.items() if path not in after)
        touched["runner buckets"] = summary.buckets_touched
        touched["runner buckets in the table"] = len(before)

    t_upsert = timed(
        repeats, lambda: _fresh_copy(runner_table, work / "upsert_runner"), runner_upsert
    )
    assert checksum(DeltaTable(str(work / "upsert_runner")).to_pyarrow_table()) == expected_after

    # delta-rs MERGE on the same rows, partitioned by city
    def delta_merge() -> None:
        table = DeltaTable(str(work / "delta_merge"))
        before = _live_files(table)
        (
            table.merge(
                batch,
                predicate="t.id = s.id AND t.city = s.city",
                source_alias="s",
                target_alias="t",
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        table.update_incremental()
        after = _live_files(table)
        written["delta-rs merge"] = sum(size for path, size in after.items() if path not in before)
        replaced["delta-rs merge"] = sum(size for path, size in before.items() if path not in after)

    t_merge = timed(repeats, lambda: _fresh_copy(delta_base, work / "delta_merge"), delta_merge)
    assert checksum(DeltaTable(str(work / "delta_merge")).to_pyarrow_table()) == expected_after

    # naive Spark: read everything, anti-join, union, overwrite everything
    def naive() -> None:
        old = spark.read.parquet(str(base_src))
        new = spark.read.parquet(str(batch_src))
        out = old.join(new.select("id"), "id", "left_anti").unionByName(new)
        out.write.mode("overwrite").partitionBy("city").parquet(str(work / "naive"))

    t_naive = timed(repeats, lambda: None, naive)
    assert checksum(pq.read_table(work / "naive")) == expected_after
    written["naive spark rewrite"] = dir_bytes(work / "naive")
    replaced["naive spark rewrite"] = dir_bytes(base_src)  # all of it, every time
    return {
        "scenario": label,
        "runner_s": statistics.median(t_upsert),
        "peers": {
            "delta-rs merge": statistics.median(t_merge),
            "naive spark rewrite": statistics.median(t_naive),
        },
        "bytes_written": written,
        "bytes_replaced": replaced,
        "touched": touched,
    }


def _live_files(table: DeltaTable) -> dict[str, int]:
    actions = pa.table(table.get_add_actions(flatten=True))
    return dict(zip(actions["path"].to_pylist(), actions["size_bytes"].to_pylist(), strict=True))


def _fresh_copy(src: Path, dst: Path) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
