"""The three ways a pipeline's metrics go out: a real Pushgateway (tests/pushgateway.py),
node-exporter's textfile, and the HTTP endpoint of `runner run --continuous`.

Each PipelineMetrics stands for one `runner` process: a one-shot run makes one, observes
its run and is gone; the next run is a new one.
"""

from __future__ import annotations

import datetime as dt
import socket
import urllib.error
import urllib.request

import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families

from runner.errors import UserError
from runner.observe.metrics import PipelineMetrics
from runner.spec.model import MetricsSpec
from tests.unit.test_metrics import COMMITTED, START, TABLE, by_label, record, scrape, value

ALL_STAGES_IDLE = {"sources": 0.1}  # a run with nothing new only looks at its sources


def gateway_samples(url: str, pipeline: str) -> dict:
    """What the Pushgateway serves Prometheus for one pipeline's group."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    kept = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("runner_") and s.labels.get("pipeline") == pipeline:
                kept.append(s)
    samples: dict = {}
    for s in kept:
        labels = {k: v for k, v in s.labels.items() if k not in ("job", "instance")}
        samples.setdefault(s.name, {})[tuple(sorted(labels.items()))] = s.value
    return samples


def test_a_push_arrives_and_a_run_with_nothing_new_replaces_it_with_zeros(pushgateway):
    settings = MetricsSpec(pushgateway=pushgateway, job="runner-tests")
    PipelineMetrics("pushed", TABLE, settings, ["positive_fare"]).observe(COMMITTED)
    pushed = gateway_samples(pushgateway, "pushed")
    assert value(pushed, "runner_rows_total", outcome="inserted") == 60
    assert value(pushed, "runner_rejected_rows_total", expectation="positive_fare") == 5
    assert value(pushed, "runner_stage_duration_seconds", stage="write") == 10.25
    assert value(pushed, "runner_last_run_outcome", outcome="committed") == 1

    nothing_new = record("nothing_new", at=600, stage_seconds=ALL_STAGES_IDLE)
    PipelineMetrics("pushed", TABLE, settings, ["positive_fare"]).observe(nothing_new)
    after = gateway_samples(pushgateway, "pushed")
    assert set(after) == set(pushed)  # the same series, none left over from the first run
    for name in ("runner_rows_total", "runner_rejected_rows_total", "runner_written_bytes_total"):
        assert set(after[name].values()) == {0}, name
    stages = by_label(after, "runner_stage_duration_seconds", "stage")
    assert {k: v for k, v in stages.items() if v} == ALL_STAGES_IDLE
    assert value(after, "runner_last_run_outcome", outcome="nothing_new") == 1
    assert value(after, "runner_last_run_outcome", outcome="committed") == 0
    ended = (START + dt.timedelta(seconds=630)).timestamp()  # nothing new is a success
    assert value(after, "runner_last_success_timestamp_seconds") == ended


def test_a_failed_run_keeps_the_last_success_on_the_pushgateway(pushgateway):
    settings = MetricsSpec(pushgateway=pushgateway)
    PipelineMetrics("fails", TABLE, settings).observe(COMMITTED)
    failed = record("failed", at=600, error_class="RuntimeError", failed_stage="write")
    PipelineMetrics("fails", TABLE, settings).observe(failed)
    samples = gateway_samples(pushgateway, "fails")
    ended = (START + dt.timedelta(seconds=30)).timestamp()
    assert value(samples, "runner_last_success_timestamp_seconds") == ended
    assert value(samples, "runner_last_run_outcome", outcome="failed") == 1
    assert value(samples, "runner_rows_total", outcome="inserted") == 0  # the failed run's


def test_runner_pushgateway_names_the_gateway_when_the_spec_does_not(pushgateway, monkeypatch):
    monkeypatch.setenv("RUNNER_PUSHGATEWAY", pushgateway)
    metrics = PipelineMetrics("from_env", TABLE)
    assert metrics.push_url == pushgateway
    metrics.observe(COMMITTED)
    assert value(gateway_samples(pushgateway, "from_env"), "runner_files_added_total") == 6


def test_no_gateway_no_push(monkeypatch):
    monkeypatch.delenv("RUNNER_PUSHGATEWAY", raising=False)
    metrics = PipelineMetrics("quiet", TABLE)
    assert not metrics.wanted and metrics.push() is False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_pushgateway_that_is_down_is_a_warning_and_never_an_error():
    url = f"http://runner:s3cret-pw@127.0.0.1:{free_port()}"  # nothing listens there
    metrics = PipelineMetrics("down", TABLE, MetricsSpec(pushgateway=url))
    with structlog.testing.capture_logs() as events:
        metrics.observe(COMMITTED)  # no exception
        assert metrics.push() is False
    warnings = [e for e in events if e["event"] == "metrics_push_failed"]
    assert len(warnings) == 2 and warnings[0]["log_level"] == "warning"
    assert "127.0.0.1" in warnings[0]["pushgateway"]
    assert "s3cret-pw" not in str(events)  # a password in the URL is never logged


# ---------------------------------------------------------------- node-exporter's textfile


def test_the_textfile_holds_the_metrics_and_a_failed_run_keeps_the_last_success(tmp_path):
    path = tmp_path / "trips.prom"
    settings = MetricsSpec(textfile=str(path))
    PipelineMetrics("trips", TABLE, settings).observe(COMMITTED)
    first = scrape(path.read_text())
    assert value(first, "runner_rows_total", outcome="updated") == 25
    assert [p.name for p in tmp_path.iterdir()] == ["trips.prom"]  # written, then renamed

    failed = record("failed", at=600, error_class="RuntimeError")
    PipelineMetrics("trips", TABLE, settings).observe(failed)  # the next process
    after = scrape(path.read_text())
    assert value(after, "runner_last_run_outcome", outcome="failed") == 1
    assert value(after, "runner_rows_total", outcome="updated") == 0
    assert value(after, "runner_last_success_timestamp_seconds") == value(
        first, "runner_last_success_timestamp_seconds"
    )


def test_a_textfile_that_cannot_be_written_is_a_warning(tmp_path):
    (tmp_path / "blocker").write_text("a file where the textfile's directory would be")
    path = tmp_path / "blocker" / "trips.prom"
    metrics = PipelineMetrics("trips", TABLE, MetricsSpec(textfile=str(path)))
    with structlog.testing.capture_logs() as events:
        metrics.observe(COMMITTED)
    assert [e["event"] for e in events] == ["metrics_textfile_failed"]
    assert events[0]["path"] == str(path) and not path.exists()


# ---------------------------------------------------------------- the HTTP endpoint


def http_scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        return scrape(response.read().decode())


def test_the_endpoint_serves_counters_that_add_up_and_gauges_of_the_last_round():
    with PipelineMetrics("served", TABLE, expectations=["positive_fare"]) as metrics:
        port = metrics.serve(0, addr="127.0.0.1")
        assert port and metrics.wanted
        before = http_scrape(port)
        assert value(before, "runner_rows_total", outcome="read") == 0

        metrics.observe(COMMITTED)
        first = http_scrape(port)
        assert value(first, "runner_rows_total", outcome="read") == 100
        assert value(first, "runner_stage_duration_seconds", stage="keys") == 4.0

        metrics.observe(record("nothing_new", at=600, stage_seconds=ALL_STAGES_IDLE))
        second = http_scrape(port)
        assert value(second, "runner_rows_total", outcome="read") == 100  # no reset
        assert value(second, "runner_runs_total", outcome="committed") == 1
        assert value(second, "runner_runs_total", outcome="nothing_new") == 1
        assert value(second, "runner_stage_duration_seconds", stage="keys") == 0
        assert value(second, "runner_last_run_outcome", outcome="nothing_new") == 1
    with pytest.raises(urllib.error.URLError):  # closed: the port is free again
        http_scrape(port)


def test_a_port_that_is_taken_is_a_user_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        metrics = PipelineMetrics("served", TABLE, MetricsSpec(port=port))
        with pytest.raises(UserError, match=f"metrics.port {port}: cannot serve"):
            metrics.serve(addr="127.0.0.1")
        assert not metrics.wanted  # nothing is served
