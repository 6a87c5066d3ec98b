"""Two real `runner` processes writing one table at the same time.

Writer A stops just before its commit (RUNNER_FAULT=before_commit:wait), writer B runs and
commits in full, then A goes on: its commit is refused by delta-rs, it merges the buckets B
changed again and commits on top. With merge_mode commit_time the later commit wins, so
the final table shows both batches in commit order: B's rows, then A's over them.
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

from tests.helpers import write_batch, write_spec

RUNNER = [sys.executable, "-m", "runner"]
TARGET = {
    "operation": "upsert",
    "merge_mode": "commit_time",
    "record_key": "id",
    "key_generator": {"partition_fields": "country"},
    "index": {"buckets": 4},
}


def _rows(ids, country: str, tag: str) -> pd.DataFrame:
    ids = list(ids)
    return pd.DataFrame({"id": ids, "country": [country] * len(ids), "v": [tag] * len(ids)})


def _writer(directory: Path, table: Path, name: str, batch: pd.DataFrame) -> Path:
    directory.mkdir(exist_ok=True)
    write_batch(directory, batch)
    return write_spec(directory, {**TARGET, "path": str(table)}, name=name)


def _upsert(reference: pd.DataFrame, batch: pd.DataFrame) -> pd.DataFrame:
    merged = pd.concat([reference, batch]).drop_duplicates(["country", "id"], keep="last")
    return merged.sort_values(["country", "id"]).reset_index(drop=True)


def _table(table: Path) -> pd.DataFrame:
    frame = DeltaTable(str(table)).to_pyarrow_table().to_pandas()[["id", "country", "v"]]
    return frame.sort_values(["country", "id"]).reset_index(drop=True)


@pytest.mark.e2e
@pytest.mark.slow
def test_two_processes_at_once_lose_no_update(tmp_path):
    table = tmp_path / "table"
    base = pd.concat([_rows(range(30), "nl", "base"), _rows(range(30), "us", "base")])
    spec = _writer(tmp_path / "base", table, "base", base)
    done = subprocess.run([*RUNNER, str(spec)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    reference = _upsert(base.iloc[:0], base)

    rounds = [
        ("overlapping", _rows(range(0, 20), "nl", "a1"), _rows(range(10, 30), "nl", "b1")),
        ("disjoint", _rows(range(0, 10), "us", "a2"), _rows(range(0, 10), "nl", "b2")),
        ("overlapping again", _rows(range(5, 25), "us", "a3"), _rows(range(0, 30), "us", "b3")),
    ]
    for i, (label, batch_a, batch_b) in enumerate(rounds):
        spec_a = _writer(tmp_path / f"a{i}", table, f"a{i}", batch_a)
        spec_b = _writer(tmp_path / f"b{i}", table, f"b{i}", batch_b)
        marker = tmp_path / f"a{i}.held"
        env = {
            **os.environ,
            "RUNNER_FAULT": "before_commit:wait",
            "RUNNER_FAULT_MARKER": str(marker),
        }
        writer_a = subprocess.Popen(
            [*RUNNER, str(spec_a)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert writer_a.poll() is None, writer_a.communicate()[1][-2000:]
            assert time.monotonic() < deadline, f"{label}: writer A never reached its commit"
            time.sleep(0.2)
        done_b = subprocess.run([*RUNNER, str(spec_b)], capture_output=True, text=True, timeout=300)
        assert done_b.returncode == 0, done_b.stderr
        Path(f"{marker}.go").touch()
        _, err_a = writer_a.communicate(timeout=300)
        assert writer_a.returncode == 0, err_a[-2000:]
        if label.startswith("overlapping"):
            assert '"remerge"' in err_a, f"{label}: A merged B's buckets again"
        reference = _upsert(_upsert(reference, batch_b), batch_a)  # commit order: B, then A
        pd.testing.assert_frame_equal(_table(table), reference, check_dtype=False)
    assert DeltaTable(str(table)).version() == 1 + 2 * len(rounds)
