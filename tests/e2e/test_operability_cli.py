"""What operators see of real `runner run` processes: the metrics a Pushgateway receives (and
a run with nothing new replacing them with zeros), the textfile, the OpenLineage events of
each run with its parent, and the run history."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.lineage_collector import Collector
from tests.pushgateway import GuardedGateway

ROOT = Path(__file__).resolve().parents[2]
PARENT_RUN = str(uuid.uuid4())
LINEAGE_PASSWORD = "s3cr3t-lineage-pass"


def _metrics(gateway: GuardedGateway, pipeline: str) -> dict[tuple[str, str], float]:
    """The pipeline's samples on the Pushgateway, by (name, the outcome or stage label)."""
    found = {}
    for family in text_string_to_metric_families(gateway.get("/metrics")):
        for sample in family.samples:
            if sample.labels.get("pipeline") == pipeline and sample.name.startswith("runner_"):
                label = sample.labels.get("outcome") or sample.labels.get("stage") or ""
                found[(sample.name, label)] = sample.value
    return found


@pytest.mark.e2e
def test_runs_push_metrics_send_lineage_and_leave_history(tmp_path, pushgateway_basic_auth):
    """The Pushgateway and the OpenLineage collector sit behind basic auth; the spec and the
    OpenLineage configuration name their passwords as `${env:NAME}` in the URLs, which the
    runner resolves and sends as an Authorization header, and never shows."""
    gateway = pushgateway_basic_auth
    shutil.copytree(
        ROOT / "pipelines", tmp_path / "pipelines", ignore=shutil.ignore_patterns("warehouse")
    )
    spec_file = tmp_path / "pipelines" / "quickstart.yaml"
    spec = yaml.safe_load(spec_file.read_text())
    spec["sources"][0]["incremental"] = "new_files"
    pushgateway = gateway.url.replace("://", f"://{gateway.user}:${{env:PGW_PW}}@")
    spec["metrics"] = {"pushgateway": pushgateway, "textfile": "metrics/trips.prom"}
    spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    pair = base64.b64encode(f"ol:{LINEAGE_PASSWORD}".encode()).decode()
    collector = Collector(authorization=f"Basic {pair}")
    lineage_url = collector.url.replace("://", "://ol:${env:OL_PW}@")
    (tmp_path / "openlineage.yml").write_text(f"transport:\n  type: http\n  url: {lineage_url}\n")
    env = {
        **os.environ,
        "OPENLINEAGE_CONFIG": str(tmp_path / "openlineage.yml"),
        "OPENLINEAGE_PARENT_ID": f"airflow/nightly.load_trips/{PARENT_RUN}",
        "PGW_PW": gateway.password,
        "OL_PW": LINEAGE_PASSWORD,
    }
    printed = []

    def run() -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, "-m", "runner", "run", str(spec_file)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "metrics_push_failed" not in done.stderr and "lineage_event" not in done.stderr
        printed.append(done.stdout + done.stderr)
        return done

    run()
    pushed = _metrics(gateway, "trips")
    assert pushed[("runner_rows_total", "inserted")] == 400
    assert pushed[("runner_rows_total", "read")] == 420
    assert pushed[("runner_last_run_outcome", "committed")] == 1
    assert pushed[("runner_table_version", "")] == 1
    assert pushed[("runner_table_buckets", "")] == 80  # 16 in each of 5 partitions
    assert pushed[("runner_written_bytes_total", "")] > 0
    success = pushed[("runner_last_success_timestamp_seconds", "")]
    textfile = (tmp_path / "pipelines" / "metrics" / "trips.prom").read_text()
    assert 'runner_rows_total{outcome="inserted",pipeline="trips"' in textfile

    assert "nothing new" in run().stdout
    pushed = _metrics(gateway, "trips")
    assert pushed[("runner_rows_total", "inserted")] == 0  # zeros, not the last run's
    assert pushed[("runner_last_run_outcome", "nothing_new")] == 1
    assert pushed[("runner_last_run_outcome", "committed")] == 0
    assert pushed[("runner_last_success_timestamp_seconds", "")] > success

    events = collector.events
    assert [e["eventType"] for e in events] == ["START", "COMPLETE", "START", "COMPLETE"]
    assert events[0]["run"]["runId"] == events[1]["run"]["runId"] != events[2]["run"]["runId"]
    complete = events[1]
    assert complete["job"]["name"] == "trips"
    assert complete["run"]["facets"]["parent"]["run"]["runId"] == PARENT_RUN
    assert complete["inputs"][0]["name"].endswith("pipelines/data/trips")
    (output,) = complete["outputs"]
    assert output["name"].endswith("pipelines/warehouse/trips")
    fields = {f["name"] for f in output["facets"]["schema"]["fields"]}
    assert {"trip_id", "city", "fare", "_record_key"} <= fields
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == 400

    shown = subprocess.run(
        [sys.executable, "-m", "runner", "history", str(spec_file), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr  # and no abort at exit
    records = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [r["outcome"] for r in records] == ["nothing_new", "committed"]
    assert collector.refused == 0
    textfile = (tmp_path / "pipelines" / "metrics" / "trips.prom").read_text()
    shown_anywhere = "".join(printed) + shown.stdout + shown.stderr + textfile
    for password in (gateway.password, LINEAGE_PASSWORD):
        assert password not in shown_anywhere
        assert password not in json.dumps(collector.events)
