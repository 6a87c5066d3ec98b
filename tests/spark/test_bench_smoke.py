"""The benchmark scenarios at the smallest size: they run and their result checks pass.

No timing is asserted here; figures come from `python -m bench` (docs/performance.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.change_feed import RUNNER, run_change_feed_benchmarks
from bench.debezium import DEBEZIUM, PLAIN, render_debezium, run_debezium_benchmarks
from bench.expand import run_expand_benchmarks
from bench.kafka import Run
from bench.merge_on_read import run_mor_benchmarks
from bench.scale import Scale
from bench.tpch import COLD, DELTA_RS, DELTA_SPARK, HUDI, SPARK_WRITE, WARM
from bench.write_scenarios import run_write_benchmarks
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec


def test_benchmark_scenarios_run_and_check_their_results(spark, tmp_path):
    results = run_write_benchmarks(spark, tmp_path / "w", Scale(800, 1, 2), fractions=(0.1,))
    results += run_expand_benchmarks(spark, tmp_path / "e", rows=800, repeats=1, buckets=2)
    assert len(results) == 4
    for r in results:
        assert r["runner_s"] > 0 and all(s > 0 for s in r["peers"].values()), r
    one_partition = results[2]
    assert "in one partition" in one_partition["scenario"]
    # the runner rewrites only the buckets of the one partition; a full rewrite everything
    assert (
        one_partition["touched"]["runner buckets"]
        <= 2
        < one_partition["touched"]["runner files in the table before"]
    )
    replaced = one_partition["bytes_replaced"]
    assert 0 < replaced["runner"] < replaced["naive spark rewrite"]


def test_merge_on_read_scenarios_run_and_check_their_results(spark, tmp_path):
    upsert, read, compact = run_mor_benchmarks(
        spark, tmp_path, Scale(800, 1, 2, warmup=False), keys=20, upserts=3
    )
    for r in (upsert, read, compact):
        assert r["runner_s"] > 0 and all(s > 0 for s in r["peers"].values()), r
    # the merge-on-read upsert writes the batch's rows and deletion vectors, not the buckets
    written = upsert["bytes_written"]
    assert 0 < written["runner MERGE_ON_READ"] < written["runner COPY_ON_WRITE"]
    assert upsert["touched"]["runner MOR buckets given deletion vectors + a delta file"] > 0
    assert read["touched"]["files with deletion vectors"] > 0
    assert compact["bytes_written"]["runner compact"] > 0


@pytest.mark.slow  # four whole `runner` processes, a JVM each
def test_change_feed_scenarios_run_and_check_their_results(spark, tmp_path):
    upsert, replay = run_change_feed_benchmarks(
        spark, tmp_path, Scale(800, 1, 2, warmup=False), table_types=["MERGE_ON_READ"]
    )
    runner = {
        line["change_data_feed"]: line for line in upsert["change_feed"] if line["system"] == RUNNER
    }
    # with the feed, the upsert also writes _change_data files, which the check read back
    assert runner[False]["bytes"]["change_data"] == 0 < runner[True]["bytes"]["change_data"]
    assert "2 rows per key" in runner[True]["check"], runner[True]
    assert upsert["cdf_overhead"][RUNNER]["bytes"] > 1
    # a replayed batch writes nothing when unchanged rows are skipped, all of it when not
    replays = {line["skip_unchanged"]: line for line in replay["change_feed"]}
    assert replays[True]["bytes"]["total"] == 0 and replays[True]["adds"] == 0
    assert replays[False]["bytes"]["change_data"] > 0 and replays[False]["updated"] == 8
    assert replays[True]["unchanged"] == 8


def test_tpch_scenario_runs_and_checks_every_table_after_every_step(spark, tmp_path):
    from bench.hudi_env import SideEnvironmentProblem
    from bench.tpch import TpchRun, run_tpch_benchmarks
    from bench.tpch_env import tpchgen

    try:
        tpchgen()  # installed once into the bench's cache
    except SideEnvironmentProblem as exc:
        pytest.skip(f"tpchgen-cli cannot be installed: {exc}")
    skip = frozenset({"runner-cold", "delta-spark", "hudi"})  # JVMs of their own, or slow
    results = run_tpch_benchmarks(spark, tmp_path, TpchRun(0.001, warmup=False, skip=skip))
    # every step of both table types, each engine's table already checked against the sums
    steps = [(r["tpch"]["table_type"], r["tpch"]["step"]) for r in results]
    assert steps == [
        (t, s) for t in ("COPY_ON_WRITE", "MERGE_ON_READ") for s in ("load", "rf1", "rf2", "update")
    ]
    for r in results:
        assert r["runner_s"] > 0 and r["peers"][DELTA_RS] > 0, r
        assert set(r["peers_skipped"]) == {COLD, DELTA_SPARK, HUDI}
        # Spark's plain write is the load's scale, and only the load's
        assert (SPARK_WRITE in r["peers"]) == (r["tpch"]["step"] == "load"), r
    mor_delete = results[6]
    # merge-on-read deletes with deletion vectors; delta-rs' merge rewrites the files
    written = mor_delete["bytes_written"]
    assert 0 < written[WARM] < written[DELTA_RS] / 4, written


@pytest.mark.slow  # a broker's topics and four runs, in the test's session
def test_debezium_scenario_runs_and_checks_its_results(spark, kafka_broker, tmp_path):
    def in_session(spec_file: Path, spec: dict[str, Any]) -> Run:  # no JVM per run
        spec_file.write_text(json.dumps(spec))
        summary = run_pipeline(load_spec(spec_file), spark).to_dict()
        return Run(1.0, sum(summary["stage_seconds"].values()), summary)

    snapshot, batch = run_debezium_benchmarks(
        tmp_path, Scale(200, 1, 2, warmup=False), 1, kafka_broker, in_session
    )
    # the checks passed: each run's table is the database's, both tables the same rows
    assert snapshot["debezium"]["changes"] == 200
    assert batch["debezium"]["rows_after"] == 199  # 2 updated, 1 deleted
    messages = batch["debezium"]["messages"]
    assert messages[DEBEZIUM] == messages[PLAIN] + 1  # the delete's tombstone
    assert "| batch 1 | 3 |" in render_debezium([snapshot, batch])


@pytest.mark.slow  # a `runner run DIR` process (--parallel 2: tests/spark/test_topic_routing.py)
def test_spec_set_scenario_runs_and_checks_every_table(spark, tmp_path):
    from bench.spec_set import ONE, SEPARATE, render_spec_set, run_spec_set_benchmarks

    def alone(spec: Path) -> None:  # in the test's session: no JVM per spec
        run_pipeline(load_spec(spec), spark)

    result = run_spec_set_benchmarks(tmp_path, 4, 2_000, 1, alone, systems=(SEPARATE, ONE))
    # every table of each way was read back and checked before this returned
    assert [s["kind"] for s in result["specs"]] == ["load", "upsert", "chained", "chained"]
    assert all(result["wall_s"][system] > 0 for system in (SEPARATE, ONE))
    [runs] = result["set_run_spec_seconds"]
    assert [r["name"] for r in runs] == [s["name"] for s in result["specs"]]
    assert result["per_table"]["seconds"] is not None
    assert "each additional small table" in render_spec_set(result)
