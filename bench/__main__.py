"""Benchmarks: `python -m bench` (or `./dev bench`). Prints a markdown table, writes JSON.

Timings are medians over --repeats runs in one process (one Spark session); ratios compare
systems measured in the same run. Every scenario checks its result before it is reported.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.scale import Scale

ROOT = Path(__file__).resolve().parents[1]
WARMUP_MAX_ROWS = 2_000_000
SKIPPABLE_PEERS = (
    "delta-merge",
    "naive-rewrite",
    "spark-parquet",
    "spark-same-files",
    "runner-cold",
    "delta-spark",
    "hudi",
)  # bench.write.PEERS; the last three: --only tpch's (hudi: --only hudi's too)


def validate_seconds(repeats: int) -> float:
    """Wall time of `runner validate` on the bundled specs, a whole process each time."""
    specs = [str(p) for p in sorted((ROOT / "pipelines").glob("*.yaml"))]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "runner", "validate", *specs], check=True, capture_output=True
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def small_upsert_seconds(repeats: int, work: Path) -> float:
    """Wall time of `runner SPEC` applying the quickstart's 6 corrections to its 400-row
    table, a whole process each time: JVM start, first-query planning, heartbeat, commit."""
    shutil.copytree(ROOT / "pipelines", work, ignore=shutil.ignore_patterns("warehouse"))
    runner = [sys.executable, "-m", "runner"]
    subprocess.run(
        [*runner, str(work / "quickstart.yaml")], check=True, capture_output=True, cwd=ROOT
    )
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(
            [*runner, str(work / "quickstart_corrections.yaml")],
            check=True,
            capture_output=True,
            cwd=ROOT,
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def delta_spark_jars() -> tuple[list[str], dict[str, str]]:
    """delta-spark's jars and the session conf it needs (tests/delta_spark.py fetches the
    jars once with Maven into a cache), or ([], {}) when they cannot be had."""
    try:
        from tests.delta_spark import SPARK_CONF, delta_jars
    except ImportError:  # no tests/ (or no pytest) next to the bench
        return [], {}
    jars = delta_jars()
    return (jars, dict(SPARK_CONF)) if jars else ([], {})


def render(results: list[dict]) -> str:
    from bench.write import size_text

    lines = ["| scenario | runner (s) | peer | peer (s) | peer / runner |", "|---|---|---|---|---|"]
    for r in results:
        for peer, seconds in r["peers"].items():
            lines.append(
                f"| {r['scenario']} | {r['runner_s']:.2f} | {peer} | {seconds:.2f} | "
                f"{seconds / r['runner_s']:.2f} |"
            )
        for peer, why in r.get("peers_skipped", {}).items():
            lines.append(f"| {r['scenario']} | {r['runner_s']:.2f} | {peer} | skipped ({why}) | |")
        for system, size in r.get("bytes_written", {}).items():
            lines.append(f"| ↳ bytes written | | {system} | {size_text(size)} | |")
        for system, size in r.get("bytes_replaced", {}).items():
            lines.append(f"| ↳ stored bytes replaced | | {system} | {size_text(size)} | |")
        for system, seconds in r.get("wall_s", {}).items():
            lines.append(
                f"| ↳ wall (s, median, run_pipeline call) | | {system} | {seconds:.2f} | |"
            )
        for what, count in r.get("touched", {}).items():
            lines.append(f"| ↳ {what} | | | {count} | |")
        if r.get("runner_stages_median"):
            stages = ", ".join(f"{k} {v:.2f}" for k, v in r["runner_stages_median"].items())
            lines.append(f"| ↳ runner stages (s, median) | | runner | {stages} | |")
        for system, median in r.get("other_stages_median", {}).items():
            stages = ", ".join(f"{k} {v:.2f}" for k, v in median.items())
            lines.append(f"| ↳ runner stages (s, median) | | {system} | {stages} | |")
        for note in r.get("notes", []):
            lines.append(f"| ↳ {note} | | | | |")
    return "\n".join(lines)


def main() -> None:
    args = _parser().parse_args()
    warmup = args.warmup if args.warmup is not None else args.rows <= WARMUP_MAX_ROWS
    if args.only == "small":  # whole processes only: no session in this one
        _small(args)
        return
    if args.only == "tpch":
        _tpch(args, warmup)
        return
    if args.only == "spec-set":  # whole processes only
        _spec_set(args)
        return
    from bench.kafka import run_kafka_benchmarks

    scale = Scale(args.rows, args.repeats, args.buckets, warmup, frozenset(args.skip_peer))
    jars: list[str] = []
    conf = {"spark.ui.enabled": "false"}
    if args.only in (None, "mor", "change-feed", "hudi"):  # delta-spark as a peer, if it can be
        jars, extra_conf = delta_spark_jars()
        conf.update(extra_conf)
    with tempfile.TemporaryDirectory(prefix="runner-bench-") as tmp:
        results = _in_session(args, scale, Path(tmp), conf, jars)
        # the whole-process runs below start their own JVM
        if args.only in (None, "kafka"):
            results += run_kafka_benchmarks(
                Path(tmp) / "kafka", args.rows, args.repeats, args.buckets, warmup
            )
        if args.only == "debezium":  # not in the default run: minutes of JSON at any size
            from bench.debezium import run_debezium_benchmarks

            results += run_debezium_benchmarks(Path(tmp) / "debezium", scale, args.debezium_batches)
        results.append(
            {
                "scenario": "runner upsert, 6 rows into 400 (quickstart, whole process)",
                "runner_s": small_upsert_seconds(args.repeats, Path(tmp) / "quickstart"),
                "peers": {},
            }
        )
    results.append(
        {
            "scenario": "runner validate (2 specs, whole process)",
            "runner_s": validate_seconds(args.repeats),
            "peers": {},
        }
    )
    _report(args, results, scale, jars)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000, help="table size (default 200000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per system (median)")
    parser.add_argument("--buckets", type=int, default=16)
    parser.add_argument(
        "--only",
        choices=[
            "write",
            "expand",
            "mor",
            "scd2",
            "change-feed",
            "kafka",
            "debezium",
            "groups",
            "hudi",
            "small",
            "tpch",
            "spec-set",
        ],
        help="run one group of scenarios (default: all; mor: merge-on-read tables; scd2: a "
        "change feed's history, 1%% of the keys changed; change-feed: target.change_data_feed "
        "and skip_unchanged, a 1%% upsert and its replay, whole runner processes; kafka: a "
        "topic of --rows JSON records into an upsert table beside Spark's plain write and "
        "delta-rs, whole processes, against a local broker; debezium: a table's Debezium change "
        "events (a snapshot of --rows rows, then batches of 1%% updates and 0.1%% deletes) "
        "beside the same changes as plain JSON upserts, whole processes, against a local "
        "broker; only when asked; groups: file groups inside "
        "buckets, 100-key upserts into 8 partitions x 2 buckets, whole processes; hudi: "
        "Hudi 1.1.1 beside the runner, in a side environment made once; only when asked; "
        "small: small runs as whole processes, stage by stage, beside a bare SparkSession; "
        "tpch: TPC-H's lineitem at --scale and its refresh sets, warm and as whole processes, "
        "beside delta-rs, delta-spark and Hudi 1.1.1; only when asked; spec-set: --set-specs small "
        "specs as one `runner run DIR` beside a `runner run SPEC` process each, and with "
        "--parallel 2, whole processes; only when asked)",
    )
    _scenario_options(parser)
    parser.add_argument(
        "--out",
        type=Path,
        help="the results' JSON (default bench/results/write.json; --only NAME: "
        "bench/results/NAME.json, spec-set's spec_set.json)",
    )
    return parser


def _scenario_options(parser: argparse.ArgumentParser) -> None:
    """The options of single scenarios."""
    parser.add_argument(
        "--mor-keys",
        type=int,
        default=100,
        help="keys per upsert in the merge-on-read scenarios (default 100)",
    )
    parser.add_argument(
        "--mor-max-delta-files",
        type=int,
        help="target.compaction.max_delta_files of the MERGE_ON_READ table (default: the spec's)",
    )
    parser.add_argument(
        "--fractions",
        default="0.001,0.01,0.1",
        help="upsert batch sizes as fractions of --rows (default 0.001,0.01,0.1)",
    )
    parser.add_argument(
        "--skip-peer",
        action="append",
        default=[],
        choices=SKIPPABLE_PEERS,
        help="do not run this write peer (repeatable); the table says it was skipped",
    )
    parser.add_argument(
        "--warmup",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"one untimed run per system before the timed ones (default: only up to "
        f"{WARMUP_MAX_ROWS:,} rows; above, a warm-up costs minutes and JIT is noise)",
    )
    parser.add_argument(
        "--driver-merge-max-rows",
        type=int,
        help="target.driver_merge.max_rows of the runner's upserts (default: the spec's; "
        "0 merges every batch in a Spark job, to compare with the merge on the driver)",
    )
    parser.add_argument(
        "--merge-mode",
        choices=["event_time", "commit_time", "partial_update", "overwrite_non_defaults"],
        help="target.merge_mode of the runner's upserts (default: the spec's, event_time)",
    )
    _more_scenario_options(parser)


def _more_scenario_options(parser: argparse.ArgumentParser) -> None:
    """The options of the Debezium, groups and TPC-H scenarios."""
    parser.add_argument(
        "--debezium-batches",
        type=int,
        default=3,
        help="batches of changes after the snapshot in --only debezium (default 3)",
    )
    parser.add_argument(
        "--group-keys", type=int, default=100, help="keys per upsert of --only groups"
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="TPC-H scale factor of --only tpch (default 1: 6,000,000 lineitems; 0.01 for a "
        "smoke run)",
    )
    parser.add_argument(
        "--refresh-scale",
        type=float,
        help="--only tpch: the refresh sets as large as at this scale factor (default: --scale), "
        "to time the same refresh into a larger table",
    )
    parser.add_argument(
        "--table-type",
        action="append",
        choices=["COPY_ON_WRITE", "MERGE_ON_READ"],
        help="--only tpch: the runner's (and Hudi's) table type (repeatable; default both)",
    )
    parser.add_argument(
        "--set-specs", type=int, default=20, help="specs in the set of --only spec-set (default 20)"
    )
    parser.add_argument(
        "--set-max-rows",
        type=int,
        default=100_000,
        help="the largest batch of --only spec-set's specs; the smallest is 1,000 rows "
        "(default 100000)",
    )
    parser.add_argument(
        "--group-bytes",
        type=int,
        default=3 * 2**19,
        help="index.file_group_bytes of the grouped tables of --only groups (default 1.5 MiB)",
    )


def _in_session(
    args: argparse.Namespace, scale: Scale, tmp: Path, conf: dict, jars: list[str]
) -> list[dict]:
    """The scenarios that run in the bench's own Spark session, stopped after them."""
    from bench.change_feed import run_change_feed_benchmarks
    from bench.expand import run_expand_benchmarks
    from bench.groups import run_groups_benchmarks
    from bench.merge_on_read import run_mor_benchmarks
    from bench.scd2 import run_scd2_benchmarks
    from bench.write_scenarios import UpsertSettings, run_write_benchmarks
    from runner import logs
    from runner.jvm.session import spark_session
    from runner.spec.model import SparkSettings

    logs.configure("warning")
    spark = spark_session(SparkSettings(master="local[2]", conf=conf), "bench", jars=jars)
    only, results = args.only, []
    if only in (None, "write"):
        fractions = tuple(float(f) for f in args.fractions.split(","))
        settings = UpsertSettings(args.driver_merge_max_rows, args.merge_mode)
        results += run_write_benchmarks(spark, tmp, scale, fractions, settings)
    if only in (None, "expand"):
        results += run_expand_benchmarks(
            spark, tmp, scale.rows, scale.repeats, scale.buckets, scale.warmup
        )
    if only in (None, "mor"):
        results += run_mor_benchmarks(
            spark, tmp / "mor", scale, keys=args.mor_keys, max_delta_files=args.mor_max_delta_files
        )
    if only in (None, "scd2"):
        results += run_scd2_benchmarks(spark, tmp / "scd2", scale)
    if only in (None, "change-feed"):
        results += run_change_feed_benchmarks(spark, tmp / "change_feed", scale)
    if only in (None, "groups"):
        results += run_groups_benchmarks(
            spark, tmp / "groups", scale.rows, scale.repeats, args.group_keys, args.group_bytes
        )
    if only == "hudi":  # not in the default run: it makes a ~450 MB side environment
        from bench.hudi import run_hudi_benchmarks

        results += run_hudi_benchmarks(spark, tmp / "hudi", scale, args.mor_keys)
    spark.stop()
    return results


def _report(args: argparse.Namespace, results: list[dict], scale: Scale, jars: list[str]) -> None:
    """The tables on stdout, the results with what they were run at in --out."""
    from bench.change_feed_report import render_change_feed
    from bench.groups import render_groups

    print(render(results))
    if args.only in (None, "change-feed"):
        print("\n" + render_change_feed(results))
    if args.only in (None, "groups"):
        print("\n" + render_groups(results))
    if args.only == "debezium":
        from bench.debezium import render_debezium

        print("\n" + render_debezium(results))
    if args.only == "hudi":
        from bench.hudi_report import render_hudi

        print("\n" + render_hudi(results))
    print(f"\nsmall upsert: {results[-2]['runner_s']:.2f} s per run")
    print(f"validate: {results[-1]['runner_s']:.2f} s per call")
    meta = {
        "rows": args.rows,
        "repeats": args.repeats,
        "buckets": args.buckets,
        "warmup": scale.warmup,
        "skipped_peers": args.skip_peer,
        "mor_keys": args.mor_keys,
        "mor_max_delta_files": args.mor_max_delta_files,
        "merge_mode": args.merge_mode,
        "debezium_batches": args.debezium_batches,
        "delta_spark_jars": jars,
        "machine": f"{platform.machine()}, {platform.system()}",
        "python": platform.python_version(),
    }
    _write(_results_file(args), meta, results)


def _small(args: argparse.Namespace) -> None:
    from bench.small import render_small, run_small_benchmarks

    with tempfile.TemporaryDirectory(prefix="runner-bench-") as tmp:
        results = run_small_benchmarks(Path(tmp) / "small", args.rows, args.repeats)
    print(render_small(results))
    meta = {"rows": args.rows, "repeats": args.repeats, "python": platform.python_version()}
    _write(_results_file(args), meta, results)


def _tpch(args: argparse.Namespace, warmup: bool) -> None:
    """--only tpch: its own session, with delta-spark's jars when they can be had."""
    from bench.tpch import TABLE_TYPES, TpchRun, run_tpch_benchmarks
    from bench.tpch_report import render_tpch
    from runner import logs
    from runner.jvm.session import spark_session
    from runner.spec.model import SparkSettings

    logs.configure("warning")
    jars, conf = delta_spark_jars()
    settings = SparkSettings(master="local[2]", conf={"spark.ui.enabled": "false", **conf})
    spark = spark_session(settings, "bench", jars=jars)
    skip = frozenset(args.skip_peer)
    with tempfile.TemporaryDirectory(prefix="runner-bench-") as tmp:
        run = TpchRun(
            args.scale,
            args.repeats,
            warmup,
            skip,
            tuple(args.table_type or TABLE_TYPES),
            args.refresh_scale,
        )
        results = run_tpch_benchmarks(spark, Path(tmp) / "tpch", run)
    spark.stop()
    print(render(results))
    print(render_tpch(results))
    meta = {
        "scale_factor": args.scale,
        "refresh_scale": args.refresh_scale or args.scale,
        "repeats": args.repeats,
        "warmup": warmup,
        "skipped_peers": args.skip_peer,
        "delta_spark_jars": jars,
        "machine": f"{platform.machine()}, {platform.system()}",
        "python": platform.python_version(),
    }
    _write(_results_file(args), meta, results)


def _spec_set(args: argparse.Namespace) -> None:
    """--only spec-set: a set of specs as one process beside a process per spec."""
    from bench.spec_set import render_spec_set, run_spec_set_benchmarks

    with tempfile.TemporaryDirectory(prefix="runner-bench-") as tmp:
        result = run_spec_set_benchmarks(
            Path(tmp) / "spec_set", args.set_specs, args.set_max_rows, args.repeats
        )
    print(render_spec_set(result))
    meta = {
        "specs": args.set_specs,
        "max_rows": args.set_max_rows,
        "repeats": args.repeats,
        "machine": f"{platform.machine()}, {platform.system()}",
        "python": platform.python_version(),
    }
    _write(_results_file(args), meta, [result])


def _results_file(args: argparse.Namespace) -> Path:
    """--out, or a file per scenario group: a run of one group keeps the others' results."""
    name = (args.only or "write").replace("-", "_")
    return args.out or Path(f"bench/results/{name}.json")


def _write(out: Path, meta: dict, results: list[dict]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
