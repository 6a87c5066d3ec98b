"""The runner CLI as a user runs it: a subprocess, real Spark, a real Delta table."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

ROOT = Path(__file__).resolve().parents[2]
RUNNER = [sys.executable, "-m", "runner"]
SUMMARY_KEYS = {
    "table",
    "version",
    "operation",
    "instant",
    "rows_read",
    "inserted",
    "updated",
    "deleted",
    "duplicates_dropped",
    "files_added",
    "files_removed",
    "bytes_written",
    "buckets_touched",
    "stage_seconds",
}


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """The bundled example pipeline, run once from a copy of pipelines/."""
    work = tmp_path_factory.mktemp("quickstart")
    shutil.copytree(
        ROOT / "pipelines", work / "pipelines", ignore=shutil.ignore_patterns("warehouse")
    )
    done = subprocess.run(
        [*RUNNER, "pipelines/quickstart.yaml", "--summary-json", "summary.json"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return work, done


@pytest.mark.e2e
def test_quickstart_runs_and_summarizes(quickstart):
    work, done = quickstart
    assert done.returncode == 0, done.stderr
    assert "trips: upsert committed version 1 of " in done.stdout
    summary = json.loads((work / "summary.json").read_text())
    assert summary.keys() >= SUMMARY_KEYS
    # 425 input lines, 5 voided trips filtered by the transform, 20 corrections de-duplicated
    assert (summary["rows_read"], summary["inserted"], summary["duplicates_dropped"]) == (
        420,
        400,
        20,
    )
    table = DeltaTable(str(work / "pipelines" / "warehouse" / "trips"))
    assert table.version() == summary["version"] == 1
    assert table.to_pyarrow_table().num_rows == 400
    assert summary["files_added"] == summary["buckets_touched"] == len(table.file_uris())


@pytest.mark.e2e
def test_logs_are_json_with_one_run_id_and_spark_is_quiet(quickstart):
    _, done = quickstart
    events, other = [], []
    for line in done.stderr.splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            other.append(line)
    assert {e["event"] for e in events} >= {"run_started", "commit_done", "run_finished"}
    assert len({e["run_id"] for e in events}) == 1
    assert not [line for line in other if " INFO " in line], other


@pytest.mark.e2e
def test_a_spec_that_disagrees_with_the_table_exits_2_before_spark(quickstart, tmp_path):
    work, _ = quickstart
    spec = (
        (work / "pipelines" / "quickstart.yaml").read_text().replace("buckets: 16", "buckets: 32")
    )
    (work / "pipelines" / "more_buckets.yaml").write_text(spec)
    done = subprocess.run(
        [*RUNNER, "pipelines/more_buckets.yaml"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "error: the spec disagrees with the table" in done.stderr
    assert "index.buckets: table has '16'" in done.stderr
    assert "spark_starting" not in done.stderr


def test_missing_java_is_explained(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # no java on it
    shutil.copytree(
        ROOT / "pipelines", tmp_path / "pipelines", ignore=shutil.ignore_patterns("warehouse")
    )
    done = subprocess.run(
        [*RUNNER, "pipelines/quickstart.yaml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "Java not found" in done.stderr and "openjdk-17-jre-headless" in done.stderr
    assert "Traceback" not in done.stderr and "Py4J" not in done.stderr


def test_an_invalid_spec_exits_2_with_located_problems(tmp_path):
    spec = (ROOT / "pipelines" / "quickstart.yaml").read_text().replace("buckets: 16", "buckets: 0")
    (tmp_path / "p.yaml").write_text(spec)
    done = subprocess.run([*RUNNER, "p.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 2
    assert (
        "p.yaml:" in done.stderr
        and "target.index.buckets: must be at least 1, got 0" in done.stderr
    )
