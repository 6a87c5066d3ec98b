"""The write scenarios of `python -m bench --only write` (bench/write.py has their data,
checksums and timing): a bulk_insert beside Spark's plain write and Spark writing the
runner's files; upserts of batches of each fraction of the table, spread over every
partition and in one partition, beside delta-rs `merge` and a naive Spark rewrite."""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from bench.scale import Scale
from bench.write import (
    CITIES,
    PEERS,
    Checksum,
    checksum,
    delta_dataset,
    delta_rs_upsert,
    dir_bytes,
    fresh_copy,
    live_files,
    make_rows,
    parquet_dataset,
    percent,
    rewrite_files,
    spec_file,
    stage_report,
    timed,
    write_source,
)
from runner.pipeline.run import run_pipeline

FRACTIONS = (0.001, 0.01, 0.1)


@dataclass(frozen=True)
class UpsertSettings:
    """The runner upserts' settings: target.driver_merge.max_rows (None: the spec's; 0:
    every batch merged in a Spark job, for the comparison with the driver merge) and
    target.merge_mode (the batch has no nulls, so every mode stores the same rows)."""

    driver_merge_max_rows: int | None = None
    merge_mode: str | None = None


def run_write_benchmarks(
    spark,
    work: Path,
    scale: Scale,
    fractions=FRACTIONS,
    settings: UpsertSettings | None = None,
) -> list[dict]:
    """The write scenarios; `scale.skip` holds PEERS keys not to run (too slow at the size)."""
    unknown = scale.skip - PEERS.keys()
    assert not unknown, f"unknown peers {sorted(unknown)}; known: {sorted(PEERS)}"
    base = _Base(spark, work, scale, settings or UpsertSettings())
    results = [_bulk_insert(base)]
    if "delta-merge" not in scale.skip:
        source = parquet_dataset(base.src).scanner(batch_size=128 * 1024).to_reader()
        write_deltalake(str(base.delta), source, partition_by=["city"])
    rng = np.random.default_rng(2)
    rows = scale.rows
    ams_rows = len(range(0, rows, len(CITIES)))  # ids 0, 8, 16, ...: every one city "ams"
    for fraction in fractions:
        n = max(1, round(rows * fraction))
        spread = rng.choice(rows, n, replace=False)
        one_partition = rng.choice(ams_rows, min(n, ams_rows), replace=False) * len(CITIES)
        for label, ids in (
            ("spread over all partitions", spread),
            ("in one partition", one_partition),
        ):
            results.append(_upsert(base, fraction, label, ids))
    return results


@dataclass
class _Base:
    """What every scenario starts from: the R-row source, its checksum, the runner's
    bulk-loaded table, and delta-rs' table of the same rows."""

    spark: Any
    work: Path
    scale: Scale
    settings: UpsertSettings
    expected: Checksum = field(init=False)

    def __post_init__(self) -> None:
        self.expected = write_source(self.src, self.scale.rows, seed=1)

    @property
    def src(self) -> Path:
        return self.work / "base_src"

    @property
    def runner_table(self) -> Path:
        return self.work / "bulk_runner"

    @property
    def delta(self) -> Path:
        return self.work / "delta_base"

    def skipped(self, *names: str) -> dict:
        shown = {PEERS[n]: f"--skip-peer {n}" for n in names if n in self.scale.skip}
        return {"peers_skipped": shown} if shown else {}

    def median(self, run: Callable[[], object], check: Callable[[], None]) -> float:
        """A peer's median seconds (warm-up as the scale says), its result then checked."""
        seconds = timed(self.scale.repeats, lambda: None, run, warmup=self.scale.warmup)
        check()
        return statistics.median(seconds)


def _bulk_insert(base: _Base) -> dict:
    """1. bulk_insert vs Spark partitionBy(...).parquet and Spark writing the runner's files."""
    scale, spark, work = base.scale, base.spark, base.work
    spec = spec_file(work / "bulk", "bulk_insert", base.src, base.runner_table, scale.buckets)
    summaries: list = []
    t_runner = timed(
        scale.repeats,
        lambda: shutil.rmtree(base.runner_table, ignore_errors=True),
        lambda: run_pipeline(spec, spark=spark),
        summaries,
        scale.warmup,
    )
    assert checksum(delta_dataset(base.runner_table)) == base.expected
    peers = {}
    if "spark-parquet" not in scale.skip:
        peers[PEERS["spark-parquet"]] = _spark_write(base, work / "bulk_spark")
    if "spark-same-files" not in scale.skip:
        peers[PEERS["spark-same-files"]] = _spark_same_files(base, spec, work / "bulk_spark_same")
    return {
        "scenario": f"bulk_insert {scale.rows:,} rows, {scale.buckets} buckets x "
        f"{len(CITIES)} partitions",
        "runner_s": statistics.median(t_runner),
        "peers": peers,
        **base.skipped("spark-parquet", "spark-same-files"),
        **stage_report(summaries),
    }


def _spark_write(base: _Base, plain: Path) -> float:
    def spark_write() -> None:
        base.spark.read.parquet(str(base.src)).write.mode("overwrite").partitionBy("city").parquet(
            str(plain)
        )

    def check() -> None:
        assert checksum(parquet_dataset(plain)) == base.expected
        shutil.rmtree(plain)

    return base.median(spark_write, check)


def _spark_same_files(base: _Base, spec, same: Path) -> float:
    frame = runner_file_columns(base.spark.read.parquet(str(base.src)), spec)

    def spark_same_files() -> None:
        frame.write.mode("overwrite").option("compression", "zstd").partitionBy(
            "partition_dir", "bucket_dir"
        ).parquet(str(same))

    def check() -> None:
        assert checksum(parquet_dataset(same)) == base.expected
        shutil.rmtree(same)

    return base.median(spark_same_files, check)


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


@dataclass
class _UpsertRun:
    """2. One upsert batch (updates, plus a tenth as many new keys, all in "ams") and what
    each system wrote, replaced and touched for it."""

    base: _Base
    batch: pa.Table
    expected_after: Checksum
    written: dict[str, int] = field(default_factory=dict)
    replaced: dict[str, int] = field(default_factory=dict)  # bytes of stored files replaced
    touched: dict[str, int] = field(default_factory=dict)
    peers: dict[str, float] = field(default_factory=dict)

    @property
    def batch_src(self) -> Path:
        return self.base.work / "batch_src"


def _upsert(base: _Base, fraction: float, label: str, ids: np.ndarray) -> dict:
    rows = base.scale.rows
    new_keys = rows + np.arange(len(ids) // 10, dtype=np.int64) * len(CITIES)  # "ams"
    batch_ids = np.concatenate([ids.astype(np.int64), new_keys])
    merge_mode = base.settings.merge_mode
    scenario = f"upsert {len(batch_ids):,} rows ({percent(fraction)}) {label} into {rows:,}" + (
        f", merge_mode {merge_mode}" if merge_mode else ""
    )
    run = _upsert_batch(base, batch_ids)
    t_upsert, stages, floor, replaced_files = _runner_upsert(run)
    if "delta-merge" not in base.scale.skip:
        run.peers[PEERS["delta-merge"]] = _delta_merge(run)
    if "naive-rewrite" not in base.scale.skip:
        run.peers[PEERS["naive-rewrite"]] = _naive_rewrite(run)
    write_stage = stages["runner_stages_median"].get("write", 0.0)
    return {
        "scenario": scenario,
        "runner_s": statistics.median(t_upsert),
        "peers": run.peers,
        **base.skipped("delta-merge", "naive-rewrite"),
        "bytes_written": run.written,
        "bytes_replaced": run.replaced,
        "touched": run.touched,
        **stages,
        "floor_rewrite_s": floor,
        "notes": [
            f"write stage {write_stage:.2f} s / pyarrow read + write of the {replaced_files} "
            f"replaced files on 2 threads {floor:.2f} s = {write_stage / floor:.2f}x"
        ],
    }


def _upsert_batch(base: _Base, batch_ids: np.ndarray) -> _UpsertRun:
    """The batch of `batch_ids` written as the upserts' source; the checksum after it."""
    batch = make_rows(0, seed=3, ids=batch_ids, ts=2)
    assert pc.count_distinct(batch["id"]).as_py() == batch.num_rows
    run = _UpsertRun(base, batch, Checksum())
    shutil.rmtree(run.batch_src, ignore_errors=True)
    run.batch_src.mkdir()
    pq.write_table(batch, run.batch_src / "part-0.parquet")
    # the stored rows of the batch's keys give way to the batch's rows
    replaced_rows = checksum(parquet_dataset(base.src), pc.field("id").isin(batch["id"]))
    run.expected_after = base.expected - replaced_rows + checksum(batch)
    return run


def _runner_upsert(run: _UpsertRun) -> tuple[list[float], dict, float, int]:
    """The runner on the bulk-loaded table, copied fresh for every repeat: its seconds, its
    stage report, the floor of its write stage (the files it replaced, read and written
    again with pyarrow on 2 threads) and how many files it replaced."""
    base, work = run.base, run.base.work
    settings = base.settings
    place: dict = (
        {}
        if settings.driver_merge_max_rows is None
        else {"driver_merge": {"max_rows": settings.driver_merge_max_rows}}
    )
    if settings.merge_mode:
        place["merge_mode"] = settings.merge_mode
    table = work / "upsert_runner"
    spec = spec_file(work / "upsert", "upsert", run.batch_src, table, base.scale.buckets, **place)
    replaced_files: list[Path] = []

    def runner_upsert():
        before = live_files(DeltaTable(str(table)))
        summary = run_pipeline(spec, spark=base.spark)
        after = live_files(DeltaTable(str(table)))
        run.written["runner"] = summary.bytes_written
        run.replaced["runner"] = sum(size for path, size in before.items() if path not in after)
        replaced_files[:] = [table / p for p in before if p not in after]
        run.touched["runner buckets"] = summary.buckets_touched
        run.touched["runner files in the table before"] = len(before)
        return summary

    summaries: list = []
    scale = base.scale
    prepare = lambda: fresh_copy(base.runner_table, table)  # noqa: E731
    t_upsert = timed(scale.repeats, prepare, runner_upsert, summaries, scale.warmup)
    assert checksum(delta_dataset(table)) == run.expected_after
    t_floor = timed(
        scale.repeats, lambda: None, lambda: rewrite_files(replaced_files, work / "floor")
    )
    shutil.rmtree(table)
    shutil.rmtree(work / "floor")
    return t_upsert, stage_report(summaries), statistics.median(t_floor), len(replaced_files)


def _delta_merge(run: _UpsertRun) -> float:
    """delta-rs MERGE on the same rows, partitioned by city."""
    base, merged = run.base, run.base.work / "delta_merge"

    def delta_merge() -> None:
        added, removed = delta_rs_upsert(merged, run.batch)
        run.written["delta-rs merge"], run.replaced["delta-rs merge"] = added, removed

    scale = base.scale
    prepare = lambda: fresh_copy(base.delta, merged)  # noqa: E731
    t_merge = timed(scale.repeats, prepare, delta_merge, warmup=scale.warmup)
    assert checksum(delta_dataset(merged)) == run.expected_after
    shutil.rmtree(merged)
    return statistics.median(t_merge)


def _naive_rewrite(run: _UpsertRun) -> float:
    """Naive Spark: read everything, anti-join, union, overwrite everything."""
    base, naive_out = run.base, run.base.work / "naive"

    def naive() -> None:
        spark = base.spark
        old = spark.read.parquet(str(base.src))
        new = spark.read.parquet(str(run.batch_src))
        out = old.join(new.select("id"), "id", "left_anti").unionByName(new)
        out.write.mode("overwrite").partitionBy("city").parquet(str(naive_out))

    def check() -> None:
        assert checksum(parquet_dataset(naive_out)) == run.expected_after
        run.written[PEERS["naive-rewrite"]] = dir_bytes(naive_out)
        run.replaced[PEERS["naive-rewrite"]] = dir_bytes(base.src)  # all of it, every time
        shutil.rmtree(naive_out)

    return base.median(naive, check)
