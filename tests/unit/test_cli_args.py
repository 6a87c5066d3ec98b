"""The CLI takes what users type: a mistyped command or spec file name is answered with the
name they meant, in the test's process (tests/cli_in_process.py), before any JVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_in_process import no_spark, run_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def beside_a_spec(tmp_path, monkeypatch):
    """The shell in a directory holding orders.yaml (the quickstart spec)."""
    no_spark(monkeypatch)
    (tmp_path / "orders.yaml").write_text((ROOT / "pipelines" / "quickstart.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_mistyped_command_is_named_not_run_as_a_spec(beside_a_spec):
    done = run_cli("reed", "warehouse/trips")
    assert done.returncode == 2
    assert "No such command 'reed'" in done.stderr and "'read'" in done.stderr
    history = run_cli("histroy")
    assert history.returncode == 2 and "Did you mean 'history'?" in history.stderr


def test_a_mistyped_spec_file_name_is_answered_with_the_one_beside_it(beside_a_spec):
    for typed, meant in [
        ("orders.yml", "orders.yaml"),
        ("orders", "orders.yaml"),
        ("./order.yaml", "./orders.yaml"),
    ]:
        done = run_cli(typed)
        assert done.returncode == 2, typed
        assert done.stderr.strip() == (
            f"{typed}:1:1: cannot read the file: No such file or directory; did you mean {meant}?"
        )
    nothing_near = run_cli("zzz.yaml")
    assert nothing_near.returncode == 2 and "did you mean" not in nothing_near.stderr
