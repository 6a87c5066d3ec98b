"""Incremental file ingestion as real processes: exactly once across a SIGKILL, and
`runner run --continuous` over rounds with data arriving between them, stopped by SIGTERM."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable

from tests.e2e.test_kill import _runner
from tests.kill import kill_at

RUNNER = [sys.executable, "-m", "runner"]


def _setup(tmp_path: Path) -> Path:
    spec = {
        "name": "events",
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"}},
        "sources": [
            {"name": "events", "format": "parquet", "path": "inbox", "incremental": "new_files"}
        ],
        "target": {
            "path": "table",
            "operation": "upsert",
            "record_key": "id",
            "precombine_field": "ts",
            "key_generator": {"partition_fields": "country"},
            "index": {"buckets": 2},
        },
    }
    (tmp_path / "inbox").mkdir()
    path = tmp_path / "events.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _drop(tmp_path: Path, i: int) -> pd.DataFrame:
    """File i: ids 10*i .. 10*i+14 (overlapping the previous file), ts = i."""
    ids = [f"e{n}" for n in range(10 * i, 10 * i + 15)]
    frame = pd.DataFrame({"id": ids, "country": ["nl"] * 15, "ts": [i] * 15, "v": [f"f{i}"] * 15})
    partial = tmp_path / "inbox" / f".{i}.parquet.tmp"  # written, then renamed: never half-read
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), partial)
    partial.rename(tmp_path / "inbox" / f"{i}.parquet")
    return frame


def _reference(frames: list[pd.DataFrame]) -> pd.DataFrame:
    both = pd.concat(frames).sort_values("ts", kind="stable").drop_duplicates("id", keep="last")
    return both.sort_values("id").reset_index(drop=True)


def _table(tmp_path: Path) -> pd.DataFrame:
    frame = DeltaTable(str(tmp_path / "table")).to_pyarrow_table().to_pandas()
    return frame[["id", "country", "ts", "v"]].sort_values("id").reset_index(drop=True)


def _checkpoints(tmp_path: Path) -> list[list[str]]:
    """The file names each data commit recorded as its checkpoint, oldest first."""
    history = DeltaTable(str(tmp_path / "table")).history()
    commits = [c["runner"] for c in reversed(history) if isinstance(c.get("runner"), dict)]
    return [c["checkpoint"]["events"]["names"] for c in commits if "checkpoint" in c]


@pytest.mark.e2e
@pytest.mark.slow
def test_new_files_once_each_across_a_sigkill(tmp_path):
    spec = _setup(tmp_path)
    frames = [_drop(tmp_path, 0)]
    assert _runner(tmp_path, str(spec)).returncode == 0
    frames.append(_drop(tmp_path, 1))
    for point in ("keyed", "before_commit"):
        kill_at(tmp_path, point, str(spec))
        assert DeltaTable(str(tmp_path / "table")).version() == 1
    done = _runner(tmp_path, str(spec), "--summary-json", "s.json")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "s.json").read_text())["rows_read"] == 15
    again = _runner(tmp_path, str(spec))
    assert "nothing new in events" in again.stdout
    pd.testing.assert_frame_equal(_table(tmp_path), _reference(frames), check_dtype=False)
    assert _checkpoints(tmp_path) == [["0.parquet"], ["1.parquet"]]


def _lines(stream, out: queue.Queue) -> None:
    try:
        for line in stream:
            out.put(line)
    except ValueError:  # communicate() closed the stream at the test's end
        return


def _wait_for(lines: queue.Queue, event: str, seen: list[str], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        seen.append(line)
        if f'"event": "{event}"' in line:
            return
    pytest.fail(f"no {event} within {timeout}s; last log lines:\n{''.join(seen[-20:])}")


def start_continuous(
    work: Path, spec: str, summary_json: bool = True
) -> tuple[subprocess.Popen, queue.Queue]:
    """`runner run SPEC --continuous` (rounds 1 s apart, JSON logs, summaries in r.json), and
    a queue its log lines arrive on."""
    args = ["run", spec, "--continuous", "--min-interval", "1s"]
    args += ["--summary-json", "r.json"] if summary_json else []
    proc = subprocess.Popen(
        [*RUNNER, "--log-format", "json", *args],
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stderr, lines), daemon=True).start()
    return proc, lines


@pytest.mark.e2e
@pytest.mark.slow
def test_continuous_rounds_then_sigterm_finishes_the_round_in_flight(tmp_path):
    spec = _setup(tmp_path)
    frames = [_drop(tmp_path, 0)]
    proc, lines = start_continuous(tmp_path, str(spec))
    seen: list[str] = []
    try:
        _wait_for(lines, "commit_done", seen)
        _wait_for(lines, "nothing_new", seen)  # an idle round: no commit
        for i in (1, 2):
            frames.append(_drop(tmp_path, i))
            _wait_for(lines, "commit_done", seen)
        frames.append(_drop(tmp_path, 3))
        _wait_for(lines, "batch_keyed", seen)  # the fourth round is in flight
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, "".join(seen[-20:])
    assert "stopped after" in out and "4 commit(s)" in out
    rounds = json.loads((tmp_path / "r.json").read_text())
    assert [r["version"] for r in rounds if r["version"] is not None] == [1, 2, 3, 4]
    assert all(r["nothing_new"] for r in rounds if r["version"] is None)
    pd.testing.assert_frame_equal(_table(tmp_path), _reference(frames), check_dtype=False)
    assert _checkpoints(tmp_path) == [["0.parquet"], ["1.parquet"], ["2.parquet"], ["3.parquet"]]


@pytest.mark.e2e
@pytest.mark.slow
def test_a_set_runs_in_rounds_with_every_specs_metrics_on_one_endpoint(tmp_path):
    import urllib.request

    from tests.s3 import free_port

    spec = yaml.safe_load(_setup(tmp_path).read_text())
    port = free_port()
    (tmp_path / "specs").mkdir()
    copies = {**spec, "name": "copies", "metrics": {"port": port}}
    copies["target"] = {**spec["target"], "path": "../copies"}
    copies["sources"] = [{**spec["sources"][0], "path": "../inbox"}]
    events = {**spec, "target": {**spec["target"], "path": "../table"}}
    events["sources"] = copies["sources"]
    for name, body in (("copies", copies), ("events", events)):
        (tmp_path / "specs" / f"{name}.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
    frames = [_drop(tmp_path, 0)]
    proc, lines = start_continuous(tmp_path, "specs", summary_json=False)
    seen: list[str] = []
    try:
        for _ in range(2):  # both specs' first round
            _wait_for(lines, "commit_done", seen)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
            exposition = page.read().decode()
        frames.append(_drop(tmp_path, 1))
        for _ in range(2):
            _wait_for(lines, "commit_done", seen)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, "".join(seen[-20:])
    assert "specs: stopped after" in out and "4 commit(s)" in out
    assert 'pipeline="copies"' in exposition and 'pipeline="events"' in exposition
    pd.testing.assert_frame_equal(_table(tmp_path), _reference(frames), check_dtype=False)
    copied = DeltaTable(str(tmp_path / "copies")).to_pyarrow_table().to_pandas()
    assert sorted(copied["id"]) == sorted(_reference(frames)["id"])
