"""`runner history TABLE` finds a table's history from any way of writing its path, as the
user types it at a shell (no JVM: the history is a small Delta table beside the table)."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest
from click.testing import CliRunner
from deltalake import write_deltalake

from runner.cli import cli
from runner.observe import history
from runner.observe.record import RunRecord
from runner.summary import WriteFigures

AT = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def warehouse(tmp_path, monkeypatch):
    """A table `orders` with one run in its history, and the shell in its parent directory."""
    write_deltalake(str(tmp_path / "orders"), pd.DataFrame({"id": [1, 2]}))
    record = RunRecord(
        "cafe00000001", "run", "orders", str(tmp_path / "orders"), "0" * 16, "upsert",
        AT, AT + dt.timedelta(seconds=3), "committed", version=0, write=WriteFigures(inserted=2),
    )  # fmt: skip
    assert history.append(str(tmp_path / "_runner_history" / "orders"), [record])
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("name", ["orders", "./orders", "orders/"])
def test_a_relative_table_name_from_its_parent_directory(warehouse, name):
    shown = CliRunner().invoke(cli, ["history", name])
    assert shown.exit_code == 0, shown.output
    assert "committed" in shown.output and "1 of 1 record(s)" in shown.output


def test_the_table_itself_as_the_working_directory(warehouse, monkeypatch):
    monkeypatch.chdir(warehouse / "orders")
    shown = CliRunner().invoke(cli, ["history", "."])
    assert shown.exit_code == 0, shown.output
    assert "1 of 1 record(s)" in shown.output


def test_two_pipelines_writing_one_table_are_told_apart(warehouse):
    backfill = RunRecord(
        "cafe00000002", "run", "orders_backfill", str(warehouse / "orders"), "1" * 16,
        "bulk_insert", AT + dt.timedelta(hours=1), AT + dt.timedelta(hours=1, seconds=9),
        "committed", version=1, write=WriteFigures(inserted=5),
    )  # fmt: skip
    assert history.append(str(warehouse / "_runner_history" / "orders"), [backfill])
    shown = CliRunner().invoke(cli, ["history", "orders"])
    assert shown.exit_code == 0, shown.output
    head, newer, older = shown.output.splitlines()[:3]
    assert head.split()[:4] == ["started", "(UTC)", "pipeline", "kind"]
    assert newer.split()[2:4] == ["orders_backfill", "run"]
    assert older.split()[2:4] == ["orders", "run"]
