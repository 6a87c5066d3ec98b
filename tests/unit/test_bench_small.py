"""The small-run bench's table: each run's stages, and the first query's floor beside them."""

from __future__ import annotations

from bench.small import render_small


def test_the_first_query_is_shown_with_its_plan_and_keys_beside_the_runs():
    stages = {"start": 2.3, "plan": 0.9, "keys": 0.8, "write": 0.1, "commit": 0.01, "rest": 1.1}
    floor = {"floor: SparkSession start, one tiny job, stop": 9.5}
    results = [
        {
            "scenario": "quickstart corrections (whole process)",
            "runner_s": 5.2,
            "peers": floor,
            "small": {"stages": stages, "plan_and_keys": 1.7},
        },
        {
            "scenario": "first query as a small run starts",
            "first_query": {"plan": 0.17, "keys": 0.64, "plan_and_keys": 0.81},
        },
        {"scenario": "floor with the quick JIT (whole process)", "runner_s": 5.41, "peers": floor},
    ]
    lines = render_small(results).splitlines()
    assert "| quickstart corrections (whole process) | 5.20 | 0.55 |" in lines[2]
    assert lines[2].endswith("| 1.70 |")
    assert (
        "first query as a small run starts: plan 0.17 s, keys 0.64 s, plan + keys 0.81 s" in lines
    )
    assert "floor with the quick JIT (whole process): 5.41 s" in lines
