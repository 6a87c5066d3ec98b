"""Many small tables in one application: `runner run DIR` beside a `runner run SPEC` per spec.

    python -m bench --only spec-set [--set-specs 20] [--set-max-rows 100000] [--repeats 3]

A directory of --set-specs small specs (issue 55's "Measure"), non-partitioned tables of
BUCKETS buckets:

- three quarters of them spread their batches from 1,000 to --set-max-rows rows
  (geometrically), one in two a first load into a new table, the others an upsert into an
  existing table of that size (half of the batch updates, half new keys);
- a quarter of them upsert 1,000 rows (500 updates, 500 new keys) into a 1,000-row table
  of their own: the small table the per-table figure is about;
- two read a table through a `delta` source and upsert it into a table of their own: a
  chain first load -> chained -> chained, which the set runs in that order.

Three ways to run them, in turn, each on fresh copies of the tables (the existing ones are
loaded once, untimed, by one set run that also warms the caches): every spec as its own
`runner run SPEC` process, one after another in the set's order; one `runner run DIR` (one
Spark application, the specs one after another); one `runner run DIR --parallel 2`. Each
figure is the wall seconds of the whole processes, a median over --repeats, and every
table is read back with delta-rs (rows, sum of ids, sum of amounts) against what its spec
should have left before any figure is shown. Goal: a set run at most GOAL_RATIO of the
separate processes' time.

The cost of each additional small table in the warm application: the set run's summary
table gives each spec's seconds (its whole run, from its session to its history record);
the figure is the median of those of the 1,000-row upserts in the one-after-another set
run, leaving out the spec that ran first (it started Spark). Their stage seconds (the
`run_finished` log events) show where that time goes. Goal: at most GOAL_TABLE_SECONDS.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from bench.write import (
    Checksum,
    checksum,
    delta_dataset,
    error_text,
    make_rows,
    parquet_dataset,
    runner_process,
    spec_file,
    write_source,
)

ROOT = Path(__file__).resolve().parents[1]
SMALL_ROWS = 1_000
BUCKETS = 2
CHAINED = 2
GOAL_RATIO = 0.25
GOAL_TABLE_SECONDS = 1.0
SEPARATE, ONE, PARALLEL = "separate processes", "runner run DIR", "runner run DIR --parallel 2"
SYSTEMS = {SEPARATE: None, ONE: [], PARALLEL: ["--parallel", "2"]}  # the set run's options
UNPARTITIONED = {"key_generator": {"type": "NON_PARTITIONED"}}


@dataclass(frozen=True)
class Planned:
    """One spec of the set: what it does, and how many rows its batch has."""

    name: str
    kind: str  # "upsert" into an existing table, "load" into a new one, "chained"
    rows: int
    reads: str = ""  # chained: the spec whose table it reads

    @property
    def small(self) -> bool:
        return self.kind == "upsert" and self.rows == SMALL_ROWS


def plan(specs: int, max_rows: int) -> list[Planned]:
    """The set's specs, each after the one whose table it reads (the order the separate
    processes run in)."""
    if specs < 4:
        raise ValueError("--set-specs: at least 4 (a small upsert, a load, two chained)")
    small = max(1, specs // 4)
    spread = specs - small - CHAINED
    sizes = np.geomspace(SMALL_ROWS, max(max_rows, SMALL_ROWS), spread).round().astype(int)
    planned = []
    for i, rows in enumerate(sizes.tolist()):
        kind = "load" if i % 2 == 0 else "upsert"
        planned.append(Planned(f"s{i:02d}_{kind}_{rows}", kind, rows))
    for i in range(spread, spread + small):  # named after a load, so none runs first
        planned.append(Planned(f"s{i:02d}_upsert_{SMALL_ROWS}", "upsert", SMALL_ROWS))
    reads = planned[0]  # the first load heads the chain
    for i in range(specs - CHAINED, specs):
        planned.append(Planned(f"s{i:02d}_chained", "chained", reads.rows, reads.name))
        reads = planned[-1]
    return planned


@dataclass(frozen=True)
class Layout:
    """Where the scenario keeps its files."""

    work: Path

    @property
    def specs(self) -> Path:
        return self.work / "specs"

    @property
    def tables(self) -> Path:
        return self.work / "tables"

    @property
    def base(self) -> Path:
        """The existing tables as loaded, copied to `tables` before each run."""
        return self.work / "base"

    def source(self, name: str) -> Path:
        return self.work / "sources" / name


def prepare(layout: Layout, planned: list[Planned]) -> dict[str, Checksum]:
    """The sources, the specs and the existing tables (loaded by one untimed set run);
    what each table must hold after its spec ran, by spec name."""
    loads = layout.work / "loads"
    loads.mkdir(parents=True)
    layout.specs.mkdir()
    expected: dict[str, Checksum] = {}
    for seed, spec in enumerate(planned):
        table = layout.tables / spec.name
        if spec.kind == "chained":
            _chained_spec(layout.specs / spec.name, layout.tables / spec.reads, table)
            expected[spec.name] = expected[spec.reads]
            continue
        source = layout.source(spec.name)
        if spec.kind == "load":
            expected[spec.name] = write_source(source, spec.rows, seed=seed)
        else:
            existing = layout.source(f"{spec.name}_existing")
            expected[spec.name] = _upsert_batch(existing, source, spec.rows, seed)
            spec_file(loads / spec.name, "bulk_insert", existing, table, BUCKETS, **UNPARTITIONED)
        operation = "bulk_insert" if spec.kind == "load" else "upsert"
        spec_file(layout.specs / spec.name, operation, source, table, BUCKETS, **UNPARTITIONED)
    if any(loads.iterdir()):
        _set_process(loads, [])
    shutil.rmtree(layout.base, ignore_errors=True)
    if layout.tables.exists():
        shutil.copytree(layout.tables, layout.base)
    else:
        layout.base.mkdir()
    return expected


def _upsert_batch(existing: Path, batch_dir: Path, rows: int, seed: int) -> Checksum:
    """An existing table's source (ids 0..rows-1) and a batch of `rows` rows, its upper
    half of ids updated and as many new; the table's checksum after the upsert."""
    write_source(existing, rows, seed=seed)
    half = rows // 2
    kept = checksum(parquet_dataset(existing), pc.field("id") < half)
    batch = make_rows(0, seed=(seed, 1), ids=range(half, half + rows), ts=2)
    batch_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(batch, batch_dir / "batch.parquet")
    return kept + checksum(batch)


def _chained_spec(spec: Path, upstream: Path, table: Path) -> None:
    """A spec upserting the rows of the table `upstream` (a delta source, read from where
    its last run left) into `table`."""
    spec_file(spec, "upsert", upstream, table, BUCKETS, **UNPARTITIONED)
    path = spec.with_suffix(".yaml")
    data = yaml.safe_load(path.read_text())
    data["sources"] = [
        {
            "name": "src",
            "format": "delta",
            "path": str(upstream),
            "incremental": {"since": "last", "deletes": "ignore"},
        }
    ]
    data["transform"] = {"sql": "SELECT id, city, ts, amount, note FROM src"}
    path.write_text(yaml.safe_dump(data))


@dataclass(frozen=True)
class SpecRun:
    """One spec's run in a set run, from its summary table and its run_finished event."""

    name: str
    position: int  # in the summary table: 0 ran first
    seconds: float
    stages: dict[str, float]


def _set_process(specs: Path, options: list[str]) -> tuple[float, list[SpecRun]]:
    """`runner run DIR` as a user runs it, a whole process: its wall seconds and each
    spec's run (a failed run, or a spec that did not commit, raises)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "runner", "run", str(specs), *options],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"runner exited {done.returncode}:\n{error_text(done.stderr)}")
    return seconds, spec_runs(done.stdout, done.stderr)


def spec_runs(stdout: str, stderr: str) -> list[SpecRun]:
    """Each spec's line of the set's summary table (stdout), with the stage seconds of its
    run_finished event (stderr's JSON log lines)."""
    stages = {}
    for line in stderr.splitlines():
        if line.startswith("{") and '"run_finished"' in line:
            event = json.loads(line)
            stages[event["pipeline"]] = event["stage_seconds"]
    lines = stdout.splitlines()
    header = max(i for i, line in enumerate(lines) if line.split()[:2] == ["spec", "outcome"])
    runs = []
    for line in lines[header + 1 : -1]:
        name, *_, seconds = line.split()
        if "committed version" not in line:
            raise RuntimeError(f"spec {name} did not commit: {line}")
        runs.append(SpecRun(name, len(runs), float(seconds), stages.get(name, {})))
    return runs


def runner_run(spec: Path) -> None:
    """`runner run SPEC`, a whole process."""
    runner_process(spec, spec.parent.parent / "summary.json")


def _separate(layout: Layout, planned: list[Planned], run_one: Callable[[Path], object]) -> float:
    """Every spec run alone by `run_one`, one after another."""
    start = time.perf_counter()
    for spec in planned:
        run_one(layout.specs / f"{spec.name}.yaml")
    return time.perf_counter() - start


def _check(layout: Layout, expected: dict[str, Checksum], system: str) -> None:
    """Every table read back with delta-rs holds what its spec should have left."""
    for name, want in expected.items():
        got = checksum(delta_dataset(layout.tables / name))
        if got != want:
            raise RuntimeError(f"{system}: table {name} holds {got}, expected {want}")


def run_spec_set_benchmarks(
    work: Path,
    specs: int,
    max_rows: int,
    repeats: int,
    run_one: Callable[[Path], object] = runner_run,
    systems: tuple[str, ...] = tuple(SYSTEMS),
) -> dict:
    """The ways to run the set (`systems`, SYSTEMS' names), --repeats times each on fresh
    tables, checked; `run_one` runs one spec alone (a test runs it in its session, without
    a JVM each)."""
    layout = Layout(work)
    planned = plan(specs, max_rows)
    expected = prepare(layout, planned)
    walls: dict[str, list[float]] = {system: [] for system in systems}
    sequential: list[list[SpecRun]] = []
    for _ in range(repeats):
        for system in systems:
            options = SYSTEMS[system]
            shutil.rmtree(layout.tables, ignore_errors=True)
            shutil.copytree(layout.base, layout.tables)
            if options is None:
                walls[system].append(_separate(layout, planned, run_one))
            else:
                seconds, runs = _set_process(layout.specs, options)
                walls[system].append(seconds)
                if not options:
                    sequential.append(runs)
            _check(layout, expected, system)
    return _result(planned, max_rows, walls, sequential)


def _result(
    planned: list[Planned],
    max_rows: int,
    walls: dict[str, list[float]],
    sequential: list[list[SpecRun]],
) -> dict:
    small = {p.name for p in planned if p.small}
    warm = [r for runs in sequential for r in runs if r.name in small and r.position > 0]
    wall = {system: statistics.median(times) for system, times in walls.items()}
    return {
        "scenario": f"{len(planned)} specs, batches of {SMALL_ROWS:,} to {max_rows:,} rows",
        "specs": [p.__dict__ for p in planned],
        "wall_s": wall,
        "wall_runs_s": walls,
        "ratio_to_separate": {s: wall[s] / wall[SEPARATE] for s in (ONE, PARALLEL) if s in wall},
        "per_table": {
            "what": f"a {SMALL_ROWS:,}-row upsert's seconds in the set run's summary "
            f"({ONE}, the spec that ran first left out), median of {len(warm)}",
            "seconds": statistics.median(r.seconds for r in warm) if warm else None,
            "stages": {
                s: statistics.median(r.stages.get(s, 0.0) for r in warm)
                for s in dict.fromkeys(s for r in warm for s in r.stages)
            },
        },
        "set_run_spec_seconds": [[r.__dict__ for r in runs] for runs in sequential],
    }


def render_spec_set(result: dict) -> str:
    wall, ratio = result["wall_s"], result["ratio_to_separate"]
    count = len(result["specs"])
    lines = [
        f"{result['scenario']}, whole processes, wall seconds (median)",
        "",
        f"| run | wall s | / separate (goal <= {GOAL_RATIO}) |",
        "|---|---|---|",
        f"| {count} `runner run SPEC` processes, one after another | {wall[SEPARATE]:.2f} | 1.00 |",
        *(f"| one `{s}` | {wall[s]:.2f} | {ratio[s]:.2f} |" for s in (ONE, PARALLEL) if s in wall),
    ]
    per_table = result["per_table"]
    if per_table["seconds"] is not None:
        stages = ", ".join(f"{s} {v:.2f}" for s, v in per_table["stages"].items())
        lines += [
            "",
            f"each additional small table in the warm application: {per_table['seconds']:.2f} s"
            f" (goal <= {GOAL_TABLE_SECONDS:.0f} s): {per_table['what']}; stages: {stages}",
        ]
    return "\n".join(lines)
