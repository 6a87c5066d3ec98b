"""Merge-on-read benchmarks: small upserts, reads of an unfolded table, compaction.

    python -m bench --only mor [--rows 200000] [--repeats 3] [--buckets 16] [--mor-keys 100]

Scenarios, each result checked (row count and checksums against the expected) before it is
reported; every timed run starts from a fresh copy of its base table (copied untimed):
1. an upsert of K existing keys, drawn at random over the R-row table (so they touch most
   buckets): runner MERGE_ON_READ beside runner COPY_ON_WRITE, delta-rs `DeltaTable.merge`
   and, when the session has delta-spark, delta-spark MERGE with deletion vectors. Runner
   times are job seconds (the run's stage seconds without "start"; the session is already
   up) with the wall time beside them; peers are wall times of the merge call.
2. a full Polars read (`pl.read_delta`: every column, then the row count and two sums) of
   the MERGE_ON_READ table after 10 successive K-key upserts, beside the same read of the
   table once `compact_table` has folded it;
3. that `compact_table`, beside a pyarrow read-and-rewrite (zstd, 2 threads like Spark's
   local[2]) of the files it folds: the floor of any rewrite (deleted rows kept, no sort).

delta-spark needs its jars and session extension when the session starts (bench/__main__.py
asks tests/delta_spark.py for them); without them its row says "skipped (no jars)".

The 10 upserts use disjoint key sets (10 x K distinct keys), with the spec's default
target.compaction thresholds, so a bucket reaching max_delta_files is rewritten whole by
the run that would add to it, as in production.
"""

from __future__ import annotations

import shutil
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession

from bench.scale import Scale
from bench.write import (
    Checksum,
    checksum,
    delta_rs_upsert,
    fresh_copy,
    make_rows,
    parquet_dataset,
    spec_file,
    stage_report,
    timed,
    write_source,
)
from runner.delta.snapshot import open_table
from runner.pipeline.run import run_pipeline

UPSERTS = 10  # successive upserts before the read and compaction scenarios
MOR = "MERGE_ON_READ"
DELTA_SPARK_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_SPARK = "delta-spark MERGE, deletion vectors (wall)"
DELTA_RS = "delta-rs merge (wall)"
COW = "runner COPY_ON_WRITE (job)"


def delta_spark_upsert(spark: SparkSession, table: Path, source: DataFrame) -> None:
    """delta-spark's MERGE (its Scala API, MergeIntoCommand as SQL's MERGE INTO) of `source`
    into the table at `table` by (id, city): matched rows updated, the others inserted."""
    (
        spark._jvm.io.delta.tables.DeltaTable.forPath(spark._jsparkSession, str(table))
        .alias("t")
        .merge(source._jdf.alias("s"), "t.id = s.id AND t.city = s.city")
        .whenMatched()
        .updateAll()
        .whenNotMatched()
        .insertAll()
        .execute()
    )


def delta_spark_problem(spark) -> str | None:
    """Why this session cannot run delta-spark MERGE (None: it can)."""
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    if DELTA_SPARK_EXTENSION not in [e.strip() for e in extensions.split(",")]:
        return "no jars"
    from py4j.java_gateway import JavaClass

    # py4j answers a JavaPackage, not a JavaClass, for a class no jar provides
    if not isinstance(spark._jvm.io.delta.tables.DeltaTable, JavaClass):
        return "no jars"
    return None


def scan_checksum(path: Path) -> Checksum:
    """Of a Delta table as delta-rs reads it, deletion vectors applied, batch by batch."""
    reader = pa.RecordBatchReader.from_stream(DeltaTable(str(path)).scan(columns=["id", "amount"]))
    total = Checksum()
    for batch in reader:
        total += checksum(pa.Table.from_batches([batch]))
    return total


def job_seconds(summary) -> float:
    """A run's stage seconds without Spark's start (the bench's session is already up)."""
    return round(sum(s for stage, s in summary.stage_seconds.items() if stage != "start"), 3)


def setup_mor(max_delta_files: int | None) -> dict:
    """Target keys of the MERGE_ON_READ table; the spec's default thresholds unless given."""
    extra: dict = {"table_type": MOR}
    if max_delta_files is not None:
        extra["compaction"] = {"max_delta_files": max_delta_files}
    return extra


def run_mor_benchmarks(
    spark,
    work: Path,
    scale: Scale,
    keys: int = 100,
    upserts: int = UPSERTS,
    max_delta_files: int | None = None,
) -> list[dict]:
    """The merge-on-read scenarios; `scale.skip` may hold "delta-merge" (bench.write.PEERS);
    `upserts` successive upserts precede the read and compaction scenarios."""
    from bench.merge_on_read_reads import read_and_compact

    rows = scale.rows
    if upserts * keys > rows:
        raise ValueError(f"--mor-keys {keys} x {upserts} upserts needs at least that many rows")
    work.mkdir(parents=True, exist_ok=True)
    src = work / "mor_src"
    expected = write_source(src, rows, seed=11)
    bases = _base_tables(spark, work, scale.buckets, src, expected, max_delta_files)
    # K x upserts distinct existing keys at random: batch i updates key_sets[i]
    rng = np.random.default_rng(12)
    key_sets = rng.choice(rows, upserts * keys, replace=False).reshape(upserts, keys)
    setup = Setup(
        spark=spark,
        work=work,
        src=src,
        bases=bases,
        batches=_batches(work, key_sets),
        keys=keys,
        scale=scale,
        table_buckets=len(open_table(str(bases["mor"])).files()),
        mor=setup_mor(max_delta_files),
    )

    def after(n: int) -> Checksum:
        """The table's checksum after the first n upserts (their keys are disjoint)."""
        replaced = checksum(
            parquet_dataset(src), pc.field("id").isin(pa.array(key_sets[:n].ravel()))
        )
        return sum((checksum(b) for _, b in setup.batches[:n]), expected - replaced)

    return [_one_upsert(setup, after(1)), *read_and_compact(setup, after(upserts))]


def _base_tables(
    spark, work: Path, buckets: int, src: Path, expected: Checksum, max_delta_files: int | None
) -> dict[str, Path]:
    """The base tables, loaded once: each timed upsert starts from a copy of one."""
    bases = {"mor": work / "mor_base", "cow": work / "cow_base"}
    for kind, path in bases.items():
        extra = setup_mor(max_delta_files) if kind == "mor" else {}
        load = spec_file(work / f"{kind}_load", "bulk_insert", src, path, buckets, **extra)
        run_pipeline(load, spark=spark)
        assert scan_checksum(path) == expected, kind
    return bases


def _batches(work: Path, key_sets: np.ndarray) -> list[tuple[Path, pa.Table]]:
    """Each upsert's rows, written as its source directory."""
    batches = []
    for i, ids in enumerate(key_sets):
        batch = make_rows(0, seed=(13, i), ids=ids, ts=2 + i)
        directory = work / f"mor_batch_{i}"
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir()
        pq.write_table(batch, directory / "part-0.parquet")
        batches.append((directory, batch))
    return batches


@dataclass(frozen=True)
class Setup:
    """What the scenarios share: the session, the source, base tables and upsert batches."""

    spark: Any
    work: Path
    src: Path
    bases: dict[str, Path]  # "mor", "cow": the bulk-loaded runner tables
    batches: list[tuple[Path, pa.Table]]  # each upsert's source directory and rows
    keys: int
    scale: Scale
    table_buckets: int  # buckets (partition x bucket) in the loaded table
    mor: dict  # the target keys of the MERGE_ON_READ table (table_type, compaction)

    def timed(self, prepare, run, outputs: list | None = None) -> list[float]:
        """Seconds of the scale's repeats of `run`, warm-up as the scale says."""
        return timed(self.scale.repeats, prepare, run, outputs, self.scale.warmup)


@dataclass
class _Upserted:
    """Scenario 1's figures, system by system."""

    written: dict[str, int] = field(default_factory=dict)
    touched: dict[str, int] = field(default_factory=dict)
    wall: dict[str, float] = field(default_factory=dict)
    peers: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    jobs: dict[str, list[float]] = field(default_factory=dict)
    summaries: dict[str, list] = field(default_factory=dict)


def _one_upsert(setup: Setup, expected: Checksum) -> dict:
    """Scenario 1: the first batch upserted into each system's copy of the base table."""
    out = _Upserted()
    for kind, label in (("mor", f"runner {MOR}"), ("cow", "runner COPY_ON_WRITE")):
        _runner_upsert(setup, expected, out, kind, label)
    out.touched["buckets in the table"] = setup.table_buckets
    out.peers[COW] = statistics.median(out.jobs["cow"])
    if "delta-merge" in setup.scale.skip:
        out.skipped[DELTA_RS] = "--skip-peer delta-merge"
    else:
        _delta_rs_upsert(setup, expected, out)
    problem = delta_spark_problem(setup.spark)
    if problem:
        print(f"delta-spark: skipped ({problem})")
        out.skipped[DELTA_SPARK] = problem
    else:
        _delta_spark_upsert(setup, expected, out)
    return {
        "scenario": f"MOR upsert of {setup.keys} random keys into {setup.scale.rows:,} rows: "
        f"runner {MOR} (job s, Spark start excluded)",
        "runner_s": statistics.median(out.jobs["mor"]),
        "peers": out.peers,
        **({"peers_skipped": out.skipped} if out.skipped else {}),
        "wall_s": out.wall,
        "bytes_written": out.written,
        "touched": out.touched,
        **stage_report(out.summaries["mor"]),
        "other_stages_median": {
            "runner COPY_ON_WRITE": stage_report(out.summaries["cow"])["runner_stages_median"]
        },
        "runner_job_seconds": out.jobs,
    }


def _runner_upsert(setup: Setup, expected: Checksum, out: _Upserted, kind: str, label: str) -> None:
    """The runner's upsert into its `kind` table ("mor", "cow"), from a fresh copy each time."""
    work = setup.work
    batch_dir, _ = setup.batches[0]
    table = work / f"{kind}_upsert"
    extra = setup.mor if kind == "mor" else {}
    spec = spec_file(
        work / f"{kind}_upsert", "upsert", batch_dir, table, setup.scale.buckets, **extra
    )
    out.summaries[kind] = []
    times = setup.timed(
        lambda: fresh_copy(setup.bases[kind], table),
        lambda: run_pipeline(spec, spark=setup.spark),
        out.summaries[kind],
    )
    assert scan_checksum(table) == expected, kind
    last = out.summaries[kind][-1]
    assert last.updated == setup.keys and last.inserted == 0, (kind, last.updated, last.inserted)
    out.wall[label] = statistics.median(times)
    out.jobs[kind] = [job_seconds(s) for s in out.summaries[kind]]
    out.written[label] = last.bytes_written
    if kind == "mor":
        assert last.buckets_with_deletion_vectors > 0, "no deletion vector written"
        out.touched["runner MOR buckets given deletion vectors + a delta file"] = (
            last.buckets_with_deletion_vectors
        )
        out.touched["runner MOR buckets rewritten whole (past thresholds)"] = last.buckets_rewritten
    else:
        out.touched["runner COW buckets rewritten"] = last.buckets_touched
    shutil.rmtree(table)


def _delta_rs_upsert(setup: Setup, expected: Checksum, out: _Upserted) -> None:
    """delta-rs `merge` of the same batch into the same rows, partitioned by city."""
    work, batch = setup.work, setup.batches[0][1]
    base = work / "delta_rs_base"
    reader = parquet_dataset(setup.src).scanner(batch_size=128 * 1024).to_reader()
    write_deltalake(str(base), reader, partition_by=["city"])
    table = work / "delta_rs_upsert"
    sizes: list[int] = []
    times = setup.timed(
        lambda: fresh_copy(base, table), lambda: delta_rs_upsert(table, batch)[0], sizes
    )
    assert scan_checksum(table) == expected, "delta-rs merge"
    out.peers[DELTA_RS] = statistics.median(times)
    out.written["delta-rs merge"] = sizes[-1]
    shutil.rmtree(table)
    shutil.rmtree(base)


def _delta_spark_upsert(setup: Setup, expected: Checksum, out: _Upserted) -> None:
    """delta-spark MERGE, with deletion vectors, of the same batch into the same rows."""
    spark, work = setup.spark, setup.work
    base = work / "delta_spark_base"
    (
        spark.read.parquet(str(setup.src))
        .write.format("delta")
        .partitionBy("city")
        .option("delta.enableDeletionVectors", "true")
        .save(str(base))
    )
    table = work / "delta_spark_upsert"
    source = spark.read.parquet(str(setup.batches[0][0]))

    def delta_spark_merge() -> int:
        before = _data_files(table)
        delta_spark_upsert(spark, table, source)
        # new parquet files and deletion-vector files (Hadoop's .crc files not counted)
        return sum(s for p, s in _data_files(table).items() if p not in before)

    sizes: list[int] = []
    times = setup.timed(lambda: fresh_copy(base, table), delta_spark_merge, sizes)
    assert scan_checksum(table) == expected, "delta-spark merge"
    metrics = DeltaTable(str(table)).history(1)[0]["operationMetrics"]
    assert int(metrics["numTargetDeletionVectorsAdded"]) > 0, metrics
    out.peers[DELTA_SPARK] = statistics.median(times)
    out.written["delta-spark MERGE (DVs)"] = sizes[-1]
    out.touched["delta-spark files given deletion vectors"] = int(
        metrics["numTargetDeletionVectorsAdded"]
    )
    shutil.rmtree(table)
    shutil.rmtree(base)


def _data_files(path: Path) -> dict[str, int]:
    """Every file of a table outside _delta_log, hidden (.crc) files left out."""
    return {
        str(p.relative_to(path)): p.stat().st_size
        for p in path.rglob("*")
        if p.is_file() and "_delta_log" not in p.parts and not p.name.startswith(".")
    }
