"""The Grafana dashboard and the Prometheus alert rules shipped in ops/: they load, and every
query in them names metrics, labels and label values the runner emits."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from runner.observe import run_metrics
from runner.observe.metrics import PipelineMetrics
from runner.observe.run_metrics import TableState
from runner.summary import OUTCOMES
from tests.unit.test_metrics import COMMITTED, TABLE

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "ops" / "grafana" / "runner-dashboard.json"
ALERTS = ROOT / "ops" / "prometheus" / "runner-alerts.yaml"

METRIC = re.compile(r"\b(runner_[a-z0-9_]+)\b")
SELECTOR = re.compile(r"\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(?:=~|!~|!=|=)\s*"([^"]*)"')
GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
# pipeline and table on every metric, their own labels; job and instance, which Prometheus
# (or the Pushgateway's grouping key) adds
LABELS = {"pipeline", "table", "outcome", "stage", "expectation", "job", "instance"}


def emitted() -> dict[str, set[str]]:
    """Sample name -> label names, from what a PipelineMetrics renders after a run with a
    table: the runner's own output, not a list kept by hand."""
    metrics = PipelineMetrics("trips", TABLE, expectations=["positive_fare"])
    metrics.add(COMMITTED, TableState(version=3, buckets=8, skew=1.5, bytes=10, files=2, rows=5))
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(metrics.exposition()):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            queries.append(variable["query"]["query"])
    return queries


def alert_rules() -> list[dict]:
    rules = yaml.safe_load(ALERTS.read_text())
    return [rule for group in rules["groups"] for rule in group["rules"]]


def check_query(query: str, names: dict[str, set[str]]) -> None:
    used = METRIC.findall(query)
    assert used, f"names no runner metric: {query}"
    unknown = set(used) - set(names)
    assert not unknown, f"{query}: the runner emits no {unknown}"
    for selector in SELECTOR.findall(query):
        for label, wanted in MATCHER.findall(selector):
            assert label in LABELS, f"{query}: no metric has the label {label!r}"
            if label == "outcome" and not wanted.startswith("$"):
                assert wanted in {*run_metrics.ROW_OUTCOMES, *OUTCOMES}, query
    for grouping in GROUPING.findall(query):
        labels = {g.strip() for g in grouping.split(",") if g.strip()}
        assert labels <= LABELS, f"{query}: groups by unknown labels {labels - LABELS}"


def test_the_module_s_declared_names_are_what_it_emits():
    assert set(emitted()) == set(run_metrics.NAMES)


def test_the_dashboard_is_valid_json_and_queries_only_emitted_metrics():
    dashboard = json.loads(DASHBOARD.read_text())
    names = emitted()
    assert {v["name"] for v in dashboard["templating"]["list"]} >= {"pipeline"}
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for query in dashboard_queries():
        check_query(query, names)
        if "label_values" not in query:
            assert '{pipeline=~"$pipeline"}' in query, f"ignores the pipeline variable: {query}"
    shown = {m for q in dashboard_queries() for m in METRIC.findall(q)}
    # the panels the issue asks for: rows by outcome, last success, last outcome, stages,
    # quarantined by expectation, bytes written, the table's buckets and skew
    assert shown >= {
        "runner_rows_total",
        "runner_last_success_timestamp_seconds",
        "runner_last_run_outcome",
        "runner_stage_duration_seconds",
        "runner_rejected_rows_total",
        "runner_written_bytes_total",
        "runner_table_buckets",
        "runner_table_skew_ratio",
    }


def test_the_alert_rules_are_valid_yaml_and_query_only_emitted_metrics():
    rules = alert_rules()
    names = emitted()
    assert {r["alert"] for r in rules} == {"RunnerNoRecentSuccess", "RunnerRowsQuarantined"}
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["labels"]["severity"]
        check_query(rule["expr"], names)
    by_name = {r["alert"]: r["expr"] for r in rules}
    assert "time() - " in by_name["RunnerNoRecentSuccess"]
    assert "runner_last_success_timestamp_seconds" in by_name["RunnerNoRecentSuccess"]
    assert 'increase(runner_rows_total{outcome="quarantined"}' in by_name["RunnerRowsQuarantined"]
