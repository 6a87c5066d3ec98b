"""TPC-H's `lineitem` and refresh sets: the runner beside delta-rs, delta-spark and Hudi.

    python -m bench --only tpch --scale 1 [--repeats 3] [--skip-peer hudi ...]
        [--refresh-scale 1] [--table-type MERGE_ON_READ]

`lineitem` at TPC-H scale factor --scale (fractions allowed) from tpchgen-cli (bench/tpch_env.py,
installed once), cut by bench/tpch_data.py into four steps run in turn, each engine on its
own table: the initial load; RF1, the lineitems of 0.1 % of the orders, new; RF2, those of
another 0.1 %, deleted; 1 % of the rows given a late status update (--refresh-scale S:
the refresh sets as large as at scale factor S, the same rows into a larger table). Composite
record key (l_orderkey, l_linenumber), no partitions, buckets() buckets for the scale factor.

Engines, every timed run of a step from a fresh copy (untimed) of the engine's table after
the step before, the median of --repeats runs reported, after one untimed run unless
--no-warmup:
- the runner, COPY_ON_WRITE and MERGE_ON_READ (--table-type: one of them), warm:
  run_pipeline in the bench's session (job seconds, Spark's start left out); cold:
  `runner SPEC` as a whole process (wall seconds), as a user runs each step
  (`--skip-peer runner-cold` leaves it out);
- delta-rs (`--skip-peer delta-merge`): `write_deltalake`, then `DeltaTable.merge` (update
  and insert, or delete), the wall seconds of the call, in this process;
- delta-spark (`--skip-peer delta-spark`): a Delta write, then MERGE with deletion vectors,
  in the bench's session, when it has delta-spark's jars;
- Hudi 1.1.1 with the bucket index (`--skip-peer hudi`), the runner's table types,
  in its side environment (bench/hudi_env.py), one warm session for all its steps (job
  seconds: bench/hudi_job.py).
Bytes written: every file a step added under the table (or the bytes it grew by), data and
log alike (Hadoop's .crc files left out). Every engine's table after every step is checked
against bench/tpch_data.py's sums before anything is reported.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import yaml
from deltalake import DeltaTable, write_deltalake

from bench.hudi_env import SideEnvironmentProblem
from bench.merge_on_read import delta_spark_problem, job_seconds
from bench.tpch_data import COLUMNS, KEY, TpchData, TpchSum, cut, tpch_sum
from bench.tpch_env import generate, tpchgen
from bench.write import runner_process
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec


@dataclass(frozen=True)
class Step:
    name: str  # the batch of bench/tpch_data.py it applies
    label: str
    operation: str  # the runner's target.operation


STEPS = (
    Step("load", "initial load", "bulk_insert"),
    Step("rf1", "RF1: new orders' lineitems", "upsert"),
    Step("rf2", "RF2: deleted orders' lineitems", "delete"),
    Step("update", "late status updates", "upsert"),
)
TABLE_TYPES = ("COPY_ON_WRITE", "MERGE_ON_READ")
WARM = "runner, warm (job s)"
COLD = "runner, whole process (wall s)"
DELTA_RS = "delta-rs write_deltalake / merge (wall s)"
DELTA_SPARK = "delta-spark write / MERGE with deletion vectors (wall s)"
HUDI = "Hudi 1.1.1, bucket index (job s)"
SPARK_WRITE = "Spark parquet write, load only (wall s)"
ON = " AND ".join(f"t.{k} = s.{k}" for k in KEY)


def buckets(scale_factor: float) -> int:
    """16 buckets per scale factor (about 375,000 lineitems, 10 MiB, each), at least 2."""
    return max(2, round(16 * scale_factor))


@dataclass(frozen=True)
class TpchRun:
    """What a run of the scenario is asked for: the scale factor, timed runs per step (their
    median reported), an untimed run first, the peers left out (--skip-peer), the runner's
    table types, and the scale factor the refresh sets are sized for (None: the table's)."""

    scale_factor: float
    repeats: int = 1
    warmup: bool = True
    skip: frozenset[str] = frozenset()
    table_types: tuple[str, ...] = TABLE_TYPES
    refresh_scale: float | None = None


@dataclass(frozen=True)
class Tpch:
    """What every engine shares: the session, the batches, the settings (`run`'s)."""

    spark: Any
    work: Path
    data: TpchData
    buckets: int
    run: TpchRun


@dataclass(frozen=True)
class Measured:
    """One engine's side of a step: median seconds, bytes written, the table's sums."""

    seconds: float
    written: int
    sums: TpchSum


def run_tpch_benchmarks(spark, work: Path, run: TpchRun) -> list[dict]:
    """Every engine not skipped through the four steps; a result per step and table type."""
    scale_factor, skip, table_types = run.scale_factor, run.skip, run.table_types
    try:
        binary = tpchgen()
    except SideEnvironmentProblem as exc:
        raise SystemExit(f"tpch: tpchgen-cli cannot be had: {exc}") from exc
    work.mkdir(parents=True, exist_ok=True)
    resize = (run.refresh_scale or scale_factor) / scale_factor
    data = cut(generate(binary, scale_factor, work / "generated"), work / "batches", resize)
    shutil.rmtree(work / "generated")
    tpch = Tpch(spark, work, data, buckets(scale_factor), run)
    engines: dict[str, dict[str, dict[str, Measured]]] = {}  # table type -> engine -> step
    skipped = {COLD: "--skip-peer runner-cold"} if "runner-cold" in skip else {}
    for table_type in table_types:
        engines[table_type] = {WARM: _runner(tpch, table_type, cold=False)}
        if COLD not in skipped:
            engines[table_type][COLD] = _runner(tpch, table_type, cold=True)
    peers: dict[str, dict[str, Measured]] = {}
    if "delta-merge" in skip:  # the runner alone: an A/B between trees, a growth measure
        skipped[DELTA_RS] = "--skip-peer delta-merge"
    else:
        peers[DELTA_RS] = chain(tpch, "delta_rs", lambda s, t: _delta_rs(tpch, s, t))
    if "spark-parquet" in skip:
        skipped[SPARK_WRITE] = "--skip-peer spark-parquet"
    else:
        peers[SPARK_WRITE] = {"load": plain_write(tpch)}
    problem = "--skip-peer delta-spark" if "delta-spark" in skip else delta_spark_problem(spark)
    if problem is None:
        peers[DELTA_SPARK] = chain(tpch, "delta_spark", lambda s, t: _delta_spark(tpch, s, t))
    else:
        skipped[DELTA_SPARK] = problem
    if "hudi" in skip:
        skipped[HUDI] = "--skip-peer hudi"
    else:
        from bench.tpch_hudi import hudi_side

        for table_type, steps in hudi_side(tpch).items():
            engines[table_type][HUDI] = steps
    from bench.tpch_report import results

    sized = f", refresh sets as at SF {run.refresh_scale:g}" if resize != 1 else ""
    return results(f"SF {scale_factor:g}{sized}", tpch.buckets, tpch.data, engines, peers, skipped)


def chain(tpch: Tpch, name: str, act: Callable[[Step, Path], float]) -> dict[str, Measured]:
    """STEPS in turn on the table work/name/<step>: each run of a step on a fresh copy of the
    step before's table, `act` timing it; the table checked after each step, removed after
    the last."""
    out: dict[str, Measured] = {}
    previous: Path | None = None
    for step in STEPS:
        table = tpch.work / name / step.name
        print(f"tpch: {name}, {step.label}", flush=True)
        times, before = [], {}
        for attempt in range(tpch.run.repeats + (1 if tpch.run.warmup else 0)):
            shutil.rmtree(table, ignore_errors=True)
            if previous is not None:
                shutil.copytree(previous, table)
            before = sizes(table)
            seconds = act(step, table)
            if attempt >= (1 if tpch.run.warmup else 0):
                times.append(seconds)
        found = delta_sums(table)
        check(name, step, found, tpch.data.expected[step.name])
        out[step.name] = Measured(statistics.median(times), added(before, sizes(table)), found)
        if previous is not None:
            shutil.rmtree(previous)
        previous = table
    shutil.rmtree(tpch.work / name)  # checked: at SF 10 each engine's table is gigabytes
    return out


def plain_write(tpch: Tpch) -> Measured:
    """The load's rows as Spark writes plain parquet in the bench's session (no key, no
    buckets, no log): the scale the runner's initial load is held to."""
    out = tpch.work / "spark_parquet"
    times = []
    for attempt in range(tpch.run.repeats + (1 if tpch.run.warmup else 0)):
        shutil.rmtree(out, ignore_errors=True)
        start = time.perf_counter()
        tpch.spark.read.parquet(str(tpch.data.sources["load"])).write.parquet(str(out))
        if attempt >= (1 if tpch.run.warmup else 0):
            times.append(time.perf_counter() - start)
    written = sum(sizes(out).values())
    found = TpchSum()
    for batch in ds.dataset(str(out)).to_batches(columns=COLUMNS):
        found += tpch_sum(batch)
    check("Spark's parquet write", STEPS[0], found, tpch.data.expected["load"])
    shutil.rmtree(out)
    return Measured(statistics.median(times), written, found)


def check(engine: str, step: Step, found: TpchSum, expected: TpchSum) -> None:
    if found != expected:
        raise AssertionError(f"{engine} after {step.label}: {found}, expected {expected}")


def delta_sums(table: Path) -> TpchSum:
    """The table's sums as delta-rs reads it (deletion vectors applied), batch by batch."""
    reader = pa.RecordBatchReader.from_stream(DeltaTable(str(table)).scan(columns=COLUMNS))
    total = TpchSum()
    for batch in reader:
        total += tpch_sum(batch)
    return total


def sizes(table: Path) -> dict[str, int]:
    if not table.exists():
        return {}
    return {str(p): p.stat().st_size for p in table.rglob("*") if p.is_file()}


def added(before: dict[str, int], after: dict[str, int]) -> int:
    """Bytes of new files, or of files' growth; Hadoop's checksum files left out."""
    return sum(
        max(0, size - before.get(path, 0))
        for path, size in after.items()
        if not path.endswith(".crc")
    )


def _runner(tpch: Tpch, table_type: str, cold: bool) -> dict[str, Measured]:
    """The runner through the steps: run_pipeline in the bench's session, or whole processes."""
    name = f"runner_{table_type.lower()}_{'cold' if cold else 'warm'}"
    specs = tpch.work / "specs" / name
    specs.mkdir(parents=True, exist_ok=True)

    def act(step: Step, table: Path) -> float:
        spec = _spec_file(tpch, specs / f"{step.name}.yaml", step, table, table_type)
        if cold:
            return runner_process(spec, specs / f"{step.name}.summary.json")[0]
        return job_seconds(run_pipeline(load_spec(spec), spark=tpch.spark))

    return chain(tpch, name, act)


def _spec_file(tpch: Tpch, path: Path, step: Step, table: Path, table_type: str) -> Path:
    spec = {
        "name": f"tpch_{step.name}",
        "sources": [
            {"name": "lineitem", "format": "parquet", "path": str(tpch.data.sources[step.name])}
        ],
        "target": {
            "path": str(table),
            "table_type": table_type,
            "operation": step.operation,
            "record_key": list(KEY),
            "merge_mode": "commit_time",  # lineitem has no event time: the latest write wins
            "index": {"buckets": tpch.buckets},
        },
    }
    path.write_text(yaml.safe_dump(spec))
    return path


def _delta_rs(tpch: Tpch, step: Step, table: Path) -> float:
    """delta-rs: `write_deltalake` of the load, `merge` of a refresh (its wall seconds)."""
    source = tpch.data.sources[step.name]
    start = time.perf_counter()
    if step.operation == "bulk_insert":
        write_deltalake(str(table), ds.dataset(str(source)).scanner().to_reader())
        return time.perf_counter() - start
    merge = DeltaTable(str(table)).merge(
        pq.read_table(source), predicate=ON, source_alias="s", target_alias="t"
    )
    if step.operation == "delete":
        merge.when_matched_delete().execute()
    else:
        merge.when_matched_update_all().when_not_matched_insert_all().execute()
    return time.perf_counter() - start


def _delta_spark(tpch: Tpch, step: Step, table: Path) -> float:
    """delta-spark in the bench's session: a Delta write of the load (deletion vectors on),
    MERGE (its Scala API, as SQL's MERGE INTO) of a refresh; its wall seconds."""
    spark = tpch.spark
    start = time.perf_counter()
    source = spark.read.parquet(str(tpch.data.sources[step.name]))
    if step.operation == "bulk_insert":
        writer = source.write.format("delta").option("delta.enableDeletionVectors", "true")
        writer.save(str(table))
        return time.perf_counter() - start
    delta = spark._jvm.io.delta.tables.DeltaTable
    merge = delta.forPath(spark._jsparkSession, str(table)).alias("t")
    merge = merge.merge(source._jdf.alias("s"), ON)
    if step.operation == "delete":
        merge.whenMatched().delete().execute()
    else:
        merge.whenMatched().updateAll().whenNotMatched().insertAll().execute()
    return time.perf_counter() - start
