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
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession

from bench.write import (
    Checksum,
    checksum,
    delta_rs_upsert,
    dir_bytes,
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
from runner.services.compact import compact_table, plan_compaction

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
    rows: int,
    repeats: int,
    buckets: int,
    keys: int = 100,
    warmup: bool = True,
    skip: Iterable[str] = (),
    upserts: int = UPSERTS,
    max_delta_files: int | None = None,
) -> list[dict]:
    """The merge-on-read scenarios; `skip` may hold "delta-merge" (bench.write.PEERS);
    `upserts` successive upserts precede the read and compaction scenarios."""
    if upserts * keys > rows:
        raise ValueError(f"--mor-keys {keys} x {upserts} upserts needs at least that many rows")
    work.mkdir(parents=True, exist_ok=True)
    src = work / "mor_src"
    expected = write_source(src, rows, seed=11)

    # the base tables, loaded once: each timed upsert starts from a copy of one
    bases = {"mor": work / "mor_base", "cow": work / "cow_base"}
    for kind, path in bases.items():
        extra = setup_mor(max_delta_files) if kind == "mor" else {}
        load = spec_file(work, f"{kind}_load", "bulk_insert", src, path, buckets, **extra)
        run_pipeline(load, spark=spark)
        assert scan_checksum(path) == expected, kind
    table_buckets = len(open_table(str(bases["mor"])).files())

    # K x upserts distinct existing keys at random: batch i updates key_sets[i]
    rng = np.random.default_rng(12)
    key_sets = rng.choice(rows, upserts * keys, replace=False).reshape(upserts, keys)
    batches = []
    for i, ids in enumerate(key_sets):
        batch = make_rows(0, seed=(13, i), ids=ids, ts=2 + i)
        directory = work / f"mor_batch_{i}"
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir()
        pq.write_table(batch, directory / "part-0.parquet")
        batches.append((directory, batch))

    def after(n: int) -> Checksum:
        """The table's checksum after the first n upserts (their keys are disjoint)."""
        replaced = checksum(
            parquet_dataset(src), pc.field("id").isin(pa.array(key_sets[:n].ravel()))
        )
        return sum((checksum(b) for _, b in batches[:n]), expected - replaced)

    setup = Setup(
        spark=spark,
        work=work,
        src=src,
        bases=bases,
        batches=batches,
        rows=rows,
        keys=keys,
        buckets=buckets,
        table_buckets=table_buckets,
        repeats=repeats,
        warmup=warmup,
        skip=frozenset(skip),
        mor=setup_mor(max_delta_files),
    )
    return [_one_upsert(setup, after(1)), *_read_and_compact(setup, after(upserts))]


@dataclass(frozen=True)
class Setup:
    """What the scenarios share: the session, the source, base tables and upsert batches."""

    spark: object
    work: Path
    src: Path
    bases: dict[str, Path]  # "mor", "cow": the bulk-loaded runner tables
    batches: list[tuple[Path, pa.Table]]  # each upsert's source directory and rows
    rows: int
    keys: int
    buckets: int
    table_buckets: int  # buckets (partition x bucket) in the loaded table
    repeats: int
    warmup: bool
    skip: frozenset[str]
    mor: dict  # the target keys of the MERGE_ON_READ table (table_type, compaction)


def _one_upsert(setup: Setup, expected: Checksum) -> dict:
    """Scenario 1: the first batch upserted into each system's copy of the base table."""
    spark, work, src, bases = setup.spark, setup.work, setup.src, setup.bases
    keys, buckets, repeats, warmup = setup.keys, setup.buckets, setup.repeats, setup.warmup
    batch_dir, batch = setup.batches[0]
    written: dict[str, int] = {}
    touched: dict[str, int] = {}
    wall: dict[str, float] = {}
    peers: dict[str, float] = {}
    skipped: dict[str, str] = {}
    jobs: dict[str, list[float]] = {}
    summaries: dict[str, list] = {}

    for kind, label in (("mor", f"runner {MOR}"), ("cow", "runner COPY_ON_WRITE")):
        table = work / f"{kind}_upsert"
        extra = setup.mor if kind == "mor" else {}
        spec = spec_file(work, f"{kind}_upsert", "upsert", batch_dir, table, buckets, **extra)
        summaries[kind] = []
        times = timed(
            repeats,
            lambda k=kind, t=table: fresh_copy(bases[k], t),
            lambda s=spec: run_pipeline(s, spark=spark),
            summaries[kind],
            warmup,
        )
        assert scan_checksum(table) == expected, kind
        last = summaries[kind][-1]
        assert last.updated == keys and last.inserted == 0, (kind, last.updated, last.inserted)
        wall[label] = statistics.median(times)
        jobs[kind] = [job_seconds(s) for s in summaries[kind]]
        written[label] = last.bytes_written
        if kind == "mor":
            assert last.buckets_with_deletion_vectors > 0, "no deletion vector written"
            touched["runner MOR buckets given deletion vectors + a delta file"] = (
                last.buckets_with_deletion_vectors
            )
            touched["runner MOR buckets rewritten whole (past thresholds)"] = last.buckets_rewritten
        else:
            touched["runner COW buckets rewritten"] = last.buckets_touched
        shutil.rmtree(table)
    touched["buckets in the table"] = setup.table_buckets
    peers[COW] = statistics.median(jobs["cow"])

    if "delta-merge" in setup.skip:
        skipped[DELTA_RS] = "--skip-peer delta-merge"
    else:
        base = work / "delta_rs_base"
        reader = parquet_dataset(src).scanner(batch_size=128 * 1024).to_reader()
        write_deltalake(str(base), reader, partition_by=["city"])
        table = work / "delta_rs_upsert"

        def delta_rs_merge() -> int:
            return delta_rs_upsert(table, batch)[0]

        sizes: list[int] = []
        times = timed(repeats, lambda: fresh_copy(base, table), delta_rs_merge, sizes, warmup)
        assert scan_checksum(table) == expected, "delta-rs merge"
        peers[DELTA_RS] = statistics.median(times)
        written["delta-rs merge"] = sizes[-1]
        shutil.rmtree(table)
        shutil.rmtree(base)

    problem = delta_spark_problem(spark)
    if problem:
        print(f"delta-spark: skipped ({problem})")
        skipped[DELTA_SPARK] = problem
    else:
        base = work / "delta_spark_base"
        (
            spark.read.parquet(str(src))
            .write.format("delta")
            .partitionBy("city")
            .option("delta.enableDeletionVectors", "true")
            .save(str(base))
        )
        table = work / "delta_spark_upsert"
        source = spark.read.parquet(str(batch_dir))

        def delta_spark_merge() -> int:
            before = _data_files(table)
            delta_spark_upsert(spark, table, source)
            # new parquet files and deletion-vector files (Hadoop's .crc files not counted)
            return sum(s for p, s in _data_files(table).items() if p not in before)

        sizes = []
        times = timed(repeats, lambda: fresh_copy(base, table), delta_spark_merge, sizes, warmup)
        assert scan_checksum(table) == expected, "delta-spark merge"
        metrics = DeltaTable(str(table)).history(1)[0]["operationMetrics"]
        assert int(metrics["numTargetDeletionVectorsAdded"]) > 0, metrics
        peers[DELTA_SPARK] = statistics.median(times)
        written["delta-spark MERGE (DVs)"] = sizes[-1]
        touched["delta-spark files given deletion vectors"] = int(
            metrics["numTargetDeletionVectorsAdded"]
        )
        shutil.rmtree(table)
        shutil.rmtree(base)

    report = stage_report(summaries["mor"])
    return {
        "scenario": f"MOR upsert of {keys} random keys into {setup.rows:,} rows: runner {MOR} "
        "(job s, Spark start excluded)",
        "runner_s": statistics.median(jobs["mor"]),
        "peers": peers,
        **({"peers_skipped": skipped} if skipped else {}),
        "wall_s": wall,
        "bytes_written": written,
        "touched": touched,
        **report,
        "other_stages_median": {
            "runner COPY_ON_WRITE": stage_report(summaries["cow"])["runner_stages_median"]
        },
        "runner_job_seconds": jobs,
    }


def _read_and_compact(setup: Setup, expected: Checksum) -> list[dict]:
    """Scenarios 2 and 3: reads of the table after every upsert batch, and its compaction."""
    spark, work, batches, buckets = setup.spark, setup.work, setup.batches, setup.buckets
    keys, repeats, warmup = setup.keys, setup.repeats, setup.warmup
    # 2. the successive upserts (untimed here: scenario 1 times one), then full reads
    unfolded = work / "mor_unfolded"
    fresh_copy(setup.bases["mor"], unfolded)
    upsert_jobs, rewritten = [], 0
    for i, (batch_dir, _) in enumerate(batches):
        spec = spec_file(
            work, f"mor_upsert_{i}", "upsert", batch_dir, unfolded, buckets, **setup.mor
        )
        summary = run_pipeline(spec, spark=spark)
        upsert_jobs.append(job_seconds(summary))
        rewritten += summary.buckets_rewritten
    files = open_table(str(unfolded)).files()
    n_files = len(files)
    with_dv = sum(1 for f in files if f.deletion_vector is not None)
    deleted = sum(f.deleted_records for f in files)
    table_buckets = len({(f.partition_path, f.bucket) for f in files})

    def polars_read(path: Path) -> Checksum:
        frame = pl.read_delta(str(path))
        cents = (frame["amount"] * 100).round().cast(pl.Int64).sum()
        return Checksum(frame.height, int(frame["id"].sum()), int(cents))

    reads: dict[str, list] = {"unfolded": [], "compacted": []}
    t_unfolded = timed(
        repeats, lambda: None, lambda: polars_read(unfolded), reads["unfolded"], warmup
    )
    assert all(r == expected for r in reads["unfolded"]), (reads["unfolded"][-1], expected)

    # 3. compaction of that table, from a fresh copy each time, beside a pyarrow rewrite
    compacted = work / "mor_compacted"
    compact_spec = spec_file(
        work, "mor_compact", "upsert", batches[0][0], compacted, buckets, **setup.mor
    )
    summaries: list = []
    t_compact = timed(
        repeats,
        lambda: fresh_copy(unfolded, compacted),
        lambda: compact_table(compact_spec, spark=spark),
        summaries,
        warmup,
    )
    assert scan_checksum(compacted) == expected, "compact_table"
    after = open_table(str(compacted)).files()
    assert len(after) == table_buckets and not any(f.deletion_vector for f in after)
    compact = summaries[-1]
    compact_seconds = statistics.median(s.seconds for s in summaries)

    # the files compaction reads: those of every bucket with several files or deleted rows
    folded = [f for b in plan_compaction(open_table(str(unfolded))) for f in b.files]
    assert len(folded) == compact.files_read, (len(folded), compact.files_read)
    live = [str(unfolded / f.path) for f in folded]
    stored = checksum(ds.dataset(live, format="parquet"))  # deleted rows included
    copy_dir = work / "mor_copy"

    def copy_files() -> None:
        def one(i_path: tuple[int, str]) -> None:
            i, path = i_path
            pq.write_table(pq.read_table(path), copy_dir / f"{i}.parquet", compression="zstd")

        with ThreadPoolExecutor(max_workers=2) as pool:  # the 2 task slots of local[2]
            list(pool.map(one, enumerate(live)))

    t_copy = timed(
        repeats,
        lambda: (shutil.rmtree(copy_dir, ignore_errors=True), copy_dir.mkdir()),
        copy_files,
        warmup=warmup,
    )
    assert checksum(parquet_dataset(copy_dir)) == stored, "pyarrow copy"
    copy_bytes = dir_bytes(copy_dir)

    t_compacted = timed(
        repeats, lambda: None, lambda: polars_read(compacted), reads["compacted"], warmup
    )
    assert all(r == expected for r in reads["compacted"]), (reads["compacted"][-1], expected)
    unfolded_s, compacted_s = statistics.median(t_unfolded), statistics.median(t_compacted)
    for path in (unfolded, compacted, copy_dir):
        shutil.rmtree(path)
    state = (
        f"{n_files} files in {table_buckets} buckets, {with_dv} with deletion vectors, "
        f"{deleted:,} deleted rows"
    )
    return [
        {
            "scenario": f"MOR read: polars read_delta (all columns, count + 2 sums) after "
            f"{len(batches)} upserts of {keys} keys ({state})",
            "runner_s": unfolded_s,
            "peers": {"same read after compact_table (1 file per bucket)": compacted_s},
            "notes": [
                f"unfolded / compacted read time: {unfolded_s / compacted_s:.2f}x",
                f"the {len(batches)} upserts: job s median {statistics.median(upsert_jobs):.2f}, "
                f"max {max(upsert_jobs):.2f}; {rewritten} bucket rewrites past the default "
                "thresholds",
            ],
            "touched": {
                "files": n_files,
                "files with deletion vectors": with_dv,
                "deleted rows": deleted,
            },
        },
        {
            "scenario": f"MOR compact_table after {len(batches)} upserts ({state}): "
            f"{compact.buckets} buckets, {compact.files_read} files folded",
            "runner_s": statistics.median(t_compact),
            "peers": {
                f"pyarrow read + write zstd of the same {len(live)} files (2 threads, Arrow "
                f"CPU pool {pa.cpu_count()})": statistics.median(t_copy)
            },
            "bytes_written": {"runner compact": compact.bytes_written, "pyarrow copy": copy_bytes},
            "notes": [
                f"CompactSummary.seconds median {compact_seconds:.2f}; "
                f"{compact.rows:,} live rows kept, {compact.deleted_rows:,} deleted rows dropped; "
                f"the pyarrow copy keeps the deleted rows and does not sort",
            ],
        },
    ]


def _data_files(path: Path) -> dict[str, int]:
    """Every file of a table outside _delta_log, hidden (.crc) files left out."""
    return {
        str(p.relative_to(path)): p.stat().st_size
        for p in path.rglob("*")
        if p.is_file() and "_delta_log" not in p.parts and not p.name.startswith(".")
    }
