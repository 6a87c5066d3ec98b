"""A new table is never laid over files the runner did not write (no JVM needed)."""

from __future__ import annotations

import pytest

from runner.delta.directory import check_new_table_location, walk
from runner.errors import UserError
from runner.storage.location import locate

RUNNER_FILE = "00000003-aaaa-bbbb-cccc-0123456789ab-0_1-2-0_20261123120000000.parquet"


def test_a_missing_or_empty_directory_takes_a_new_table(tmp_path):
    check_new_table_location(locate(str(tmp_path / "missing")), "target.path")
    check_new_table_location(locate(str(tmp_path)), "target.path")


def test_files_a_killed_first_run_left_do_not_block_the_next(tmp_path):
    (tmp_path / "city=paris").mkdir()
    (tmp_path / "city=paris" / RUNNER_FILE).write_bytes(b"x")
    (tmp_path / "_delta_log").mkdir()  # a create that never finished
    check_new_table_location(locate(str(tmp_path)), "target.path")


def test_other_files_are_refused_with_their_names(tmp_path):
    (tmp_path / "data.csv").write_text("a,b\n")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "part-0.parquet").write_bytes(b"x")

    with pytest.raises(UserError) as refused:
        check_new_table_location(locate(str(tmp_path)), "target.path")

    message = str(refused.value)
    assert message.startswith(f"target.path {tmp_path} is not empty and holds no Delta table")
    assert "data.csv" in message and "old/part-0.parquet" in message
    assert "choose an empty location" in message


def test_a_file_as_the_table_path_is_refused(tmp_path):
    (tmp_path / "t").write_text("x")
    with pytest.raises(UserError, match="is a file"):
        check_new_table_location(locate(str(tmp_path / "t")), "target.path")


def test_walk_lists_a_nested_table_as_one_entry_and_skips_the_log(tmp_path):
    (tmp_path / "_delta_log").mkdir()
    (tmp_path / "_delta_log" / "00000000000000000000.json").write_text("{}")
    (tmp_path / "inner" / "_delta_log").mkdir(parents=True)
    (tmp_path / "inner" / "part.parquet").write_bytes(b"x")
    (tmp_path / RUNNER_FILE).write_bytes(b"xy")

    listed = {f.path: f for f in walk(locate(str(tmp_path)))}

    assert set(listed) == {"inner/_delta_log/", RUNNER_FILE}
    assert listed[RUNNER_FILE].written_by_runner and listed[RUNNER_FILE].size == 2
    assert not listed["inner/_delta_log/"].written_by_runner
