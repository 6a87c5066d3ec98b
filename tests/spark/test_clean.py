"""`runner clean` removes only the runner's own files that no retained version needs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd
import pytest
from deltalake import write_deltalake

from runner.commands.clean import clean_table
from runner.commands.run import run_pipeline
from runner.spec import load_spec
from tests.helpers import live_paths, read_table, write_batch, write_spec

pytestmark = pytest.mark.spark

DAY_AGO = time.time() - 24 * 3600


def _old(path: Path) -> None:
    os.utime(path, (DAY_AGO, DAY_AGO))


@pytest.fixture
def table(spark, tmp_path):
    """A table of two versions (the second replaces a bucket file), and around it: a user's
    files, a nested Delta table, and the files of a run killed before its commit."""
    spec_path = write_spec(
        tmp_path,
        {
            "operation": "upsert",
            "record_key": "id",
            "precombine_field": "v",
            "key_generator": {"type": "NON_PARTITIONED"},
            "index": {"buckets": 2},
            "cleaning": {"retain_commits": 1, "min_age_hours": 1},
        },
    )
    write_batch(tmp_path, pd.DataFrame({"id": [1, 2, 3, 4], "v": [1, 1, 1, 1]}))
    run_pipeline(load_spec(spec_path), spark=spark)
    write_batch(tmp_path, pd.DataFrame({"id": [1], "v": [2]}))
    run_pipeline(load_spec(spec_path), spark=spark)
    root = tmp_path / "table"
    for path in root.glob("*.parquet"):
        _old(path)
    live = live_paths(root)
    replaced = {p.name for p in root.glob("*.parquet")} - live
    assert len(replaced) == 1
    # the same file group, another instant: what a run killed before its commit leaves
    orphan = root / f"{next(iter(live)).rsplit('_', 1)[0]}_20200101000000000.parquet"
    orphan.write_bytes(b"left by a killed run")
    _old(orphan)
    (root / "data.csv").write_text("a user's file\n")
    _old(root / "data.csv")
    (root / "notes").mkdir()
    (root / "notes" / "readme.txt").write_text("keep me\n")
    write_deltalake(str(root / "nested"), pd.DataFrame({"x": [1]}))
    return load_spec(spec_path), root, replaced | {orphan.name}


def test_clean_removes_only_the_runners_unreferenced_files(table):
    spec, root, doomed = table
    rows = read_table(root)
    foreign = {"data.csv", "notes/readme.txt", "nested/_delta_log/"}

    planned = clean_table(spec, min_age_hours=0, dry_run=True)
    assert set(planned.files) == doomed
    assert set(planned.not_runners) == foreign
    assert all((root / f).exists() for f in doomed), "a dry run removes nothing"
    assert "3 file(s) the runner did not write, left alone:" in planned.render()

    done = clean_table(spec, min_age_hours=0)
    assert set(done.files) == doomed and done.bytes > 0
    assert not any((root / f).exists() for f in doomed)
    assert (root / "data.csv").read_text() == "a user's file\n"
    assert (root / "notes" / "readme.txt").exists() and (root / "nested" / "_delta_log").is_dir()
    assert {p.name for p in root.glob("*.parquet")} == live_paths(root)
    pd.testing.assert_frame_equal(read_table(root), rows)


def test_clean_keeps_files_younger_than_min_age(table):
    spec, root, doomed = table
    young = root / next(iter(doomed))
    os.utime(young, None)  # just written, as by a run still in progress

    done = clean_table(spec, min_age_hours=1)

    assert young.exists() and young.name not in done.files
    assert done.too_young == 1
    assert set(done.files) == doomed - {young.name}
