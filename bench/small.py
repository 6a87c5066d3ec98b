"""Small runs as a user waits for them: whole `runner` processes, stage by stage.

    python -m bench --only small [--rows 1000000] [--repeats 3]

A warm session in one process hides what a small run costs most: the JVM's start, the
first query's analysis and code generation, the first job's scheduling. Every figure here
is a fresh process, as `runner run SPEC` is on a laptop or in a pod:

1. the floor: a Python process that starts a local[2] SparkSession, runs one tiny job
   (`spark.range(10).count()`) and stops it; and the same with the runner's Java
   class-data archive (runner/jvm/java_cds.py) and with the quick JIT a small run's JVM gets
   (runner/jvm/session.py jit_option): the floor the runner lowers for itself;
2. the quickstart: `runner pipelines/quickstart.yaml` (420 rows into a new table) and
   `runner pipelines/quickstart_corrections.yaml` (6 rows upserted into it);
3. a 1,000-row upsert into a --rows table (loaded untimed, by one bulk_insert process);
4. the first query's floor: a Python process that starts its SparkSession as a small run
   does (the archive, the quick JIT, the warm-up thread: runner/jvm/session.py), reads the
   corrections' 6 JSON rows with their schema and collects them as Arrow, nothing else:
   what any small run's plan and keys cost before the runner's own work.

For each runner process: wall seconds, its stage seconds (start = Spark's session; plan =
sources, transform and table snapshot; keys = the batch's keys, buckets and verdicts;
write; commit) and the rest (Python's imports before the session, the history record and
the stop after the commit). Medians over --repeats; the quickstart's ratio to the floor is
the figure issue 37 asks about. RUNNER_JAVA_CDS=0 in the environment measures the runner
without its archive (the archive floor is then skipped).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from bench.write import make_rows, runner_process, spec_file, write_source
from runner.jvm.java_cds import QUIET, archive_path, java_binary
from runner.jvm.session import QUICK_JIT
from runner.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("start", "plan", "keys", "write", "commit")
FLOOR = (
    "import sys\n"
    "from pyspark.sql import SparkSession\n"
    "builder = SparkSession.builder.master('local[2]')\n"
    "if len(sys.argv) > 1:\n"
    "    builder = builder.config('spark.driver.extraJavaOptions', sys.argv[1])\n"
    "spark = builder.getOrCreate()\n"
    "spark.range(10).count()\n"
    "spark.stop()\n"
)
UPSERT_ROWS = 1_000
# A cold JVM's first query, launched as a small run's (argv: the JSON directory, its schema).
FIRST_QUERY = (
    "import json, sys, time\n"
    "from runner.jvm.session import spark_session\n"
    "from runner.spec.model import SparkSettings\n"
    "spark = spark_session(SparkSettings('local[2]'), 'first-query', (), True, True)\n"
    "started = time.perf_counter()\n"
    "frame = spark.read.schema(sys.argv[2]).json(sys.argv[1])\n"
    "planned = time.perf_counter()\n"
    "frame.toArrow()\n"
    "done = time.perf_counter()\n"
    "print(json.dumps({'plan': planned - started, 'keys': done - planned}))\n"
)


def run_small_benchmarks(work: Path, rows: int, repeats: int) -> list[dict]:
    work.mkdir(parents=True, exist_ok=True)
    floor = statistics.median(_floor_seconds() for _ in range(repeats))
    quickstart = work / "pipelines"
    results = []
    load, corrections = [], []
    for _ in range(repeats):
        shutil.rmtree(quickstart, ignore_errors=True)
        shutil.copytree(ROOT / "pipelines", quickstart, ignore=shutil.ignore_patterns("warehouse"))
        load.append(_stages(quickstart / "quickstart.yaml", work))
        corrections.append(_stages(quickstart / "quickstart_corrections.yaml", work))
    results.append(_result("quickstart load, 420 rows into a new table", load, floor))
    results.append(_result("quickstart corrections, 6 rows upserted", corrections, floor))
    results.append(_upsert_into(work, rows, repeats, floor))
    results.append(_first_query(quickstart / "quickstart_corrections.yaml", repeats))
    archive = _archive()  # written by the runs above, unless RUNNER_JAVA_CDS=0
    lowered = {"the quick JIT (C1)": QUICK_JIT}
    if archive is not None:
        cds = f"-XX:SharedArchiveFile={archive} {QUIET}"
        lowered = {
            "the class-data archive": cds,
            "the class-data archive and the quick JIT (C1), as a small run starts": (
                f"{cds} {QUICK_JIT}"
            ),
        }
    for what, options in lowered.items():
        results.append(
            {
                "scenario": f"floor with {what} (whole process)",
                "runner_s": statistics.median(_floor_seconds(options) for _ in range(repeats)),
                "peers": {"floor: SparkSession start, one tiny job, stop": floor},
            }
        )
    return results


def _first_query(corrections: Path, repeats: int) -> dict:
    """FIRST_QUERY over the source of the corrections spec, a fresh process each time."""
    source = load_spec(corrections).sources[0]
    # the archive the runs above wrote is mapped, never written by this process
    archive = "0" if os.environ.get("RUNNER_JAVA_CDS") == "0" else "use"
    env = {**os.environ, "RUNNER_JAVA_CDS": archive}
    runs = []
    for _ in range(repeats):
        done = subprocess.run(
            [sys.executable, "-c", FIRST_QUERY, source.path, source.schema or ""],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    plan = statistics.median(r["plan"] for r in runs)
    keys = statistics.median(r["keys"] for r in runs)
    return {
        "scenario": "first query (6 JSON rows read, collected as Arrow) as a small run starts",
        "first_query": {"plan": plan, "keys": keys, "plan_and_keys": plan + keys},
    }


def _archive() -> Path | None:
    java = java_binary()
    if os.environ.get("RUNNER_JAVA_CDS") == "0" or java is None:
        return None
    path = archive_path(java)
    return path if path.exists() else None


def _floor_seconds(java_options: str | None = None) -> float:
    start = time.perf_counter()
    extra = [java_options] if java_options else []
    subprocess.run([sys.executable, "-c", FLOOR, *extra], check=True, capture_output=True)
    return time.perf_counter() - start


def _stages(spec: Path, work: Path) -> dict:
    """One whole `runner SPEC` process: wall seconds and its stage seconds."""
    seconds, summary = runner_process(spec, work / "summary.json")
    stages = {s: summary["stage_seconds"].get(s, 0.0) for s in STAGES}
    stages["rest"] = seconds - sum(summary["stage_seconds"].values())
    return {"seconds": seconds, "stages": stages}


def _upsert_into(work: Path, rows: int, repeats: int, floor: float) -> dict:
    """UPSERT_ROWS existing keys upserted into a `rows`-row table, a fresh process each
    (the table is loaded once, untimed; each upsert changes the same keys again)."""
    write_source(work / "source", rows, seed=37)
    table = work / "table"
    shutil.rmtree(table, ignore_errors=True)
    spec_file(work / "load", "bulk_insert", work / "source", table, 16)
    runner_process(work / "load.yaml", work / "summary.json")
    batch_dir = work / "batch"
    batch_dir.mkdir(exist_ok=True)
    ids = list(range(0, rows, max(1, rows // UPSERT_ROWS)))[:UPSERT_ROWS]
    runs = []
    for attempt in range(repeats):
        pq.write_table(make_rows(0, seed=attempt, ids=ids, ts=2 + attempt), batch_dir / "b.parquet")
        spec_file(work / "upsert", "upsert", batch_dir, table, 16)
        runs.append(_stages(work / "upsert.yaml", work))
    return _result(f"upsert of {len(ids):,} rows into {rows:,}", runs, floor)


def _result(scenario: str, runs: list[dict], floor: float) -> dict:
    stages = {s: statistics.median(r["stages"][s] for r in runs) for s in (*STAGES, "rest")}
    wall = statistics.median(r["seconds"] for r in runs)
    return {
        "scenario": f"{scenario} (whole process)",
        "runner_s": wall,
        "peers": {"floor: SparkSession start, one tiny job, stop": floor},
        "small": {"stages": stages, "plan_and_keys": stages["plan"] + stages["keys"]},
    }


def render_small(results: list[dict]) -> str:
    lines = [
        "| run | wall s | x floor | " + " | ".join(STAGES) + " | rest | plan + keys |",
        "|---|---|---|" + "---|" * (len(STAGES) + 2),
    ]
    for result in results:
        if "small" not in result:
            continue
        stages = result["small"]["stages"]
        floor = next(iter(result["peers"].values()))
        lines.append(
            f"| {result['scenario']} | {result['runner_s']:.2f} | "
            f"{result['runner_s'] / floor:.2f} | "
            + " | ".join(f"{stages[s]:.2f}" for s in (*STAGES, "rest"))
            + f" | {result['small']['plan_and_keys']:.2f} |"
        )
    lines.append(f"\nfloor (Python + SparkSession + one tiny job + stop): {floor:.2f} s")
    for result in results:
        if "first_query" in result:
            first = result["first_query"]
            lines.append(
                f"{result['scenario']}: plan {first['plan']:.2f} s, keys {first['keys']:.2f} s,"
                f" plan + keys {first['plan_and_keys']:.2f} s"
            )
        elif "small" not in result:  # the floor lowered by the archive
            lines.append(f"{result['scenario']}: {result['runner_s']:.2f} s")
    return "\n".join(lines)
