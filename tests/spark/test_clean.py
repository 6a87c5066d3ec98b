"""`runner clean` removes only the runner's own files that no retained version needs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable, write_deltalake

from runner.actions.clean import clean_table
from runner.cli import cli
from runner.delta.snapshot import open_table
from runner.errors import UserError
from runner.pipeline.run import run_pipeline
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


def test_clean_never_follows_a_symbolic_link_out_of_the_table(table, tmp_path):
    """`ln -s ../other/dir table/archive`: the other table's files are not this table's,
    whatever their names; the link itself is someone else's file, left alone and named."""
    spec, root, doomed = table
    other = tmp_path / "other"
    other.mkdir()
    theirs = [other / f"{name.rsplit('_', 1)[0]}_20200101000000000.parquet" for name in doomed]
    for path in theirs:
        path.write_bytes(b"another table's live file")
        _old(path)
    (root / "archive").symlink_to(other, target_is_directory=True)
    (root / theirs[0].name.replace("2020", "2019")).symlink_to(theirs[0])

    done = clean_table(spec, min_age_hours=0)

    assert set(done.files) == doomed
    assert all(path.read_bytes() == b"another table's live file" for path in theirs)
    assert {"archive", theirs[0].name.replace("2020", "2019")} <= set(done.not_runners)


def test_clean_keeps_a_live_file_the_log_names_with_an_empty_segment(spark, tmp_path):
    """A table whose log names `city=https://example.com/<file>` (the runner refuses such a
    partition value now; a table written before, or by hand, may have one): the directory
    walk finds `city=https:/example.com/<file>`, and clean must know it for the same file."""
    spec_path = write_spec(
        tmp_path,
        {
            "operation": "upsert",
            "record_key": "id",
            "precombine_field": "v",
            "key_generator": {"type": "SIMPLE", "partition_fields": "city"},
            "index": {"buckets": 1},
        },
    )
    write_batch(tmp_path, pd.DataFrame({"id": [1], "city": ["x"], "v": [1]}))
    run_pipeline(load_spec(spec_path), spark=spark)
    root = tmp_path / "table"
    (stored,) = open_table(str(root)).files()
    moved = f"city=https://example.com/{stored.path.rsplit('/', 1)[1]}"
    (root / "city=https:" / "example.com").mkdir(parents=True)
    (root / stored.path).rename(root / moved.replace("//", "/"))
    log = root / "_delta_log" / "00000000000000000001.json"
    log.write_text(log.read_text().replace(stored.path, moved))
    assert DeltaTable(str(root)).get_add_actions(flatten=True)["path"].to_pylist() == [moved]
    for path in root.rglob("*.parquet"):
        _old(path)

    done = clean_table(load_spec(spec_path), min_age_hours=0)

    assert done.files == []
    assert (root / moved.replace("//", "/")).exists()


def test_reading_a_version_whose_files_were_cleaned_says_which_versions_can_be_read(table):
    spec, root, _ = table
    clean_table(spec, min_age_hours=0)  # keeps the files of the last version only

    cleaned = CliRunner().invoke(cli, ["read", str(root), "--as-of", "1"])
    kept = CliRunner().invoke(cli, ["read", str(root), "--as-of", "2", "--format", "json"])

    assert isinstance(cleaned.exception, UserError)  # exit code 2, one line
    message = str(cleaned.exception)
    assert f"version 1 of {root} cannot be read: 1 of its files are gone" in message
    assert message.endswith("versions 2..2 can be read")
    assert kept.exit_code == 0, kept.output
