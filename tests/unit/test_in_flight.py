"""Heartbeats of writers in flight: written and removed around a block, and taken as alive
only while fresh and, on this machine, while their process lives."""

from __future__ import annotations

import os
import subprocess
import sys

from runner.storage.in_flight import (
    EXPIRES_SECONDS,
    IN_FLIGHT_DIR,
    RUNNER_DIR,
    Heartbeat,
    heartbeats,
    in_flight,
)
from runner.storage.location import TableLocation


def test_a_heartbeat_lives_while_its_block_runs_and_leaves_no_directory(tmp_path):
    table = tmp_path / "new_table"
    with in_flight(TableLocation(str(table)), "20261125000000000", "run"):
        (beat,) = heartbeats(TableLocation(str(table)))
        assert beat.instant == "20261125000000000" and beat.pid == os.getpid()
        assert beat.alive
    assert not table.exists(), "a failed first run leaves no directory behind"


def test_a_heartbeat_is_kept_beside_another_writers(tmp_path):
    (tmp_path / "data.parquet").write_bytes(b"x")
    location = TableLocation(str(tmp_path))
    with in_flight(location, "20261125000000001", "run"):
        with in_flight(location, "20261125000000002", "expansion"):
            assert {b.instant for b in heartbeats(location)} == {
                "20261125000000001",
                "20261125000000002",
            }
        assert [b.instant for b in heartbeats(location)] == ["20261125000000001"]
    assert not (tmp_path / RUNNER_DIR).exists() and (tmp_path / "data.parquet").exists()


def test_a_heartbeat_is_dead_when_stale_or_when_its_process_on_this_machine_is_gone(tmp_path):
    location = TableLocation(str(tmp_path))
    with in_flight(location, "20261125000000003", "run"):
        (mine,) = heartbeats(location)
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    gone = Heartbeat(mine.instant, mine.host, int(ended.stdout), mine.started, 1.0)
    elsewhere = Heartbeat(mine.instant, "another-pod", 1, "1", 1.0)
    assert mine.alive and not gone.alive
    assert elsewhere.alive  # its process cannot be seen from here: the age decides
    stale = Heartbeat(mine.instant, "another-pod", 1, "1", EXPIRES_SECONDS + 1)
    assert not stale.alive


def test_an_unreadable_heartbeat_counts_as_a_live_writer(tmp_path):
    (tmp_path / IN_FLIGHT_DIR).mkdir(parents=True)
    (tmp_path / IN_FLIGHT_DIR / "20261125000000004").write_text("{half written")
    (beat,) = heartbeats(TableLocation(str(tmp_path)))
    assert beat.instant == "20261125000000004" and beat.alive
