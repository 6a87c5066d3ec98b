"""`runner clean` while a real `runner` process holds files it has not committed yet.

The run stops just before its commit (RUNNER_FAULT=before_commit:wait) and a clean with
`--min-age-hours 0` runs meanwhile: the run's heartbeat keeps its files, so the version it
then commits is whole. Where the heartbeat has lapsed (the process was stopped longer than
it lasts, here: its heartbeat file removed), clean may take the files, and the run then
refuses to commit a version that names them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from deltalake import DeltaTable

from runner.storage.in_flight import IN_FLIGHT_DIR
from tests.helpers import live_paths, write_batch, write_spec

RUNNER = [sys.executable, "-m", "runner"]
TARGET = {
    "operation": "upsert",
    "record_key": "id",
    "precombine_field": "v",
    "key_generator": {"partition_fields": "country"},
    "index": {"buckets": 2},
}


def _rows(ids, v: int) -> pd.DataFrame:
    ids = list(ids)
    return pd.DataFrame({"id": ids, "country": ["nl"] * len(ids), "v": [v] * len(ids)})


def _runner(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RUNNER, *args], capture_output=True, text=True, timeout=300)


def _held_upsert(tmp_path: Path, table: Path) -> tuple[subprocess.Popen, Path]:
    """A second run of the pipeline, waiting before its commit with every file written."""
    work = tmp_path / "second"
    work.mkdir()
    write_batch(work, _rows(range(5, 15), 2))
    spec = write_spec(work, {**TARGET, "path": str(table)})
    marker = tmp_path / "held"
    env = {**os.environ, "RUNNER_FAULT": "before_commit:wait", "RUNNER_FAULT_MARKER": str(marker)}
    proc = subprocess.Popen(
        [*RUNNER, str(spec)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 180
    while not marker.exists():
        if proc.poll() is not None:
            pytest.fail(f"the run ended before its commit: {proc.stderr.read()[-2000:]}")
        assert time.monotonic() < deadline, "the run never reached its commit"
        time.sleep(0.2)
    return proc, marker


@pytest.fixture
def table(tmp_path) -> tuple[Path, Path]:
    first = tmp_path / "first"
    first.mkdir()
    write_batch(first, _rows(range(10), 1))
    table = tmp_path / "table"
    spec = write_spec(first, {**TARGET, "path": str(table)})
    done = _runner(str(spec))
    assert done.returncode == 0, done.stderr
    return table, spec


@pytest.mark.e2e
@pytest.mark.slow
def test_clean_keeps_the_files_of_a_run_in_flight(tmp_path, table):
    table, spec = table
    proc, marker = _held_upsert(tmp_path, table)
    written = {str(p.relative_to(table)) for p in table.rglob("*.parquet")} - live_paths(table)
    assert written, "the held run has written its files"

    cleaned = _runner("clean", str(spec), "--min-age-hours", "0")
    Path(f"{marker}.go").touch()
    out, err = proc.communicate(timeout=300)

    assert cleaned.returncode == 0, cleaned.stderr
    assert "still in flight kept" in cleaned.stdout, cleaned.stdout
    assert proc.returncode == 0, err[-3000:]
    assert "committed version 2" in out
    live = live_paths(table)
    assert written <= live
    assert all((table / path).exists() for path in live)
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pandas().sort_values("id")
    assert rows["id"].tolist() == list(range(15))
    assert not list(table.glob(f"{IN_FLIGHT_DIR}/*")), "the heartbeat goes with the run"


@pytest.mark.e2e
@pytest.mark.slow
def test_a_run_whose_files_were_cleaned_commits_nothing(tmp_path, table):
    """A heartbeat that lapsed (the process stopped for longer than it lasts): clean may
    take the files, and the run must then fail rather than commit a version without them."""
    table, spec = table
    proc, marker = _held_upsert(tmp_path, table)
    for beat in (table / IN_FLIGHT_DIR).iterdir():
        beat.unlink()
    before = DeltaTable(str(table)).to_pyarrow_table().to_pandas().sort_values("id")

    cleaned = _runner("clean", str(spec), "--min-age-hours", "0")
    Path(f"{marker}.go").touch()
    _, err = proc.communicate(timeout=300)

    assert cleaned.returncode == 0, cleaned.stderr
    assert "removed" in cleaned.stdout and "in flight" not in cleaned.stdout
    assert proc.returncode == 1, err[-3000:]
    message = [line for line in err.splitlines() if line.startswith("failed:")]
    assert message and "are gone before its commit" in message[0], err[-3000:]
    assert "Traceback" not in err
    assert DeltaTable(str(table)).version() == 1
    after = DeltaTable(str(table)).to_pyarrow_table().to_pandas().sort_values("id")
    pd.testing.assert_frame_equal(after.reset_index(drop=True), before.reset_index(drop=True))
