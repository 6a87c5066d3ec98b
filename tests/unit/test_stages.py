"""The run summary's stage times: a stage inside another (a re-merge inside the commit)
counts as itself only, so the seconds add up to the run's time, and stages are listed in
the order they started."""

from __future__ import annotations

import time

from runner.summary import Stages


def test_a_nested_stage_is_counted_once_and_listed_after_its_outer_stage():
    stages = Stages()
    started = time.perf_counter()
    with stages.stage("write"):
        time.sleep(0.02)
    with stages.stage("commit"):
        time.sleep(0.02)
        with stages.stage("remerge"):
            time.sleep(0.05)
    wall = time.perf_counter() - started
    assert list(stages.seconds) == ["write", "commit", "remerge"]
    assert stages.seconds["remerge"] >= 0.05
    assert stages.seconds["commit"] < 0.05  # its own 0.02 s, not the re-merge's
    assert abs(sum(stages.seconds.values()) - wall) < 0.01
