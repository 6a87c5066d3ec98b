"""Prometheus metrics of a pipeline's runs (runner/observe/metrics.py, run_metrics.py).

Run records are built by hand and the target table by the runner's own writer pieces (no
Spark); every check reads the exposition text back with prometheus-client's parser, as a
Prometheus server would.
"""

from __future__ import annotations

import ast
import datetime as dt
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families

from runner.delta.log_entry import NewFile
from runner.delta.snapshot import open_table
from runner.delta.table_setup import TableFeaturesWanted, create_table
from runner.delta.transaction import Commit, commit
from runner.index.layout import BucketLayout
from runner.index.naming import data_file_path, new_file_id
from runner.observe import run_metrics
from runner.observe.metrics import PipelineMetrics
from runner.observe.record import RunRecord
from runner.observe.run_metrics import table_state
from runner.pipeline.commit_stage import RunRule
from runner.storage.location import locate
from runner.storage.meta_columns import META_FIELDS
from runner.storage.parquet_file import BucketFile
from tests.helpers import run_record

ROOT = Path(__file__).resolve().parents[2]
START = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
TABLE = "/lake/trips"


def record(outcome: str = "committed", at: int = 0, **fields) -> RunRecord:
    """A run of pipeline `trips` that started `at` seconds after START and took 30 s."""
    values = {
        "run_id": f"run-{outcome}-{at}",
        "kind": "run",
        "pipeline": "trips",
        "table": TABLE,
        "spec_hash": "0123456789abcdef",
        "operation": "upsert",
        "started_at": START + dt.timedelta(seconds=at),
        "ended_at": START + dt.timedelta(seconds=at + 30),
        "outcome": outcome,
        **fields,
    }
    return run_record(**values)


COMMITTED = record(
    version=4,
    rows_read=100,
    inserted=60,
    updated=25,
    deleted=5,
    unchanged=3,
    rows_dropped=4,
    rows_quarantined=3,
    rejected_by_rule={"positive_fare": 5, "key_generator": 2},
    files_added=6,
    files_removed=2,
    bytes_written=123_456,
    stage_seconds={"sources": 2.5, "keys": 4.0, "write": 10.25, "commit": 1.5},
    batch_id="2026-03-01",
    instant="20260301120000000",
)


def scrape(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Sample name -> {sorted labels: value}, from the exposition text."""
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def value(samples, name: str, **labels: str) -> float:
    """The value of the one sample of `name` with `labels` (beside pipeline and table)."""
    found = [v for key, v in samples[name].items() if labels.items() <= dict(key).items()]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def by_label(samples, name: str, label: str) -> dict[str, float]:
    return {dict(key)[label]: v for key, v in samples[name].items()}


def test_names_types_and_labels_follow_prometheus_conventions():
    metrics = PipelineMetrics("trips", TABLE, expectations=["positive_fare", "known_city"])
    metrics.add(COMMITTED)
    text = metrics.exposition()
    types = {f.name: f.type for f in text_string_to_metric_families(text)}
    # a counter's family is named without _total, its samples with it
    assert types == {
        "runner_rows": "counter",
        "runner_rejected_rows": "counter",
        "runner_written_bytes": "counter",
        "runner_files_added": "counter",
        "runner_files_removed": "counter",
        "runner_runs": "counter",
        "runner_stage_duration_seconds": "gauge",
        "runner_run_duration_seconds": "gauge",
        "runner_last_run_timestamp_seconds": "gauge",
        "runner_last_success_timestamp_seconds": "gauge",
        "runner_last_run_outcome": "gauge",
    }
    samples = scrape(text)
    for name, series in samples.items():
        assert name.endswith("_total") == (types.get(name) is None), name  # counters only
        for key in series:
            labels = dict(key)
            assert (labels.pop("pipeline"), labels.pop("table")) == ("trips", TABLE)
            assert set(labels) <= {"outcome", "stage", "expectation"}, name

    rows = by_label(samples, "runner_rows_total", "outcome")
    assert rows == {
        "read": 100,
        "inserted": 60,
        "updated": 25,
        "deleted": 5,
        "unchanged": 3,
        "dropped": 4,
        "quarantined": 3,
    }
    # every expectation of the spec and both built-in rules, 0 when they rejected nothing
    assert by_label(samples, "runner_rejected_rows_total", "expectation") == {
        "positive_fare": 5,
        "known_city": 0,
        "key_generator": 2,
        "malformed_record": 0,
        "schema_mismatch": 0,
    }
    assert value(samples, "runner_written_bytes_total") == 123_456
    assert value(samples, "runner_files_added_total") == 6
    assert value(samples, "runner_files_removed_total") == 2
    assert value(samples, "runner_run_duration_seconds") == 30
    ended = (START + dt.timedelta(seconds=30)).timestamp()
    assert value(samples, "runner_last_run_timestamp_seconds") == ended
    assert value(samples, "runner_last_success_timestamp_seconds") == ended
    outcomes = by_label(samples, "runner_last_run_outcome", "outcome")
    assert outcomes == {
        "committed": 1,
        "done": 0,
        "nothing_new": 0,
        "nothing_to_do": 0,
        "already_committed": 0,
        "failed": 0,
        "interrupted": 0,
    }
    assert by_label(samples, "runner_runs_total", "outcome") == outcomes
    stages = by_label(samples, "runner_stage_duration_seconds", "stage")
    assert {k: v for k, v in stages.items() if v} == {
        "sources": 2.5,
        "keys": 4.0,
        "write": 10.25,
        "commit": 1.5,
    }


def test_no_label_takes_its_values_from_a_run_s_identity_or_data():
    """Two runs with every identifying field different give the same series: only values
    change, so the number of series cannot grow with runs."""
    series = []
    for i, when in enumerate((0, 600)):
        metrics = PipelineMetrics("trips", TABLE, expectations=["positive_fare"])
        metrics.add(
            record(
                "failed",
                at=when,
                batch_id=f"batch-{i}",
                instant=f"2026030112{i:02d}00000",
                error_class="BadRecordsError",
                error_message=f"row {i} broke positive_fare",
                failed_stage="keys",
                checkpoints_before={"raw": f"file-{i}"},
                rejected_by_rule={"positive_fare": i + 1},
            )
        )
        text = metrics.exposition()
        assert "batch-" not in text and "broke" not in text and "file-" not in text
        series.append({(name, key) for name, s in scrape(text).items() for key in s})
    assert series[0] == series[1]


def test_counters_add_up_across_rounds_and_gauges_show_the_last():
    metrics = PipelineMetrics("trips", TABLE, expectations=["positive_fare"])
    metrics.add(COMMITTED)
    first = scrape(metrics.exposition())
    second_run = record(
        "committed",
        at=600,
        rows_read=10,
        inserted=10,
        bytes_written=1000,
        files_added=1,
        rejected_by_rule={"positive_fare": 1},
        stage_seconds={"sources": 0.5, "write": 1.0},
    )
    metrics.add(second_run)
    second = scrape(metrics.exposition())
    assert value(second, "runner_rows_total", outcome="read") == 110
    assert value(second, "runner_rows_total", outcome="inserted") == 70
    assert value(second, "runner_rows_total", outcome="updated") == 25  # kept, not reset
    assert value(second, "runner_rejected_rows_total", expectation="positive_fare") == 6
    assert value(second, "runner_written_bytes_total") == 124_456
    assert value(second, "runner_runs_total", outcome="committed") == 2
    for name, series in first.items():  # within a process no counter ever goes down
        if name.endswith("_total"):
            assert all(second[name][key] >= v for key, v in series.items()), name
    # gauges: the second run's, a stage it did not run at 0
    stages = by_label(second, "runner_stage_duration_seconds", "stage")
    assert (stages["sources"], stages["write"], stages["keys"]) == (0.5, 1.0, 0)
    ended = (START + dt.timedelta(seconds=630)).timestamp()
    assert value(second, "runner_last_success_timestamp_seconds") == ended

    metrics.add(record("failed", at=1200, error_class="RuntimeError", failed_stage="write"))
    third = scrape(metrics.exposition())
    assert value(third, "runner_last_run_outcome", outcome="failed") == 1
    assert value(third, "runner_last_run_outcome", outcome="committed") == 0
    assert value(third, "runner_runs_total", outcome="failed") == 1
    # a failed run leaves the last success where it was
    assert value(third, "runner_last_success_timestamp_seconds") == ended
    assert value(third, "runner_last_run_timestamp_seconds") > ended


def test_a_failed_run_in_a_new_process_reports_no_last_success():
    """A one-shot process that saw only a failed run has no success time to give: it
    leaves the metric out (a Pushgateway keeps the one pushed before)."""
    metrics = PipelineMetrics("trips", TABLE)
    metrics.add(record("failed", error_class="RuntimeError"))
    samples = scrape(metrics.exposition())
    assert "runner_last_success_timestamp_seconds" not in samples
    assert value(samples, "runner_last_run_outcome", outcome="failed") == 1


def test_before_any_run_the_counters_are_at_zero():
    metrics = PipelineMetrics("trips", TABLE, expectations=["positive_fare"])
    samples = scrape(metrics.exposition())
    assert all(v == 0 for name in samples for v in samples[name].values())
    outcomes = by_label(samples, "runner_rows_total", "outcome")
    assert set(outcomes) == set(run_metrics.ROW_OUTCOMES)
    assert "runner_last_run_outcome" not in samples


def test_every_stage_a_run_times_is_in_the_stage_list():
    """RUN_STAGES is what a push sets to 0 when a run skipped a stage: a stage missing from
    it would keep an older run's seconds on a Pushgateway."""
    timed = set()
    for path in (ROOT / "runner" / "pipeline").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "stage"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                timed.add(node.args[0].value)
    assert timed and timed <= set(run_metrics.RUN_STAGES), timed - set(run_metrics.RUN_STAGES)


def test_the_built_in_rules_are_the_pipeline_s():
    from runner.pipeline.quality import KEY_RULE, MALFORMED_RULE, MISMATCH_RULE

    assert run_metrics.BUILT_IN_RULES == (KEY_RULE, MALFORMED_RULE, MISMATCH_RULE)


# ---------------------------------------------------------------- the table after a run


def runner_table(path: Path, rows: dict[tuple[str, int], int], layout: BucketLayout) -> None:
    """A runner table written without Spark: one file per (partition path, bucket) with
    that many rows, committed as version 1 (version 0 creates the table)."""
    schema = pa.schema([*META_FIELDS, pa.field("fare", pa.float64())])
    location = locate(str(path))
    settings = {"runner.format.version": "1", **layout.to_configuration()}
    create_table(location, "t", schema, settings, TableFeaturesWanted())
    added = []
    for (partition, bucket), n in rows.items():
        relative = data_file_path(partition, new_file_id(bucket), "0-0-0", "20260301120000000")
        out = BucketFile(pafs.LocalFileSystem(), f"{path}/{relative}", schema, key_filter=True)
        keys = [f"{partition}-{bucket}-{i}" for i in range(n)]
        columns = {
            "_commit_time": ["20260301120000000"] * n,
            "_commit_seqno": keys,
            "_record_key": keys,
            "_partition_path": [partition] * n,
            "_bucket": [bucket] * n,
            "fare": [float(i) for i in range(n)],
        }
        out.write(pa.table(columns, schema=schema))
        assert out.close()
        added.append(NewFile(relative, out.size, out.stats.to_json()))
    snapshot = open_table(location)
    changes = Commit(
        writer="run",
        operation="WRITE",
        metadata={"operation": "insert"},
        added=tuple(added),
        buckets=frozenset(rows),
        schema=schema,
    )
    assert commit(snapshot, changes, RunRule()) == 1


def test_the_table_s_version_buckets_and_skew_come_from_its_log(tmp_path):
    table = tmp_path / "trips"
    layout = BucketLayout(4, {"city=b": 2})
    runner_table(table, {("city=a", 0): 500, ("city=a", 2): 10, ("city=b", 1): 50}, layout)
    size = {(p.parent.name, int(p.name[:8])): os.path.getsize(p) for p in table.rglob("*.parquet")}
    # by hand: city=a has 4 buckets (two empty), city=b its own 2 (one empty)
    skew_a = size[("city=a", 0)] / ((size[("city=a", 0)] + size[("city=a", 2)]) / 4)
    skew_b = size[("city=b", 1)] / (size[("city=b", 1)] / 2)
    metrics = PipelineMetrics("trips", str(table))
    metrics.add(COMMITTED, table_state(str(table)))
    samples = scrape(metrics.exposition())
    assert value(samples, "runner_table_version") == 1
    assert value(samples, "runner_table_buckets") == 4 + 2
    assert value(samples, "runner_table_skew_ratio") == pytest.approx(max(skew_a, skew_b), 1e-3)
    assert value(samples, "runner_table_bytes") == sum(size.values())
    assert value(samples, "runner_table_files") == 3
    assert value(samples, "runner_table_rows") == 560
    assert {dict(k)["table"] for k in samples["runner_table_version"]} == {str(table)}


def test_a_table_that_cannot_be_read_gives_no_table_metrics_and_no_error(tmp_path):
    assert table_state(str(tmp_path / "none")) is None  # no table yet: nothing to say
    broken = tmp_path / "broken"
    (broken / "_delta_log").mkdir(parents=True)
    (broken / "_delta_log" / "00000000000000000000.json").write_text("{not json\n")
    with structlog.testing.capture_logs() as events:
        assert table_state(str(broken)) is None
    assert [e["event"] for e in events] == ["metrics_table_unread"]
    metrics = PipelineMetrics("trips", str(broken))
    metrics.add(COMMITTED, table_state(str(broken)))
    assert not [n for n in scrape(metrics.exposition()) if n.startswith("runner_table_")]
