"""Change data feed benchmarks: what target.change_data_feed costs an upsert, and what a
replayed batch writes with target.skip_unchanged.

    python -m bench --only change-feed [--rows 1000000] [--repeats 3] [--buckets 16]

Scenarios, per table type (COPY_ON_WRITE, MERGE_ON_READ), each result checked before it is
reported; every timed run starts from a fresh copy of its base table (copied untimed):
1. an upsert updating 1 % of the keys, drawn at random over the R-row table, as a whole
   `python -m runner SPEC` process (JVM start included, as a user runs it), into a table
   loaded with change_data_feed false and into one loaded with it true: time, bytes written
   (new data files, _change_data files, deletion vectors) and the change feed's overhead;
2. beside it, delta-spark MERGE (its Scala API, MergeIntoCommand like SQL's MERGE INTO) of
   the same rows into a delta-spark table of the same rows with and without
   delta.enableChangeDataFeed, deletion vectors on for the MERGE_ON_READ comparison. It runs
   in the bench's Spark session (already up), so its time is the merge call's; compare it
   with the runner's job seconds (its stages without "start"). Needs delta-spark's jars
   (bench/__main__.py asks tests/delta_spark.py for them); `--skip-peer delta-merge` skips it;
3. a replay: the same batch run again against the change-feed table it was just applied to,
   with skip_unchanged true and false: time, bytes written, files the commits added.

Checks: the table's rows (row count, id and amount sums, deletion vectors applied) after
every run; the summary's updated (and unchanged) counts; the change feed of the run's new
versions, read with delta-spark readChangeFeed (or delta-rs load_cdf without delta-spark),
holds exactly an update_preimage and an update_postimage per updated key, whose rows sum to
the stored and the batch's rows (a replay with skip_unchanged: an empty feed). A runner that
does not keep the feed yet (no delta.enableChangeDataFeed on the table after the run) or
does not skip unchanged rows yet (no `unchanged` in its summary) gets its check skipped with
a note in the report, not a failure.

Bytes written are the sizes of the files that were not in the table before the run,
_delta_log and Hadoop's hidden .crc files left out; files added are the add and cdc actions
of the run's new commits. The runner's base tables are loaded in the bench's session
(untimed); that JVM stays up, idle, while the runner processes run beside it.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from bench.change_feed_checks import check_feed
from bench.merge_on_read import delta_spark_problem, delta_spark_upsert, scan_checksum
from bench.scale import Scale
from bench.write import (
    Checksum,
    checksum,
    fresh_copy,
    make_rows,
    parquet_dataset,
    percent,
    runner_process,
    spec_file,
    write_source,
)
from runner.pipeline.run import run_pipeline

TABLE_TYPES = ("COPY_ON_WRITE", "MERGE_ON_READ")
FRACTION = 0.01  # of the keys, updated by the upsert
CDF = "delta.enableChangeDataFeed"
RUNNER = "runner (whole process)"
DELTA_SPARK = "delta-spark MERGE (in-process)"


@dataclass(frozen=True)
class Written:
    """Bytes of the files a run added, by kind."""

    data: int = 0
    change_data: int = 0
    deletion_vectors: int = 0

    @property
    def total(self) -> int:
        return self.data + self.change_data + self.deletion_vectors


@dataclass(frozen=True)
class Run:
    """One timed run: wall seconds (the runner's whole process, delta-spark's merge call),
    the runner's job seconds, what it wrote and which versions it committed."""

    seconds: float
    written: Written
    adds: int  # add actions in the new commits
    cdcs: int  # cdc actions in the new commits
    versions: tuple[int, int] | None  # the first and last new version; None: no commit
    job_seconds: float | None = None
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Setup:
    """What the scenarios share: the session, the source, the batch and its expectations."""

    spark: Any
    work: Path
    src: Path  # the R rows, parquet
    batch_dir: Path  # the batch, one parquet file
    rows: int
    keys: int  # keys the batch updates
    buckets: int
    repeats: int
    warmup: bool
    base: Checksum  # the loaded table
    after: Checksum  # the table after the batch
    stored: Checksum  # the stored rows of the batch's keys: the feed's preimages
    batch: Checksum  # the batch's rows: the feed's postimages


def run_change_feed_benchmarks(
    spark, work: Path, scale: Scale, table_types: Iterable[str] = TABLE_TYPES
) -> list[dict]:
    """The change-feed scenarios, two results per table type (the upsert, the replay);
    `scale.skip` may hold "delta-merge" (bench.write.PEERS): no delta-spark peer."""
    work.mkdir(parents=True, exist_ok=True)
    setup = _setup(spark, work, scale)
    peer_problem = (
        "--skip-peer delta-merge" if "delta-merge" in scale.skip else delta_spark_problem(spark)
    )
    results = []
    for table_type in table_types:
        upsert, applied = _upserts(setup, table_type, peer_problem)
        results += [upsert, _replays(setup, table_type, applied)]
        shutil.rmtree(applied)
    return results


def _setup(spark, work: Path, scale: Scale) -> Setup:
    rows = scale.rows
    src = work / "src"
    expected = write_source(src, rows, seed=31)
    keys = max(1, round(rows * FRACTION))
    ids = np.random.default_rng(32).choice(rows, keys, replace=False)  # spread over the table
    batch = make_rows(0, seed=33, ids=ids, ts=2)
    batch_dir = work / "batch"
    batch_dir.mkdir()
    pq.write_table(batch, batch_dir / "part-0.parquet")
    stored = checksum(parquet_dataset(src), pc.field("id").isin(batch["id"]))
    assert stored.rows == keys, (stored, keys)
    return Setup(
        spark=spark,
        work=work,
        src=src,
        batch_dir=batch_dir,
        rows=rows,
        keys=keys,
        buckets=scale.buckets,
        repeats=scale.repeats,
        warmup=scale.warmup,
        base=expected,
        after=expected - stored + checksum(batch),
        stored=stored,
        batch=checksum(batch),
    )


def _upserts(setup: Setup, table_type: str, peer_problem: str | None) -> tuple[dict, Path]:
    """Scenarios 1 and 2 for one table type; returns the result and the change-feed table
    the batch was applied to (for the replay)."""
    work = setup.work
    lines, notes = [], []
    applied = work / f"applied-{table_type}"
    for cdf in (False, True):
        base = work / f"base-{table_type}-{cdf}"
        extra = {"table_type": table_type, "change_data_feed": cdf}
        load = spec_file(work / "load", "bulk_insert", setup.src, base, setup.buckets, **extra)
        run_pipeline(load, spark=setup.spark)
        assert scan_checksum(base) == setup.base, "base table"
        table = work / f"upsert-{table_type}"
        spec_file(work / "upsert", "upsert", setup.batch_dir, table, setup.buckets, **extra)
        runs = _measure(setup, lambda b=base, t=table: fresh_copy(b, t), _runner(work, table))
        check, note = _check_upsert(setup, table, runs[-1], cdf)
        notes += [note] if note else []
        lines.append(_line(table_type, RUNNER, cdf, None, runs, check))
        if cdf:
            table.rename(applied)
        else:
            shutil.rmtree(table)
        shutil.rmtree(base)
    if peer_problem:
        print(f"delta-spark: skipped ({peer_problem})")
    else:
        lines += [_delta_spark(setup, table_type, cdf) for cdf in (False, True)]
    return _upsert_result(setup, table_type, lines, notes, peer_problem), applied


def _measure(setup: Setup, prepare: Callable[[], None], run: Callable[[], Run]) -> list[Run]:
    """`repeats` runs, each after `prepare` (untimed), after one untimed warm-up run unless
    the setup says not."""
    if setup.warmup:
        prepare()
        run()
    runs = []
    for _ in range(setup.repeats):
        prepare()
        runs.append(run())
    return runs


def _runner(work: Path, table: Path, spec_name: str = "upsert") -> Callable[[], Run]:
    """A run of `runner SPEC --summary-json FILE`, a whole process, against `table`."""

    def run() -> Run:
        before, version = _stored_files(table), _version(table)
        seconds, summary = runner_process(work / f"{spec_name}.yaml", work / "summary.json")
        job = sum(s for stage, s in summary["stage_seconds"].items() if stage != "start")
        return _run(table, before, version, seconds, job_seconds=round(job, 3), summary=summary)

    return run


def _run(table: Path, before: dict[str, int], version: int, seconds: float, **more) -> Run:
    """What a run that started from `before` (files) at `version` wrote."""
    adds = cdcs = 0
    latest = _version(table)
    for v in range(version + 1, latest + 1):
        for line in (table / "_delta_log" / f"{v:020d}.json").read_text().splitlines():
            action = json.loads(line)
            adds += "add" in action
            cdcs += "cdc" in action
    sizes: dict[str, int] = {"data": 0, "change_data": 0, "deletion_vectors": 0}
    for path, size in _stored_files(table).items():
        if path not in before:
            name = Path(path).name
            kind = (
                "change_data"
                if path.startswith("_change_data/")
                else "deletion_vectors"
                if name.startswith("deletion_vector_")
                else "data"
            )
            sizes[kind] += size
    versions = (version + 1, latest) if latest > version else None
    return Run(seconds, Written(**sizes), adds, cdcs, versions, **more)


def _stored_files(table: Path) -> dict[str, int]:
    """Every file of a table outside _delta_log, hidden (.crc) files left out."""
    return {
        p.relative_to(table).as_posix(): p.stat().st_size
        for p in table.rglob("*")
        if p.is_file() and "_delta_log" not in p.parts and not p.name.startswith(".")
    }


def _version(table: Path) -> int:
    return max(int(p.stem) for p in (table / "_delta_log").glob("*.json"))


def _keeps_feed(table: Path) -> bool:
    return DeltaTable(str(table)).metadata().configuration.get(CDF) == "true"


def _check_upsert(setup: Setup, table: Path, run: Run, cdf: bool) -> tuple[str, str | None]:
    """The upserted table's rows, the summary's counts and, with a change feed, the feed of
    the new versions; returns what was checked and a note when the feed check was skipped."""
    assert scan_checksum(table) == setup.after, f"{table.name}: rows after the upsert"
    counts = (run.summary["updated"], run.summary["inserted"])
    assert counts == (setup.keys, 0), f"{table.name}: updated, inserted {counts}"
    if not cdf:
        assert run.written.change_data == 0 and run.cdcs == 0, "change data without the feed"
        return "rows", None
    if not _keeps_feed(table):
        return "rows; feed check skipped", (
            f"{run.summary['table_type']}: the runner did not set {CDF} on the table: "
            "target.change_data_feed is not implemented yet; the feed check was skipped and "
            "the 'CDF on' figures are those of a table without a feed"
        )
    assert run.versions, f"{table.name}: no commit"
    reader = check_feed(setup.spark, table, run.versions, setup.stored, setup.batch)
    return f"rows; feed: 2 rows per key ({reader})", None


def _delta_spark(setup: Setup, table_type: str, cdf: bool) -> dict:
    """delta-spark MERGE of the batch into a delta-spark table of the same rows (by city,
    as the runner's partitions), with or without the change feed; with deletion vectors
    beside a MERGE_ON_READ table, without beside a COPY_ON_WRITE one."""
    spark, work = setup.spark, setup.work
    deletion_vectors = table_type == "MERGE_ON_READ"
    base, table = work / "delta-spark-base", work / "delta-spark"
    (
        spark.read.parquet(str(setup.src))
        .write.format("delta")
        .partitionBy("city")
        .option("delta.enableDeletionVectors", str(deletion_vectors).lower())
        .option(CDF, str(cdf).lower())
        .save(str(base))
    )
    source = spark.read.parquet(str(setup.batch_dir))

    def merge() -> Run:
        before, version = _stored_files(table), _version(table)
        start = time.perf_counter()
        delta_spark_upsert(spark, table, source)
        return _run(table, before, version, time.perf_counter() - start)

    runs = _measure(setup, lambda: fresh_copy(base, table), merge)
    assert scan_checksum(table) == setup.after, "delta-spark merge: rows after"
    check = "rows"
    if cdf:
        versions = runs[-1].versions
        assert versions, "delta-spark merge: no commit"
        reader = check_feed(spark, table, versions, setup.stored, setup.batch)
        check += f"; feed: 2 rows per key ({reader})"
    shutil.rmtree(table)
    shutil.rmtree(base)
    system = f"{DELTA_SPARK}, deletion vectors {'on' if deletion_vectors else 'off'}"
    return _line(table_type, system, cdf, None, runs, check)


def _replays(setup: Setup, table_type: str, applied: Path) -> dict:
    """Scenario 3: the batch again, against the table it was applied to, with skip_unchanged
    true and false."""
    work, lines, notes = setup.work, [], []
    table = work / f"replay-{table_type}"
    for skip in (True, False):
        extra = {"table_type": table_type, "change_data_feed": True, "skip_unchanged": skip}
        spec_file(work / "replay", "upsert", setup.batch_dir, table, setup.buckets, **extra)
        runs = _measure(
            setup, lambda: fresh_copy(applied, table), _runner(work, table, spec_name="replay")
        )
        check, note = _check_replay(setup, table, runs[-1], skip)
        notes += [note] if note else []
        lines.append(_line(table_type, RUNNER, True, skip, runs, check))
        shutil.rmtree(table)
    by_skip = {line["skip_unchanged"]: line for line in lines}
    return {
        "scenario": f"change feed: replay of the same {setup.keys:,} rows into the {table_type} "
        f"table they were applied to, skip_unchanged true (job s, Spark start excluded)",
        "runner_s": by_skip[True]["job_s"],
        "peers": {"runner, skip_unchanged false (job s)": by_skip[False]["job_s"]},
        "bytes_written": {
            f"runner, skip_unchanged {str(skip).lower()}": line["bytes"]["total"]
            for skip, line in by_skip.items()
        },
        "touched": {
            f"files added (add + cdc actions), skip_unchanged {str(skip).lower()}": line["adds"]
            + line["cdcs"]
            for skip, line in by_skip.items()
        },
        "notes": notes,
        "change_feed": lines,
    }


def _check_replay(setup: Setup, table: Path, run: Run, skip: bool) -> tuple[str, str | None]:
    """The replayed table's rows (unchanged), and with skip_unchanged implemented: its
    counts and its feed (empty when rows are skipped, else 2 equal rows per key)."""
    assert scan_checksum(table) == setup.after, f"{table.name}: rows after the replay"
    if "unchanged" not in run.summary:
        return "rows; counts and feed check skipped", (
            f"{run.summary['table_type']}: the run summary has no `unchanged`: "
            "target.skip_unchanged is not implemented yet; both replays rewrote the rows "
            "and their counts and feed were not checked"
        )
    counts = (run.summary["updated"], run.summary["unchanged"], run.summary["inserted"])
    want = (0, setup.keys, 0) if skip else (setup.keys, 0, 0)
    assert counts == want, f"{table.name}: updated, unchanged, inserted {counts}, want {want}"
    if not _keeps_feed(table):
        return "rows, counts; feed check skipped (no change feed on the table)", None
    if run.versions is None:
        assert skip, f"{table.name}: no commit"
        return "rows, counts; no commit", None
    same = setup.batch if not skip else Checksum()
    reader = check_feed(setup.spark, table, run.versions, same, same)
    return f"rows, counts; feed {'empty' if skip else '2 equal rows per key'} ({reader})", None


def _line(table_type, system, cdf, skip, runs: list[Run], check: str) -> dict:
    """One measured system: medians of the times, the last run's bytes and actions."""
    last = runs[-1]
    jobs = [r.job_seconds for r in runs if r.job_seconds is not None]
    return {
        "table_type": table_type,
        "system": system,
        "change_data_feed": cdf,
        "skip_unchanged": skip,
        "wall_s": statistics.median(r.seconds for r in runs),
        "job_s": statistics.median(jobs) if jobs else None,
        "seconds": [round(r.seconds, 3) for r in runs],
        "bytes": {
            "total": last.written.total,
            "data": last.written.data,
            "change_data": last.written.change_data,
            "deletion_vectors": last.written.deletion_vectors,
        },
        "adds": last.adds,
        "cdcs": last.cdcs,
        "check": check,
        **_counts(runs),
    }


def _counts(runs: list[Run]) -> dict:
    """The runner's counts (last run) and its median seconds per stage; {} for a peer."""
    if not runs[-1].summary:
        return {}
    stages = list(dict.fromkeys(s for r in runs for s in r.summary["stage_seconds"]))
    summary = runs[-1].summary
    return {
        "updated": summary["updated"],
        "unchanged": summary.get("unchanged"),
        "stages_median": {
            stage: statistics.median(r.summary["stage_seconds"].get(stage, 0.0) for r in runs)
            for stage in stages
        },
    }


def _upsert_result(
    setup: Setup, table_type: str, lines: list[dict], notes: list[str], peer_problem
) -> dict:
    """The generic result (bench/__main__.py's table) with the detailed lines beside it."""
    by = {(line["system"], line["change_data_feed"]): line for line in lines}
    runner_on, runner_off = by[(RUNNER, True)], by[(RUNNER, False)]
    peers = {"runner, change_data_feed false (job s)": runner_off["job_s"]}
    written = {}
    overhead = {}
    for (system, cdf), line in by.items():
        written[f"{system}, CDF {'on' if cdf else 'off'}"] = line["bytes"]["total"]
        if system != RUNNER:
            peers[f"{system}, CDF {'on' if cdf else 'off'}"] = line["wall_s"]
        if cdf and (system, False) in by:
            off = by[(system, False)]
            overhead[system] = {
                "time": line["wall_s"] / off["wall_s"],
                "job_time": line["job_s"] / off["job_s"] if line["job_s"] else None,
                "bytes": line["bytes"]["total"] / max(1, off["bytes"]["total"]),
            }
    notes = [
        *notes,
        *(
            f"CDF overhead, {system}: time {o['time']:.2f}x"
            + (f" (job {o['job_time']:.2f}x)" if o["job_time"] else "")
            + f", bytes {o['bytes']:.2f}x"
            for system, o in overhead.items()
        ),
    ]
    return {
        "scenario": f"change feed: upsert of {setup.keys:,} keys ({percent(FRACTION)}) spread "
        f"over {setup.rows:,} rows, {table_type}, change_data_feed true (runner: job s of a "
        "whole process, Spark start excluded; delta-spark: merge call)",
        "runner_s": runner_on["job_s"],
        "peers": peers,
        **({"peers_skipped": {DELTA_SPARK: peer_problem}} if peer_problem else {}),
        "bytes_written": written,
        "notes": notes,
        "change_feed": lines,
        "cdf_overhead": overhead,
    }
