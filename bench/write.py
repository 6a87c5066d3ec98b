"""Write-path benchmarks: the runner beside the peers a user would compare it with.

    python -m bench --only write [--rows 200000] [--repeats 3] [--buckets 16]

Scenarios, each checked (row count and checksums equal across systems) before it is timed:
- bulk_insert of R rows vs Spark's own `partitionBy(...).parquet(...)` of the same rows, and
  vs Spark writing what the runner writes: the same columns (its five meta columns
  computed with the runner's own key expressions), one directory per partition and bucket,
  zstd (Spark's own file names and path escaping; the checksum covers `id` and `amount`);
- upserts of batches (each --fractions of R) into an R-row table vs delta-rs
  `DeltaTable.merge` and vs a naive Spark rewrite (anti-join, union, overwrite), with the
  bytes each one rewrites.

Data is generated with numpy and pyarrow compute (seeded, no Python loop over rows) and
written CHUNK_ROWS rows per parquet file, so a 20,000,000-row source never sits in memory;
checksums stream the `id` and `amount` columns batch by batch.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import yaml
from deltalake import DeltaTable, write_deltalake

from runner.pipeline.run import run_pipeline
from runner.spec import load_spec

CITIES = ["ams", "sf", "nyc", "sp", "tokyo", "lagos", "paris", "delhi"]
CHUNK_ROWS = 1_000_000  # rows generated and written at a time: one parquet file each
PEERS = {  # --skip-peer NAME -> the peer as reported
    "spark-parquet": "spark partitionBy().parquet",
    "spark-same-files": "spark, the runner's files",
    "delta-merge": "delta-rs merge",
    "naive-rewrite": "naive spark rewrite",
}


def make_rows(
    n: int, seed: int | tuple[int, ...], ids: Iterable[int] | None = None, ts: int = 1
) -> pa.Table:
    """Rows with ids 0..n-1 (or `ids`, then n is ignored), the same for the same seed."""
    id_array = np.arange(n, dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
    rng = np.random.default_rng(seed)
    amount = np.round(rng.uniform(0, 500, len(id_array)), 2)
    note = pc.cast(pa.array(rng.integers(0, 10**6, len(id_array))), pa.string())
    return pa.table(
        {
            "id": pa.array(id_array, pa.int64()),
            "city": pa.array(CITIES).take(pa.array(id_array % len(CITIES))),
            "ts": pa.array(np.full(len(id_array), ts, dtype=np.int64)),
            "amount": pa.array(amount, pa.float64()),
            "note": pc.binary_join_element_wise("note-", pc.utf8_lpad(note, 6, "0"), ""),
        }
    )


@dataclass(frozen=True)
class Checksum:
    """Row count, sum of ids and sum of amounts in cents: exact, whatever the row order."""

    rows: int = 0
    id_sum: int = 0
    cents: int = 0

    def __add__(self, other: Checksum) -> Checksum:
        return Checksum(
            self.rows + other.rows, self.id_sum + other.id_sum, self.cents + other.cents
        )

    def __sub__(self, other: Checksum) -> Checksum:
        return Checksum(
            self.rows - other.rows, self.id_sum - other.id_sum, self.cents - other.cents
        )


def checksum(data: pa.Table | ds.Dataset, where: pc.Expression | None = None) -> Checksum:
    """Of a table, or of a dataset read batch by batch (only `id` and `amount`)."""
    if isinstance(data, ds.Dataset):
        batches = data.to_batches(columns=["id", "amount"], filter=where)
    else:
        table = data.select(["id", "amount"])
        batches = (table.filter(where) if where is not None else table).to_batches()
    total = Checksum()
    for batch in batches:  # a loop over record batches, not rows
        cents = pc.cast(pc.round(pc.multiply(batch.column("amount"), 100)), pa.int64())
        total += Checksum(
            batch.num_rows,
            pc.sum(batch.column("id")).as_py() or 0,
            pc.sum(cents).as_py() or 0,
        )
    return total


def parquet_dataset(path: Path) -> ds.Dataset:
    return ds.dataset(str(path), format="parquet")


def delta_dataset(path: Path) -> ds.Dataset:
    return DeltaTable(str(path)).to_pyarrow_dataset()


def write_source(directory: Path, rows: int, seed: int, chunk_rows: int = CHUNK_ROWS) -> Checksum:
    """`rows` rows into `directory`, chunk_rows per parquet file; their checksum."""
    directory.mkdir(parents=True, exist_ok=True)
    total = Checksum()
    for i, start in enumerate(range(0, rows, chunk_rows)):
        chunk = make_rows(0, seed=(seed, i), ids=np.arange(start, min(start + chunk_rows, rows)))
        pq.write_table(chunk, directory / f"part-{i:05d}.parquet")
        total += checksum(chunk)
    return total


def spec_file(
    work: Path, name: str, operation: str, source: Path, table: Path, buckets: int, **target
):
    """A pipeline spec file (and its loaded spec); `target` adds target keys (table_type)."""
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
            **target,
        },
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return load_spec(path)


def timed(
    repeats: int,
    prepare: Callable[[], None],
    run: Callable[[], object],
    outputs: list | None = None,
    warmup: bool = True,
) -> list[float]:
    """Seconds of each of `repeats` runs, after one untimed warm-up run (JIT, caches) unless
    warmup is False; what each timed run returned goes to `outputs`."""
    if warmup:
        prepare()
        run()
    times = []
    for _ in range(repeats):
        prepare()
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
        if outputs is not None:
            outputs.append(result)
    return times


def stage_report(summaries: list) -> dict:
    """Each run's stage seconds (RunSummary.stage_seconds) and the median per stage."""
    runs = [dict(s.stage_seconds) for s in summaries]
    stages = list(dict.fromkeys(stage for run in runs for stage in run))
    median = {
        stage: round(statistics.median(run[stage] for run in runs if stage in run), 3)
        for stage in stages
    }
    return {"runner_stage_seconds": runs, "runner_stages_median": median}


def runner_process(spec: Path, summary_file: Path) -> tuple[float, dict]:
    """`runner SPEC --summary-json FILE` as a user runs it, a whole process: its wall seconds
    and its run summary (a failed run raises, with the end of its stderr)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "runner", str(spec), "--summary-json", str(summary_file)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"runner exited {done.returncode}:\n{done.stderr[-3000:]}")
    return seconds, json.loads(summary_file.read_text())


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*.parquet"))


def percent(fraction: float) -> str:
    return f"{fraction:.1%}" if fraction >= 0.001 else f"{fraction * 100:.2g}%"


FRACTIONS = (0.001, 0.01, 0.1)


def run_write_benchmarks(
    spark,
    work: Path,
    rows: int,
    repeats: int,
    buckets: int,
    fractions=FRACTIONS,
    skip: Iterable[str] = (),
    warmup: bool = True,
    driver_merge_max_rows: int | None = None,
    merge_mode: str | None = None,
) -> list[dict]:
    """The write scenarios; `skip` holds PEERS keys not to run (too slow at the size);
    `driver_merge_max_rows` sets the runner upserts' target.driver_merge.max_rows (0: every
    batch merged in a Spark job, for the comparison with the driver merge); `merge_mode`
    their target.merge_mode (the batch has no nulls, so every mode stores the same rows)."""
    skip = frozenset(skip)
    unknown = skip - PEERS.keys()
    assert not unknown, f"unknown peers {sorted(unknown)}; known: {sorted(PEERS)}"
    skipped = {PEERS[name]: f"--skip-peer {name}" for name in sorted(skip)}
    results = []
    base_src = work / "base_src"
    expected = write_source(base_src, rows, seed=1)

    # 1. bulk_insert vs Spark partitionBy(...).parquet
    runner_table = work / "bulk_runner"
    spec = spec_file(work, "bulk", "bulk_insert", base_src, runner_table, buckets)
    summaries: list = []
    t_runner = timed(
        repeats,
        lambda: shutil.rmtree(runner_table, ignore_errors=True),
        lambda: run_pipeline(spec, spark=spark),
        summaries,
        warmup,
    )
    assert checksum(delta_dataset(runner_table)) == expected
    peers = {}
    if "spark-parquet" not in skip:
        plain = work / "bulk_spark"

        def spark_write() -> None:
            spark.read.parquet(str(base_src)).write.mode("overwrite").partitionBy("city").parquet(
                str(plain)
            )

        t_spark = timed(repeats, lambda: None, spark_write, warmup=warmup)
        assert checksum(parquet_dataset(plain)) == expected
        shutil.rmtree(plain)
        peers[PEERS["spark-parquet"]] = statistics.median(t_spark)
    if "spark-same-files" not in skip:
        same = work / "bulk_spark_same"
        frame = runner_file_columns(spark.read.parquet(str(base_src)), spec)

        def spark_same_files() -> None:
            frame.write.mode("overwrite").option("compression", "zstd").partitionBy(
                "partition_dir", "bucket_dir"
            ).parquet(str(same))

        t_same = timed(repeats, lambda: None, spark_same_files, warmup=warmup)
        assert checksum(parquet_dataset(same)) == expected
        shutil.rmtree(same)
        peers[PEERS["spark-same-files"]] = statistics.median(t_same)
    results.append(
        {
            "scenario": f"bulk_insert {rows:,} rows, {buckets} buckets x {len(CITIES)} partitions",
            "runner_s": statistics.median(t_runner),
            "peers": peers,
            **_skipped(skipped, "spark-parquet", "spark-same-files"),
            **stage_report(summaries),
        }
    )

    # 2. upserts of batches of each fraction of the table (updates, plus a tenth as many new
    #    keys): spread over every partition, and concentrated in one partition, the case a
    #    bucket index is made for
    delta_base = work / "delta_base"
    if "delta-merge" not in skip:
        source = parquet_dataset(base_src).scanner(batch_size=128 * 1024).to_reader()
        write_deltalake(str(delta_base), source, partition_by=["city"])
    rng = np.random.default_rng(2)
    ams_rows = len(range(0, rows, len(CITIES)))  # ids 0, 8, 16, ...: every one city "ams"
    for fraction in fractions:
        n = max(1, round(rows * fraction))
        spread = rng.choice(rows, n, replace=False)
        one_partition = rng.choice(ams_rows, min(n, ams_rows), replace=False) * len(CITIES)
        for label, ids in (
            ("spread over all partitions", spread),
            ("in one partition", one_partition),
        ):
            new_keys = rows + np.arange(len(ids) // 10, dtype=np.int64) * len(CITIES)  # "ams"
            batch_ids = np.concatenate([ids.astype(np.int64), new_keys])
            results.append(
                _upsert(
                    spark,
                    work,
                    runner_table,
                    delta_base,
                    base_src,
                    expected,
                    batch_ids,
                    f"upsert {len(batch_ids):,} rows ({percent(fraction)}) {label} into {rows:,}"
                    + (f", merge_mode {merge_mode}" if merge_mode else ""),
                    repeats,
                    buckets,
                    skip,
                    skipped,
                    warmup,
                    driver_merge_max_rows,
                    merge_mode,
                )
            )
    return results


def runner_file_columns(source, spec):
    """The rows of `source` as a bulk_insert stores them (meta columns first, computed by the
    runner's key expressions), plus copies of the partition path and bucket for Spark's
    `partitionBy` (which keeps its partition columns out of the files)."""
    from pyspark.sql import functions as F

    from runner.pipeline.key_columns import add_key_columns
    from runner.storage.meta_columns import (
        BUCKET,
        COMMIT_SEQNO,
        COMMIT_TIME,
        PARTITION_PATH,
        RECORD_KEY,
    )

    instant = "20260101000000000"
    # the row's number in its task: monotonically_increasing_id's lower 33 bits
    row_in_task = F.monotonically_increasing_id().bitwiseAND((1 << 33) - 1)
    seqno = F.concat_ws("_", F.lit(instant), F.spark_partition_id(), row_in_task)
    return add_key_columns(source, spec.target).select(
        F.lit(instant).alias(COMMIT_TIME),
        seqno.alias(COMMIT_SEQNO),
        RECORD_KEY,
        PARTITION_PATH,
        BUCKET,
        *source.columns,
        F.col(PARTITION_PATH).alias("partition_dir"),
        F.col(BUCKET).alias("bucket_dir"),
    )


def _skipped(skipped: dict[str, str], *names: str) -> dict:
    shown = {PEERS[n]: skipped[PEERS[n]] for n in names if PEERS[n] in skipped}
    return {"peers_skipped": shown} if shown else {}


def _upsert(
    spark,
    work,
    runner_table,
    delta_base,
    base_src,
    base_checksum,
    ids,
    label,
    repeats,
    buckets,
    skip,
    skipped,
    warmup,
    driver_merge_max_rows,
    merge_mode=None,
):
    batch = make_rows(0, seed=3, ids=ids, ts=2)
    assert pc.count_distinct(batch["id"]).as_py() == batch.num_rows
    batch_src = work / "batch_src"
    shutil.rmtree(batch_src, ignore_errors=True)
    batch_src.mkdir()
    pq.write_table(batch, batch_src / "part-0.parquet")
    # the stored rows of the batch's keys give way to the batch's rows
    replaced_rows = checksum(parquet_dataset(base_src), pc.field("id").isin(batch["id"]))
    expected_after = base_checksum - replaced_rows + checksum(batch)
    written: dict[str, int] = {}
    replaced: dict[str, int] = {}  # bytes of stored files the upsert replaced
    touched: dict[str, int] = {}
    peers: dict[str, float] = {}

    # the runner: the bulk-loaded table, copied fresh for every repeat
    place = (
        {}
        if driver_merge_max_rows is None
        else {"driver_merge": {"max_rows": driver_merge_max_rows}}
    )
    if merge_mode:
        place["merge_mode"] = merge_mode
    upsert_spec = spec_file(
        work, "upsert", "upsert", batch_src, work / "upsert_runner", buckets, **place
    )

    replaced_files: list[Path] = []

    def runner_upsert():
        before = _live_files(DeltaTable(str(work / "upsert_runner")))
        summary = run_pipeline(upsert_spec, spark=spark)
        after = _live_files(DeltaTable(str(work / "upsert_runner")))
        written["runner"] = summary.bytes_written
        replaced["runner"] = sum(size for path, size in before.items() if path not in after)
        replaced_files[:] = [work / "upsert_runner" / p for p in before if p not in after]
        touched["runner buckets"] = summary.buckets_touched
        touched["runner files in the table before"] = len(before)
        return summary

    summaries: list = []
    t_upsert = timed(
        repeats,
        lambda: fresh_copy(runner_table, work / "upsert_runner"),
        runner_upsert,
        summaries,
        warmup,
    )
    assert checksum(delta_dataset(work / "upsert_runner")) == expected_after
    # the floor of the write stage: the files it replaced, read and written again with
    # pyarrow (zstd) at the same parallelism as the runner's local[2], nothing else
    t_floor = timed(repeats, lambda: None, lambda: rewrite_files(replaced_files, work / "floor"))
    shutil.rmtree(work / "upsert_runner")
    shutil.rmtree(work / "floor")
    stages = stage_report(summaries)
    write_stage = stages["runner_stages_median"].get("write", 0.0)
    floor = statistics.median(t_floor)

    # delta-rs MERGE on the same rows, partitioned by city
    if "delta-merge" not in skip:

        def delta_merge() -> None:
            added, removed = delta_rs_upsert(work / "delta_merge", batch)
            written["delta-rs merge"], replaced["delta-rs merge"] = added, removed

        t_merge = timed(
            repeats,
            lambda: fresh_copy(delta_base, work / "delta_merge"),
            delta_merge,
            warmup=warmup,
        )
        assert checksum(delta_dataset(work / "delta_merge")) == expected_after
        shutil.rmtree(work / "delta_merge")
        peers[PEERS["delta-merge"]] = statistics.median(t_merge)

    # naive Spark: read everything, anti-join, union, overwrite everything
    if "naive-rewrite" not in skip:

        def naive() -> None:
            old = spark.read.parquet(str(base_src))
            new = spark.read.parquet(str(batch_src))
            out = old.join(new.select("id"), "id", "left_anti").unionByName(new)
            out.write.mode("overwrite").partitionBy("city").parquet(str(work / "naive"))

        t_naive = timed(repeats, lambda: None, naive, warmup=warmup)
        assert checksum(parquet_dataset(work / "naive")) == expected_after
        written[PEERS["naive-rewrite"]] = dir_bytes(work / "naive")
        replaced[PEERS["naive-rewrite"]] = dir_bytes(base_src)  # all of it, every time
        shutil.rmtree(work / "naive")
        peers[PEERS["naive-rewrite"]] = statistics.median(t_naive)
    return {
        "scenario": label,
        "runner_s": statistics.median(t_upsert),
        "peers": peers,
        **_skipped(skipped, "delta-merge", "naive-rewrite"),
        "bytes_written": written,
        "bytes_replaced": replaced,
        "touched": touched,
        **stages,
        "floor_rewrite_s": floor,
        "notes": [
            f"write stage {write_stage:.2f} s / pyarrow read + write of the {len(replaced_files)} "
            f"replaced files on 2 threads {floor:.2f} s = {write_stage / floor:.2f}x"
        ],
    }


def rewrite_files(files: list[Path], out: Path, threads: int = 2) -> None:
    """Read each file and write it again (zstd), `threads` at a time: a rewrite's floor."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()

    def rewrite(item: tuple[int, Path]) -> None:
        pq.write_table(pq.read_table(item[1]), out / f"{item[0]}.parquet", compression="zstd")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(rewrite, enumerate(files)))


def delta_rs_upsert(path: Path, batch: pa.Table) -> tuple[int, int]:
    """delta-rs MERGE of `batch` by (id, city): update matches, insert the rest. Returns
    the bytes of the files it added and of the live files it replaced."""
    table = DeltaTable(str(path))
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
    added = sum(s for p, s in after.items() if p not in before)
    return added, sum(s for p, s in before.items() if p not in after)


def _live_files(table: DeltaTable) -> dict[str, int]:
    actions = pa.table(table.get_add_actions(flatten=True))
    return dict(zip(actions["path"].to_pylist(), actions["size_bytes"].to_pylist(), strict=True))


def fresh_copy(src: Path, dst: Path) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
