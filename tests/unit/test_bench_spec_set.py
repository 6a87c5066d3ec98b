"""The many-tables bench's plan, how it reads a set run's output, and its table (no JVM:
tests/spark/test_bench_smoke.py runs the scenario at its smallest size)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import cast

import pytest

from bench.spec_set import (
    ONE,
    PARALLEL,
    SEPARATE,
    SMALL_ROWS,
    SpecRun,
    _result,
    plan,
    render_spec_set,
    spec_runs,
)
from runner.commands.spec_set_run import SpecOutcome, summary_table
from runner.pipeline.spec_set import Member
from runner.summary import RunSummary


def test_twenty_specs_spread_their_sizes_and_chain_two_after_a_first_load():
    planned = plan(20, 100_000)
    kinds = [p.kind for p in planned]
    assert len(planned) == 20 and kinds.count("chained") == 2
    assert sum(p.small for p in planned) == 5
    sizes = sorted(p.rows for p in planned if not p.small)
    assert sizes[0] == SMALL_ROWS and sizes[-1] == 100_000
    assert {"load", "upsert"} <= set(kinds)
    head, first, second = planned[0], planned[-2], planned[-1]
    assert head.kind == "load"
    assert (first.reads, second.reads) == (head.name, first.name)
    # a spec runs after the one it reads (the separate processes' order), and no small
    # upsert is the first of the set by name (that one starts Spark)
    names = [p.name for p in planned]
    assert all(names.index(p.reads) < names.index(p.name) for p in planned if p.reads)
    assert not min(planned, key=lambda p: p.name).small
    assert len(set(names)) == 20


def test_fewer_than_four_specs_are_refused():
    with pytest.raises(ValueError, match="at least 4"):
        plan(3, 100_000)


def _member(name: str) -> Member:
    """What the summary table reads of a member: its name."""
    return cast(Member, SimpleNamespace(name=name))


def _outcome(name: str, seconds: float) -> SpecOutcome:
    summary = RunSummary(name, "r", f"/t/{name}", "upsert", "i", version=1)
    return SpecOutcome(_member(name), "committed", summary, seconds=seconds)


def test_each_spec_of_the_set_run_is_read_from_its_summary_table_and_its_log_event():
    outcomes = [_outcome("s00_load_1000", 4.32), _outcome("s01_upsert_1000", 0.61)]
    stdout = "\n".join(["s00_load_1000: ...", "  time  plan 0.3s", *summary_table(outcomes)])
    event = {"event": "run_finished", "pipeline": "s01_upsert_1000", "stage_seconds": {"plan": 0.3}}
    stderr = '{"event": "spec_set_started"}\n' + json.dumps(event) + "\n"
    runs = spec_runs(stdout, stderr)
    assert runs == [
        SpecRun("s00_load_1000", 0, 4.3, {}),
        SpecRun("s01_upsert_1000", 1, 0.6, {"plan": 0.3}),
    ]


def test_a_spec_that_did_not_commit_fails_the_scenario():
    failed = SpecOutcome(_member("s00"), "failed", reason="boom", seconds=0.2)
    with pytest.raises(RuntimeError, match="s00 did not commit"):
        spec_runs("\n".join(summary_table([failed])), "")


def test_the_table_shows_each_way_beside_the_separate_processes_and_the_small_tables_cost():
    planned = plan(4, 2_000)
    small = next(p.name for p in planned if p.small)
    runs = [SpecRun("s00_load_1000", 0, 4.3, {}), SpecRun(small, 1, 0.6, {"plan": 0.4})]
    walls = {SEPARATE: [40.0], ONE: [8.0], PARALLEL: [10.0]}
    lines = render_spec_set(_result(planned, 2_000, walls, [runs])).splitlines()
    assert "| 4 `runner run SPEC` processes, one after another | 40.00 | 1.00 |" in lines
    assert f"| one `{ONE}` | 8.00 | 0.20 |" in lines
    assert f"| one `{PARALLEL}` | 10.00 | 0.25 |" in lines
    assert lines[-1].startswith("each additional small table in the warm application: 0.60 s")
    assert lines[-1].endswith("stages: plan 0.40")
