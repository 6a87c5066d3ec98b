"""`runner restore SPEC --to VERSION|INSTANT` as a user runs it (click's test runner: the
restore starts no JVM), on tables the runner wrote: the rows of the old version read back
by delta-rs, Polars and delta-spark, the layout and schema as of then, the checkpoints and
batch ids set back, the undo in the change data feed followed by a chained pipeline, files
gone refused, and a writer committing meanwhile."""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path

import pandas as pd
import polars as pl
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from runner.actions.expand import ExpansionRequest, expand_table
from runner.actions.restore import RestoreSummary, run_restore
from runner.actions.restore_plan import plan_restore
from runner.cli import cli
from runner.commands.read import read_rows
from runner.delta.snapshot import open_table
from runner.errors import CommitConflictError, UserError
from runner.pipeline.context import RunOptions
from runner.pipeline.run import run_pipeline
from runner.sources.checkpoint import starting_points
from runner.spec import load_spec
from tests.delta_spark import read_with_delta_spark
from tests.helpers import (
    city_rows,
    city_target,
    file_bytes,
    read_table,
    write_batch,
    write_spec,
)

DATA = ["id", "city", "ts", "v"]


def _run(spark, tmp_path: Path, spec: Path, frame: pd.DataFrame, batch_id: str | None = None):
    write_batch(tmp_path, frame)
    return run_pipeline(load_spec(spec), spark=spark, options=RunOptions(batch_id=batch_id))


def _restore(spec: Path, *args: str):
    return CliRunner().invoke(cli, ["restore", str(spec), *args], catch_exceptions=False)


def _refused(spec: Path, *args: str, command: str = "restore") -> str:
    """The one-line error of a command refused as a user's problem (exit 2)."""
    result = CliRunner().invoke(cli, [command, str(spec), *args])
    assert isinstance(result.exception, UserError), result.output
    assert result.exception.exit_code == 2
    return str(result.exception)


def _chained(tmp_path: Path, name: str, target: dict, **incremental: str) -> Path:
    """The spec of pipeline `name` (in tmp_path/name) reading tmp_path/table through a
    `delta` source `up` with `incremental: {since: last, **incremental}`."""
    directory = tmp_path / name
    directory.mkdir()
    source = {
        "name": "up",
        "format": "delta",
        "path": str(tmp_path / "table"),
        "incremental": {"since": "last", **incremental},
    }
    spec = directory / "spec.yaml"
    spec.write_text(
        json.dumps({"name": name, "sources": [source], "target": {"path": "table", **target}})
    )
    return spec


def _state(frame: pd.DataFrame) -> dict:
    return {int(r["id"]): (r["city"], int(r["ts"]), r["v"]) for r in frame.to_dict("records")}


def _as_of(table: Path, version: int) -> dict:
    return _state(read_rows(str(table), as_of=str(version)).rows.to_pandas())


def _readers_agree(spark, table: Path, expected: dict) -> None:
    assert _state(read_table(table)) == expected  # delta-rs
    assert _state(pl.read_delta(str(table)).to_pandas()) == expected
    assert _state(pd.DataFrame(read_with_delta_spark(spark, table))) == expected


def test_restore_brings_back_the_rows_of_the_version(needs_delta_spark, tmp_path, table_type):
    spark = needs_delta_spark
    # MERGE_ON_READ: deletion vectors and delta files, left unfolded
    target = city_target("upsert", table_type=table_type, compaction={"after_commit": False})
    spec = write_spec(tmp_path, target)
    _run(spark, tmp_path, spec, city_rows(range(10), 1))
    v = _run(spark, tmp_path, spec, city_rows(range(4), 2)).version
    table = tmp_path / "table"
    good = _as_of(table, v)
    _run(spark, tmp_path, spec, city_rows([2, 3, 10, 11], 3))  # the bad batch
    assert DeltaTable(str(table)).version() == v + 1
    if table_type == "MERGE_ON_READ":
        assert "deletionVectors" in DeltaTable(str(table)).protocol().reader_features

    planned = _restore(spec, "--to", str(v), "--dry-run")
    assert planned.exit_code == 0, planned.output
    assert f"would restore version {v} (now version {v + 1})" in planned.output
    assert "removed (" in planned.output and "added back (" in planned.output
    assert DeltaTable(str(table)).version() == v + 1

    done = _restore(spec, "--to", str(v), "--json")
    assert done.exit_code == 0, done.output
    summary = json.loads(done.stdout)
    assert (summary["version"], summary["to"], summary["version_read"]) == (v + 2, v, v + 1)
    assert summary["rows_removed"] - summary["rows_added"] == 2  # ids 10 and 11
    _readers_agree(spark, table, good)
    # a restore is a version like any other: the next run writes on it, and its
    # version can be restored in turn
    _run(spark, tmp_path, spec, city_rows([5], 4))
    assert _state(read_table(table))[5] == ("ams", 4, "v4-5")
    assert _restore(spec, "--to", str(v + 1)).exit_code == 0
    _readers_agree(spark, table, _as_of(table, v + 1))

    shown = CliRunner().invoke(cli, ["history", str(spec), "--json"])
    kinds = [json.loads(line)["kind"] for line in shown.stdout.splitlines()]
    assert kinds.count("restore") == 2


def test_refusals_say_what_can_be_restored(spark, tmp_path):
    spec = write_spec(tmp_path, city_target("upsert"))
    for ts in (1, 2, 3, 4):
        _run(spark, tmp_path, spec, city_rows(range(ts * 2), ts))
    assert "is the current version" in _refused(spec, "--to", "4")
    assert "latest version is 4" in _refused(spec, "--to", "9")
    assert "yyyyMMddHHmmssSSS" in _refused(spec, "--to", "yesterday")
    cleaned = CliRunner().invoke(
        cli, ["clean", str(spec), "--retain-commits", "2", "--min-age-hours", "0"]
    )
    assert cleaned.exit_code == 0, cleaned.output
    gone = _refused(spec, "--to", "1")
    assert gone.startswith("version 1 of") and "runner clean" in gone
    assert gone.endswith("version 3 can be restored")
    assert DeltaTable(str(tmp_path / "table")).version() == 4
    # an instant names the newest commit at or before it
    instant = DeltaTable(str(tmp_path / "table")).history(2)[1]["runner"]["instant"]
    done = _restore(spec, "--to", instant)
    assert done.exit_code == 0, done.output
    assert "restored version 3 as version 5" in done.output


def test_layout_and_schema_come_back(needs_delta_spark, tmp_path):
    """Files written before an expansion carry the old bucket ids: the old counts come back
    with them, and a column added since goes (the next run adds it again)."""
    spark = needs_delta_spark
    spec = write_spec(tmp_path, city_target("upsert", schema_evolution="add"))
    _run(spark, tmp_path, spec, city_rows(range(12), 1))
    table = tmp_path / "table"
    good = _as_of(table, 1)
    expand_table(load_spec(spec), ExpansionRequest(8), spark=spark)
    wider = city_rows([1, 20], 2).assign(extra="x")
    _run(spark, tmp_path, spec, wider)
    restored = _restore(spec, "--to", "1")
    assert restored.exit_code == 0, restored.output
    assert "runner.index.buckets: 8 -> 4" in restored.output
    assert "extra dropped" in restored.output
    configuration = DeltaTable(str(table)).metadata().configuration
    assert configuration["runner.index.buckets"] == "4"
    assert "extra" not in DeltaTable(str(table)).schema().to_arrow().names
    _readers_agree(spark, table, good)
    # the next upsert finds each key in its bucket: updated, not stored twice
    _run(spark, tmp_path, spec, city_rows([1, 2], 3).assign(extra="y"))
    rows = read_table(table)
    assert len(rows) == 12 and sorted(rows[rows.ts == 3]["id"]) == [1, 2]
    assert set(rows[rows.ts == 3]["extra"]) == {"y"}


def test_checkpoints_and_batch_ids_go_back(spark, tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    spec = write_spec(tmp_path, city_target("upsert"))
    spec_text = spec.read_text().replace("path: in\n", "path: inbox\n  incremental: new_files\n")
    spec.write_text(spec_text)

    def drop(name: str, frame: pd.DataFrame) -> None:
        frame.to_parquet(inbox / name, index=False)
        later = time.time() + len(list(inbox.iterdir()))
        os.utime(inbox / name, (later, later))

    drop("a.parquet", city_rows(range(4), 1))
    run_pipeline(load_spec(spec), spark=spark, options=RunOptions(batch_id="b1"))
    drop("b.parquet", city_rows([1, 8], 2))
    run_pipeline(load_spec(spec), spark=spark, options=RunOptions(batch_id="b2"))
    table = tmp_path / "table"
    good = _as_of(table, 1)
    # another pipeline writing the same table, first after version 1: it starts anew
    other = write_spec(tmp_path, city_target("upsert"), name="other")
    other.write_text(
        other.read_text().replace("path: in\n", "path: in\n  incremental: new_files\n")
    )
    _run(spark, tmp_path, other, city_rows([30], 3))

    done = _restore(spec, "--to", "1")
    assert done.exit_code == 0, done.output
    assert "runner/t/b2 undone" in done.output
    assert "other: starts from the beginning" in done.output
    assert _state(read_table(table)) == good
    snapshot = open_table(str(table))
    points = starting_points(load_spec(spec), snapshot)
    assert points.commit_version == 4 and points.by_source["src"]
    assert starting_points(load_spec(other), snapshot).origin == "new table"
    # batch b2 runs again with its id and reads b.parquet again; b1 is still committed
    again = run_pipeline(load_spec(spec), spark=spark, options=RunOptions(batch_id="b2"))
    assert again.version == 5 and again.inserted == 1
    assert _state(read_table(table))[8] == ("sf", 2, "v2-8")
    repeat = run_pipeline(load_spec(spec), spark=spark, options=RunOptions(batch_id="b1"))
    assert repeat.version is None


def test_the_undo_reaches_a_chained_table(needs_delta_spark, tmp_path, table_type):
    """A (a change data feed) -> B: the restore of A reads as its undo in A's feed (runner
    read, delta-spark's readChangeFeed), and B's next run follows it."""
    spark = needs_delta_spark
    spec = write_spec(tmp_path, city_target("upsert", table_type=table_type, change_data_feed=True))
    b_dir = tmp_path / "b"
    b_target = {**city_target("upsert"), "merge_mode": "commit_time"}
    del b_target["precombine_field"]
    chained = _chained(tmp_path, "b", b_target)
    v = _run(spark, tmp_path, spec, city_rows(range(6), 1)).version
    run_pipeline(load_spec(chained), spark=spark)
    table = tmp_path / "table"
    good = _as_of(table, v)
    _run(spark, tmp_path, spec, city_rows([1, 2, 4, 7], 2))
    run_pipeline(load_spec(chained), spark=spark)
    assert _state(read_table(b_dir / "table")) == _state(read_table(table))

    done = _restore(spec, "--to", str(v))
    assert done.exit_code == 0, done.output
    version = DeltaTable(str(table)).version()
    back = [(i, kind, ts) for i in (1, 2, 4) for kind, ts in (("pre", 2), ("post", 1))]
    expected = sorted([*((i, f"update_{k}image", ts) for i, k, ts in back), (7, "delete", 2)])

    def events(frame: pd.DataFrame) -> list[tuple]:
        mine = frame[frame["_commit_version"] == version]
        return sorted(
            (int(r["id"]), r["_change_type"], int(r["ts"])) for r in mine.to_dict("records")
        )

    since = DeltaTable(str(table)).history(2)[1]["runner"]["instant"]
    assert events(read_rows(str(table), since=since).rows.to_pandas()) == expected
    by_spark = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", version)
        .load(str(table))
        .toPandas()
    )
    assert events(by_spark) == expected
    _readers_agree(spark, table, good)
    run_pipeline(load_spec(chained), spark=spark)
    assert _state(read_table(b_dir / "table")) == good


def test_a_chained_table_ordered_by_precombine_follows_the_restore(spark, tmp_path):
    """A -> B, B upserting by event time (precombine_field ts): the undo's rows would read
    as late in B. B having read the bad version, its next run is refused with the restore
    of B that lets it follow; B not having read it yet, its next run skips the bad version
    and the restore. C, reading A with `deletes: ignore`, cannot see an undo at all."""
    spec = write_spec(tmp_path, city_target("upsert", change_data_feed=True))
    table = tmp_path / "table"
    b = _chained(tmp_path, "b", city_target("upsert"))
    c_target = {**city_target("upsert"), "merge_mode": "commit_time"}
    del c_target["precombine_field"]
    c = _chained(tmp_path, "c", c_target, deletes="ignore")

    def follow(chained: Path, expected: dict):
        summary = run_pipeline(load_spec(chained), spark=spark)
        assert _state(read_table(chained.parent / "table")) == expected
        return summary

    def a_run(frame: pd.DataFrame) -> int:
        return _run(spark, tmp_path, spec, frame).version

    first = a_run(city_rows(range(6), 1))
    b_first = follow(b, _as_of(table, first)).version  # B's checkpoint: A's first
    good = a_run(city_rows([3, 6], 2))
    bad = a_run(city_rows([1, 2, 10], 3))
    follow(b, _as_of(table, bad))
    follow(c, _as_of(table, bad))  # C's first run reads it all
    assert _restore(spec, "--to", str(good)).exit_code == 0
    restore = bad + 1
    b_before = file_bytes(b.parent / "table")

    refused = _refused(b, command="run")
    assert refused == (
        f"source 'up': {table} was restored to version {good} in version {restore}, after "
        f"pipeline 'b' had read it up to version {bad}; the restore undid version(s) {bad}, "
        "and merge_mode event_time keeps a key's row with the greater ts, so their rows "
        f"would stay in {b.parent / 'table'}; nothing was read: restore this table first: "
        f"`runner restore {b} --to {b_first}` (its version {b_first}, when it had read up "
        f"to version {first}); its next run then skips what the restore undid"
    )
    assert file_bytes(b.parent / "table") == b_before
    c_refused = _refused(c, command="run")
    assert "`deletes: ignore` the source reads rows by their commit instants" in c_refused
    assert c_refused.endswith(
        "--to 0` (its version 0, before it read it); its next run then skips what the restore undid"
    )
    # a log that no longer holds a version from before the read: C is rebuilt
    DeltaTable(str(c.parent / "table")).create_checkpoint()
    (c.parent / "table" / "_delta_log" / f"{0:020d}.json").unlink()
    assert _refused(c, command="run").endswith(
        f"nothing was read: no version of {c.parent / 'table'} predates its read of version "
        f"{bad}, so rebuild it: remove {c.parent / 'table'} and run again (the first run "
        f"reads {table} in full; --ignore-checkpoint would read it over the rows the table "
        "holds, which keeps them)"
    )

    command = shlex.split(refused.split("`")[1])
    assert command[:2] == ["runner", "restore"]
    done = CliRunner().invoke(cli, command[1:], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    a_run(city_rows([4, 11], 4))
    summary = follow(b, _state(read_table(table)))  # the good version and the last one
    assert summary.sources["up"]["versions_skipped"] == [bad, restore]
    assert f"versions {bad}, {restore} skipped (a restore and the versions it undid)" in (
        summary.render()
    )

    # B has read all of A; a bad batch and its restore it has not read are skipped, and
    # their files are not needed: runner clean took them
    read = DeltaTable(str(table)).version()
    a_run(city_rows([4, 12], 5))
    assert _restore(spec, "--to", str(read)).exit_code == 0
    a_run(city_rows([5], 6))
    cleaned = CliRunner().invoke(
        cli, ["clean", str(spec), "--retain-commits", "1", "--min-age-hours", "0"]
    )
    assert cleaned.exit_code == 0, cleaned.output
    summary = follow(b, _state(read_table(table)))
    assert summary.sources["up"]["versions_skipped"] == [read + 1, read + 2]


def test_a_writer_committing_meanwhile_fails_the_restore(spark, tmp_path):
    spec = write_spec(tmp_path, city_target("upsert"))
    _run(spark, tmp_path, spec, city_rows(range(4), 1))
    _run(spark, tmp_path, spec, city_rows(range(2), 2))
    table = tmp_path / "table"
    snapshot = open_table(str(table))
    plan = plan_restore(snapshot, "1")
    _run(spark, tmp_path, spec, city_rows([9], 3))  # commits version 3 meanwhile
    with pytest.raises(CommitConflictError, match="run again"):
        run_restore(plan, RestoreSummary.of(plan, False))
    assert DeltaTable(str(table)).version() == 3
    assert not list((table / "_runner").glob("in_flight/*"))
    # run again: it restores on top of version 3
    assert _restore(spec, "--to", "1").exit_code == 0
    assert _state(read_table(table)) == _as_of(table, 1)
