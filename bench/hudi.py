"""Hudi itself as a bench peer: the runner beside Hudi 1.1.1 with a bucket index.

    python -m bench --only hudi [--rows 200000] [--repeats 3] [--buckets 16] [--mor-keys 100]
        [--skip-peer hudi: the runner's side alone, to compare two trees of the runner]

Hudi runs in a side environment of the bench's own (bench/hudi_env.py: pyspark 3.5 and
Hudi's Spark 3.5 bundle, made once), as one bench/hudi_job.py process for all of its
scenarios, on the same source files as the runner and with the same settings
(bench/hudi_settings.py: record key id, partition field city, precombine field ts, a BUCKET
index of --buckets buckets, the runner session's shuffle parallelism, zstd, local[2]).

Scenarios, each table checked by row count and checksums (bench.write.Checksum) on both
sides before it is reported; every timed run starts from a fresh copy of its base table:
1. bulk_insert of the whole source (Hudi's `bulk_insert` with the bucket index);
2. an upsert of K random existing keys (--mor-keys) and one of 1 % of the table (plus a
   tenth as many new keys), COPY_ON_WRITE and MERGE_ON_READ (Hudi: log files);
3. a read of the MERGE_ON_READ table after 10 upserts of K disjoint keys: Polars'
   `read_delta` of the runner's table (bench/merge_on_read.py's reader) vs Hudi's snapshot
   query, and delta-spark reading the runner's table when the session has its jars;
4. the compaction of that table: `compact_table` vs Hudi's `CALL run_compaction`.
Seconds are job seconds in a warm session on both sides: the runner's stage seconds
without "start" (compaction: the compact_table call), Hudi's measured around the write,
read or CALL by bench/hudi_job.py, its JVM start left out. Bytes written: the runner's run
summary; Hudi's, the bytes added under its table directory, data files apart from .hoodie.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.hudi_env import SideEnvironment, SideEnvironmentProblem, side_environment
from bench.hudi_settings import COMPACTION, hudi_options
from bench.merge_on_read import MOR, delta_spark_problem, job_seconds, scan_checksum
from bench.merge_on_read_reads import polars_checksum
from bench.scale import Scale
from bench.write import (
    CITIES,
    Checksum,
    checksum,
    fresh_copy,
    make_rows,
    parquet_dataset,
    spec_file,
    stage_report,
    timed,
    write_source,
)
from runner.actions.compact import compact_table
from runner.delta.snapshot import open_table
from runner.pipeline.run import run_pipeline

UPSERTS = 10  # successive merge-on-read upserts before the read and compaction scenarios
PERCENT = 0.01  # the larger upsert: 1 % of the table updated, plus a tenth as many new keys
HUDI = "Hudi 1.1.1 (job s)"
DELTA_SPARK_READ = "delta-spark read of the runner's table (Spark, s)"
JOB = Path(__file__).with_name("hudi_job.py")


@dataclass(frozen=True)
class Batch:
    """An upsert's source directory, its size and the table's checksum after it alone."""

    directory: Path
    rows: int
    expected: Checksum


@dataclass
class Measure:
    """One system's side of a scenario: seconds per timed run, result, bytes written."""

    seconds: list[float]
    checksum: Checksum
    bytes_written: int | None = None
    notes: dict = field(default_factory=dict)
    stages: dict = field(default_factory=dict)  # the runner's stage seconds, median


@dataclass(frozen=True)
class Bench:
    """What both sides share: the session, the source, the upsert batches, the settings."""

    spark: object
    work: Path
    rows: int
    repeats: int
    buckets: int
    keys: int
    warmup: bool
    src: Path
    expected: Checksum  # the source's, so the bulk-loaded table's
    small: Batch  # `keys` random existing keys: the first of the series
    percent: Batch  # 1 % of the keys, plus new ones
    series: list[Path]  # UPSERTS disjoint `keys`-key batches, upserted in turn
    after_series: Checksum


def run_hudi_benchmarks(spark, work: Path, scale: Scale, keys: int = 100) -> list[dict]:
    """The runner beside Hudi: bulk_insert, upserts (copy-on-write and merge-on-read), a read
    after UPSERTS merge-on-read upserts and their compaction; every result checked."""
    if UPSERTS * keys > scale.rows:
        raise ValueError(f"--mor-keys {keys} x {UPSERTS} upserts needs at least that many rows")
    if "hudi" in scale.skip:  # the runner's side alone, checked: an A/B between two trees
        bench = _prepare(spark, work, scale, keys)
        return _results(bench, _runner_side(bench), None)
    try:
        env = side_environment()
    except SideEnvironmentProblem as exc:
        raise SystemExit(f"hudi: the side environment cannot be made: {exc}") from exc
    bench = _prepare(spark, work, scale, keys)
    runner = _runner_side(bench)
    print(f"hudi: Hudi's side, pyspark {env.pyspark} (log: {work / 'hudi_job.log'})", flush=True)
    (work / "hudi").mkdir()
    hudi = run_hudi_job(_hudi_plan(bench, env), env, work)
    return _results(bench, runner, hudi)


def _prepare(spark, work: Path, scale: Scale, keys: int) -> Bench:
    """The source table and the upsert batches, written once for both sides."""
    rows = scale.rows
    work.mkdir(parents=True, exist_ok=True)
    src = work / "src"
    expected = write_source(src, rows, seed=21)
    rng = np.random.default_rng(22)
    key_sets = rng.choice(rows, UPSERTS * keys, replace=False).reshape(UPSERTS, keys)
    series = [make_rows(0, seed=(23, i), ids=ids, ts=2 + i) for i, ids in enumerate(key_sets)]
    n = max(1, round(rows * PERCENT))
    new_keys = rows + np.arange(n // 10, dtype=np.int64)
    percent = make_rows(
        0, seed=24, ids=np.concatenate([rng.choice(rows, n, replace=False), new_keys])
    )

    def batch(name: str, table: pa.Table) -> Batch:
        directory = work / name
        directory.mkdir()
        pq.write_table(table, directory / "part-0.parquet")
        stored = checksum(parquet_dataset(src), pc.field("id").isin(table["id"]))
        return Batch(directory, table.num_rows, expected - stored + checksum(table))

    series_batches = [batch(f"series_{i}", t) for i, t in enumerate(series)]
    replaced = checksum(parquet_dataset(src), pc.field("id").isin(pa.array(key_sets.ravel())))
    return Bench(
        spark=spark,
        work=work,
        rows=rows,
        repeats=scale.repeats,
        buckets=scale.buckets,
        keys=keys,
        warmup=scale.warmup,
        src=src,
        expected=expected,
        small=series_batches[0],
        percent=batch("percent", percent),
        series=[b.directory for b in series_batches],
        after_series=sum((checksum(t) for t in series), expected - replaced),
    )


def _spec(bench: Bench, name: str, operation: str, source: Path, table: Path, kind: str):
    extra = {"table_type": MOR} if kind == "mor" else {}
    return spec_file(bench.work / name, operation, source, table, bench.buckets, **extra)


def _runner_side(bench: Bench) -> dict[str, Measure]:
    """The runner's measures, by scenario, in the bench's warm session."""
    spark, work = bench.spark, bench.work
    bases = {"cow": work / "runner_cow_base", "mor": work / "runner_mor_base"}
    load = _spec(bench, "hudi_bulk", "bulk_insert", bench.src, bases["cow"], "cow")
    summaries: list = []
    timed(
        bench.repeats,
        lambda: shutil.rmtree(bases["cow"], ignore_errors=True),
        lambda: run_pipeline(load, spark=spark),
        summaries,
        bench.warmup,
    )
    out = {
        "bulk_insert": Measure(
            [job_seconds(s) for s in summaries],
            scan_checksum(bases["cow"]),
            summaries[-1].bytes_written,
            stages=stage_report(summaries)["runner_stages_median"],
        )
    }
    mor_load = _spec(bench, "hudi_mor_bulk", "bulk_insert", bench.src, bases["mor"], "mor")
    run_pipeline(mor_load, spark=spark)
    for kind in ("cow", "mor"):
        for size, batch in (("small", bench.small), ("percent", bench.percent)):
            out[f"{kind}_{size}"] = _runner_upsert(bench, kind, bases[kind], batch, size)
    out.update(_runner_series(bench, bases["mor"]))
    return out


def _runner_upsert(bench: Bench, kind: str, base: Path, batch: Batch, size: str) -> Measure:
    """An upsert of `batch` into fresh copies of `base`, timed as job seconds."""
    table = bench.work / f"runner_{kind}_{size}"
    spec = _spec(bench, f"hudi_{kind}_{size}", "upsert", batch.directory, table, kind)
    summaries: list = []
    timed(
        bench.repeats,
        lambda: fresh_copy(base, table),
        lambda: run_pipeline(spec, spark=bench.spark),
        summaries,
        bench.warmup,
    )
    last = summaries[-1]
    notes = {"buckets touched": last.buckets_touched}
    if kind == "mor":
        notes["buckets given deletion vectors + a delta file"] = last.buckets_with_deletion_vectors
        notes["buckets rewritten whole (past thresholds)"] = last.buckets_rewritten
    measure = Measure(
        [job_seconds(s) for s in summaries],
        scan_checksum(table),
        last.bytes_written,
        notes,
        stage_report(summaries)["runner_stages_median"],
    )
    shutil.rmtree(table)
    return measure


def _runner_series(bench: Bench, base: Path) -> dict[str, Measure]:
    """UPSERTS merge-on-read upserts (each timed once), then reads of the table and its
    compaction from fresh copies: the measures "series", "read", "read_spark", "compact"."""
    spark, work = bench.spark, bench.work
    unfolded, compacted = work / "runner_mor_unfolded", work / "runner_mor_compacted"
    fresh_copy(base, unfolded)
    seconds, rewritten, written = [], 0, 0
    for i, directory in enumerate(bench.series):
        spec = _spec(bench, f"hudi_series_{i}", "upsert", directory, unfolded, "mor")
        summary = run_pipeline(spec, spark=spark)
        seconds.append(job_seconds(summary))
        rewritten += summary.buckets_rewritten
        written += summary.bytes_written
    files = open_table(str(unfolded)).files()
    out = {
        "series": Measure(
            seconds,
            scan_checksum(unfolded),
            written,
            {"rewritten": rewritten, "files": len(files)},
        )
    }
    reads: list = []
    t_read = timed(
        bench.repeats, lambda: None, lambda: polars_checksum(unfolded), reads, bench.warmup
    )
    out["read"] = Measure(t_read, reads[-1])
    if delta_spark_problem(spark) is None:  # Spark reading the runner's table, as Hudi's
        reads = []
        frame = lambda: spark.read.format("delta").load(str(unfolded))  # noqa: E731
        t_read = timed(
            bench.repeats, lambda: None, lambda: spark_checksum(frame()), reads, bench.warmup
        )
        out["read_spark"] = Measure(t_read, reads[-1])
    spec = _spec(bench, "hudi_compact", "upsert", bench.series[0], compacted, "mor")
    summaries: list = []
    t_compact = timed(
        bench.repeats,
        lambda: fresh_copy(unfolded, compacted),
        lambda: compact_table(spec, spark=spark),
        summaries,
        bench.warmup,
    )
    last = summaries[-1]
    out["compact"] = Measure(
        t_compact,
        scan_checksum(compacted),
        last.bytes_written,
        {"buckets folded": last.buckets, "files read": last.files_read},
    )
    for path in (unfolded, compacted):
        shutil.rmtree(path)
    return out


def spark_checksum(frame) -> Checksum:
    """The checksum computed by Spark, as bench/hudi_job.py computes Hudi's."""
    from pyspark.sql import functions as F

    cents = F.bround(F.col("amount") * 100).cast("long")
    row = frame.agg(F.count(F.lit(1)), F.sum("id"), F.sum(cents)).collect()[0]
    return Checksum(int(row[0]), int(row[1] or 0), int(row[2] or 0))


def _hudi_plan(bench: Bench, env: SideEnvironment) -> dict:
    """bench/hudi_job.py's steps: the same scenarios on the same files, in Hudi's tables."""
    spark, hudi = bench.spark, bench.work / "hudi"
    parallelism = int(spark.conf.get("spark.sql.shuffle.partitions") or "8")
    conf = {"spark.sql.shuffle.partitions": str(parallelism), "spark.sql.session.timeZone": "UTC"}
    memory = spark.sparkContext.getConf().get("spark.driver.memory", None)
    if memory:  # the same heap as the runner's session
        conf["spark.driver.memory"] = memory
    types = {"cow": "COPY_ON_WRITE", "mor": MOR}
    steps: list[dict] = [
        {"op": "bulk_insert", "name": "bulk_insert", "table_type": types["cow"]},
        {"op": "bulk_insert", "name": "mor_base", "table_type": types["mor"], "once": True},
    ]
    for step in steps:
        step.update(source=str(bench.src), table=str(hudi / step["name"]))
    for kind, size in itertools.product(("cow", "mor"), ("small", "percent")):
        source = (bench.small if size == "small" else bench.percent).directory
        base = hudi / ("bulk_insert" if kind == "cow" else "mor_base")
        name = f"{kind}_{size}"
        steps.append(
            {"op": "upsert", "name": name, "table_type": types[kind], "source": str(source),
             "base": str(base), "table": str(hudi / name)}
        )  # fmt: skip
    unfolded = str(hudi / "series")
    steps += [
        {"op": "upserts", "name": "series", "table_type": MOR, "base": str(hudi / "mor_base"),
         "sources": [str(d) for d in bench.series], "table": unfolded},
        {"op": "read", "name": "read", "table": unfolded},
        {"op": "compact", "name": "compact", "base": unfolded, "table": str(hudi / "compacted"),
         "compaction_options": COMPACTION},
    ]  # fmt: skip
    return {
        "jar": str(env.jar),
        "events": str(bench.work / "hudi_events"),  # Spark's event log: Hudi's time by job
        "master": "local[2]",  # the bench's own session's
        "conf": conf,
        "options": hudi_options(bench.buckets, parallelism),
        "repeats": bench.repeats,
        "warmup": bench.warmup,
        "steps": steps,
    }


def run_hudi_job(plan: dict, env: SideEnvironment, work: Path) -> dict:
    """bench/hudi_job.py run on `plan` by the side environment's Python, in `work` (its log:
    work/hudi_job.log); its JSON answer."""
    # nothing of the runner's Spark 4 may leak in: its pyspark, SPARK_HOME, worker Python
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_") and k != "SPARK_HOME"
    }
    environ["PYSPARK_PYTHON"] = str(env.python)
    log = work / "hudi_job.log"
    with log.open("w") as stderr:
        done = subprocess.run(
            [str(env.python), "-I", str(JOB)],
            input=json.dumps(plan),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=environ,
            cwd=work,
        )
    if done.returncode:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise RuntimeError(f"bench/hudi_job.py exited {done.returncode}:\n{tail}")
    # the last line: Hudi's bundled JOL may print warnings on stdout before it
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "options": plan["options"]}


def _results(bench: Bench, runner: dict[str, Measure], hudi: dict | None) -> list[dict]:
    """One result per scenario, each side's table checked against the expected checksum
    (`hudi` None: the runner's side alone, --skip-peer hudi)."""
    steps, rows = hudi["steps"] if hudi else {}, bench.rows
    notes = []
    if hudi:
        start = f"Hudi's session start {hudi['session_start_s']:.1f} s (pyspark {hudi['spark']})"
        notes = [
            f"{start}, left out like the runner's",
            "Hudi's data bytes: each bulk_insert file holds a ~431 KB bloom filter (its "
            "row writer ignores hoodie.parquet.bloom.filter.enabled=false in 1.1.1)",
        ]
    results = [
        _row(
            f"bulk_insert {rows:,} rows, {bench.buckets} buckets x {len(CITIES)} partitions",
            runner["bulk_insert"],
            steps.get("bulk_insert"),
            bench.expected,
            notes,
        )
    ]
    if hudi:
        results[0]["hudi_options"] = hudi["options"]
    for kind, label in (("cow", "COPY_ON_WRITE"), ("mor", MOR)):
        for size, batch in (("small", bench.small), ("percent", bench.percent)):
            what = f"{bench.keys} random keys" if size == "small" else "1 % updates + new keys"
            results.append(
                _row(
                    f"{label} upsert of {batch.rows:,} rows ({what}) into {rows:,}",
                    runner[f"{kind}_{size}"],
                    steps.get(f"{kind}_{size}"),
                    batch.expected,
                )
            )
    return results + _read_and_compact(bench, runner, steps)


def _read_and_compact(bench: Bench, runner: dict[str, Measure], steps: dict) -> list[dict]:
    """The read and compaction scenarios, after the series of merge-on-read upserts
    (`steps` empty: Hudi skipped)."""
    series, hudi_series, expected = runner["series"], steps.get("series"), bench.after_series
    _check("the series of upserts", series.checksum, hudi_series, expected)
    median = statistics.median
    notes = [
        f"runner: {series.notes['files']} files, {series.notes['rewritten']} bucket rewrites "
        f"past thresholds",
        f"the {UPSERTS} upserts, job s median: runner {median(series.seconds):.2f}",
    ]
    if hudi_series:
        notes = [
            f"{notes[0]}; Hudi: {hudi_series['files']['log']} log files",
            f"{notes[1]}, Hudi {median(hudi_series['seconds']):.2f}",
            *_hudi_jobs(hudi_series, f"Hudi s by Spark job, the {UPSERTS} upserts"),
        ]
    read = _row(
        f"{MOR} read after {UPSERTS} upserts of {bench.keys} keys: polars read_delta "
        "(runner's table) vs Hudi snapshot query, count + 2 sums",
        runner["read"],
        steps.get("read"),
        expected,
        notes,
    )
    if "read_spark" in runner:
        seconds = median(runner["read_spark"].seconds)
        _check("delta-spark read", runner["read_spark"].checksum, steps.get("read"), expected)
        read["peers"][DELTA_SPARK_READ] = seconds
        if "hudi_s" in read:
            read["notes"].append(
                f"delta-spark / Hudi (both Spark reads): {seconds / read['hudi_s']:.2f}"
            )
    compact, hudi_compact = runner["compact"], steps.get("compact")
    label = f"{MOR} compaction after {UPSERTS} upserts: compact_table vs Hudi run_compaction"
    if hudi_compact is None:
        return [read, _row(label, compact, None, expected)]
    _check(
        "Hudi read_optimized",
        compact.checksum,
        {"checksum": hudi_compact["read_optimized_checksum"]},
        expected,
    )
    done = hudi_compact["compactions"]
    assert done and all(state == "COMPLETED" for _, _, state in done), done
    folded = f"Hudi: {sum(size for _, size, _ in done)} file groups compacted"
    return [read, _row(label, compact, hudi_compact, expected, [folded])]


def _check(what: str, runner: Checksum, hudi: dict | None, expected: Checksum) -> None:
    """Both sides' tables checked (Hudi's when it ran: `hudi` None when skipped)."""
    assert runner == expected, (what, "runner", runner, expected)
    if hudi is not None:
        assert Checksum(*hudi["checksum"]) == expected, (what, "Hudi", hudi["checksum"], expected)


def _row(label: str, runner: Measure, hudi: dict | None, expected: Checksum, notes=()) -> dict:
    """A result: both sides checked, their median job seconds and the ratio runner / Hudi
    (`hudi` None: the runner's side alone)."""
    _check(label, runner.checksum, hudi, expected)
    runner_s = statistics.median(runner.seconds)
    row = {
        "scenario": label,
        "runner_s": runner_s,
        "peers": {},
        **({"bytes_written": {"runner": runner.bytes_written}} if runner.bytes_written else {}),
        "touched": {f"runner {k}": v for k, v in runner.notes.items()},
        "notes": list(notes),
        **({"runner_stages_median": runner.stages} if runner.stages else {}),
        "runner_job_seconds": runner.seconds,
    }
    if hudi is None:
        return {**row, "peers_skipped": {HUDI: "--skip-peer hudi"}}
    hudi_s = statistics.median(hudi["seconds"])
    if runner.bytes_written is not None:
        row["bytes_written"] = {
            "runner": runner.bytes_written,
            "Hudi data files": hudi["bytes_data"],
            "Hudi .hoodie (timeline, metadata table) and .crc": hudi["bytes_meta"],
        }
    return {
        **row,
        "hudi_s": hudi_s,
        "runner_over_hudi": round(runner_s / hudi_s, 3),
        "peers": {HUDI: hudi_s},
        "notes": [f"runner / Hudi: {runner_s / hudi_s:.2f}", *_hudi_jobs(hudi), *notes],
        "hudi_job_seconds": hudi["seconds"],
        **({"hudi_spark_jobs": hudi["spark_jobs"]} if "spark_jobs" in hudi else {}),
        **({"hudi_files": hudi["files"]} if "files" in hudi else {}),
    }


def _hudi_jobs(hudi: dict, what: str = "Hudi s by Spark job (last run)") -> list[str]:
    """Where Hudi's seconds went, from its Spark event log."""
    if "spark_jobs" not in hudi:
        return []
    return [f"{what}: " + ", ".join(f"{k} {v:.2f}" for k, v in hudi["spark_jobs"].items())]
