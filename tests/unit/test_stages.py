"""The run summary's stage times: a stage inside another (a re-merge inside the commit)
counts as itself only, so the seconds add up to the run's time, and stages are listed in
the order they started."""

from __future__ import annotations

import time

import structlog

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


def test_a_failure_is_kept_once_with_the_innermost_stage_and_raised_as_it_is(tmp_path):
    """The history's failed_stage and the `stage_failed` log event name the stage the error
    happened in, once; the error itself reaches the caller unwrapped (its class sets the
    exit code)."""
    from runner.errors import BadRecordsError
    from runner.pipeline.context import RunContext, RunOptions
    from runner.spec import load_spec
    from tests.helpers import city_target, write_spec

    spec = load_spec(write_spec(tmp_path, city_target("upsert")))
    ctx = RunContext.start(spec, RunOptions())
    error = BadRecordsError("no record key")
    with structlog.testing.capture_logs() as events:
        try:
            with ctx.stage("commit"), ctx.stage("remerge"):
                raise error
        except BadRecordsError as raised:
            assert raised is error
    failure = ctx.stages.failure
    assert failure is not None and failure.stage == "remerge" and failure.cause is error
    assert failure.error_class == "BadRecordsError"
    failed = [e for e in events if e["event"] == "stage_failed"]
    assert failed == [
        {
            "event": "stage_failed",
            "stage": "remerge",
            "error": "BadRecordsError",
            "log_level": "warning",
        }
    ]
