"""A table's change data feed read without Spark (runner.delta.change_feed, `runner read
--since`) against delta-spark's readChangeFeed and delta-rs' load_cdf, on tables delta-spark
wrote with inserts, MERGE updates, DELETEs and a compaction, with and without deletion
vectors; the refusals of ranges the feed cannot give; and the note of a pull from a table
without a feed."""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from runner.cli import cli
from runner.delta.change_feed import plan_changes, read_changes, versions_for_instants
from runner.errors import UserError
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from runner.storage.location import locate
from tests.helpers import city_rows, city_target, write_batch, write_spec

COLUMNS = ["id", "v", "_change_type", "_commit_version"]
SCHEMA = "id INT, v STRING"


def _delta(spark, path: Path):
    """delta-spark's DeltaTable (through the JVM: the delta-spark Python package is not a
    dependency, its jars are)."""
    return spark._jvm.io.delta.tables.DeltaTable.forPath(spark._jsparkSession, str(path))


def _write(spark, path: Path, rows: list, mode: str = "append", **properties: str) -> None:
    frame = spark.createDataFrame(rows, SCHEMA).coalesce(1)
    frame.write.format("delta").mode(mode).options(**properties).save(str(path))


def _merge(spark, path: Path, rows: list) -> None:
    source = spark.createDataFrame(rows, SCHEMA).alias("s")
    merge = _delta(spark, path).alias("t").merge(source._jdf, "t.id = s.id")
    merge.whenMatched().updateAll().whenNotMatched().insertAll().execute()


def _spark_changes(spark, path: Path, start: int) -> list[tuple]:
    reader = spark.read.format("delta").option("readChangeFeed", "true")
    frame = reader.option("startingVersion", start).load(str(path)).select(*COLUMNS)
    return sorted(tuple(row) for row in frame.collect())


def _changes(path: Path, first: int, last: int | None = None) -> pa.Table:
    location, table = locate(str(path)), DeltaTable(str(path))
    return read_changes(location, plan_changes(location, table, first, last or table.version()))


def _rows(changes: pa.Table) -> list[tuple]:
    return sorted(tuple(row[c] for c in COLUMNS) for row in changes.to_pylist())


def _instant(path: Path, version: int) -> str:
    """The instant a commit without a runner instant has: its commitInfo timestamp, UTC."""
    log = path / "_delta_log" / f"{version:020d}.json"
    infos = [json.loads(line) for line in log.read_text().splitlines() if line]
    millis = next(a["commitInfo"]["timestamp"] for a in infos if "commitInfo" in a)
    return dt.datetime.fromtimestamp(millis / 1000, dt.UTC).strftime("%Y%m%d%H%M%S%f")[:17]


@pytest.mark.parametrize("deletion_vectors", [False, True])
def test_the_change_feed_is_read_as_delta_spark_reads_it(
    needs_delta_spark, tmp_path, deletion_vectors
):
    spark, path = needs_delta_spark, tmp_path / "t"
    _write(
        spark,
        path,
        [(i, "a") for i in range(1, 7)],
        **{
            "delta.enableChangeDataFeed": "true",
            "delta.enableDeletionVectors": str(deletion_vectors).lower(),
        },
    )
    _write(spark, path, [(7, "b"), (8, "b")])  # 1: a second file
    _merge(spark, path, [(3, "c"), (9, "c")])  # 2: an update and an insert
    _delta(spark, path).delete("id = 2")  # 3: with deletion vectors, no change data file
    _delta(spark, path).optimize().executeCompaction()  # 4: no data change
    _delta(spark, path).delete("id >= 7")  # 5: whole files
    _delta(spark, path).delete("id = 1")  # 6: with deletion vectors, a file that had one
    assert DeltaTable(str(path)).version() == 6

    expected = _spark_changes(spark, path, 0)
    for start in (0, 3, 5):  # delta-spark from `start` on: its rows of those versions
        assert _rows(_changes(path, start)) == [r for r in expected if r[3] >= start], start
    assert _rows(_changes(path, 4, 4)) == []  # the compaction
    location, table = locate(str(path)), DeltaTable(str(path))
    delete = plan_changes(location, table, 3, 3).files  # a change data file, or a new DV
    if deletion_vectors:  # the rows the new DV deletes (and those only the old one did)
        assert {f.change_type for f in delete} >= {"delete"}
        assert all(f.marked_by is not None for f in delete)
    else:
        assert [f.change_type for f in delete] == [None]

    changes = _changes(path, 0)
    assert changes.schema.field("_commit_timestamp").type == pa.timestamp("ms", tz="UTC")
    if not deletion_vectors:
        # delta-rs agrees, its commit timestamps too (on a table with deletion vectors,
        # deltalake 1.6.6 reads a removed file's deleted rows instead of its live ones)
        theirs = pa.table(DeltaTable(str(path)).load_cdf(starting_version=0).read_all())
        mine = changes.cast(
            pa.schema([*[*changes.schema][:-1], ("_commit_timestamp", "timestamp[ms]")])
        )
        key = ["_commit_version", "_change_type", "id"]
        assert mine.to_pandas().sort_values(key).reset_index(drop=True).to_dict(
            "records"
        ) == theirs.to_pandas().sort_values(key).reset_index(drop=True).to_dict("records")

    # the same through the CLI: the commits after version 2's instant (no runner instant:
    # the commit timestamps), inserts, updates and deletes
    pulled = CliRunner().invoke(cli, ["read", str(path), "--since", _instant(path, 2)])
    assert pulled.exit_code == 0, pulled.output
    rows = pd.read_json(io.StringIO(pulled.stdout), lines=True)
    got = sorted(tuple(r) for r in rows[COLUMNS].itertuples(index=False))
    assert got == [r for r in expected if r[3] >= 3]
    assert f"change row(s) of {path} in versions 3..6" in pulled.stderr
    assert "note:" not in pulled.stderr
    until = CliRunner().invoke(
        cli, ["read", str(path), "--since", _instant(path, 2), "--until", _instant(path, 3)]
    )
    assert {json.loads(line)["_commit_version"] for line in until.stdout.splitlines()} == {3}


def test_a_range_from_before_the_feed_or_past_what_is_kept_is_refused(needs_delta_spark, tmp_path):
    spark, path = needs_delta_spark, tmp_path / "t"
    _write(spark, path, [(1, "a"), (2, "a")])  # 0: no change data feed
    _write(spark, path, [(3, "a")])  # 1
    DeltaTable(str(path)).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    _merge(spark, path, [(1, "b"), (4, "b")])  # 3
    _delta(spark, path).delete("id = 2")  # 4

    with pytest.raises(UserError, match=r"no change data feed \(\S+\) at version\(s\) 1;"):
        _changes(path, 1)
    with pytest.raises(UserError, match="it is on from version 2"):
        _changes(path, 0)
    with pytest.raises(Exception, match="change data"):  # delta-spark refuses too
        _spark_changes(spark, path, 1)
    expected = _spark_changes(spark, path, 2)
    assert _rows(_changes(path, 2)) == expected

    # a change data file removed (by `runner clean`, or by hand)
    log = (path / "_delta_log" / f"{3:020d}.json").read_text().splitlines()
    cdc = path / next(json.loads(a)["cdc"]["path"] for a in log if '"cdc"' in a)
    cdc.rename(tmp_path / "kept.parquet")
    with pytest.raises(UserError, match=r"version\(s\) 3 .* 1 of their files are gone"):
        _changes(path, 2)
    (tmp_path / "kept.parquet").rename(cdc)

    # commits removed from the log after a checkpoint
    DeltaTable(str(path)).create_checkpoint()
    for version in (0, 1, 2):
        (path / "_delta_log" / f"{version:020d}.json").unlink()
    with pytest.raises(UserError, match=r"no longer holds version\(s\) 2.*from version 3 on"):
        _changes(path, 2)
    # (delta-spark cannot start a change feed read at a version it cannot rebuild)
    assert _rows(_changes(path, 3)) == [row for row in expected if row[3] >= 3]
    pulled = CliRunner().invoke(cli, ["read", str(path), "--since", "0" * 17])
    assert isinstance(pulled.exception, UserError)
    assert f"--since of {_instant(path, 3)} (version 3's instant)" in str(pulled.exception)


def test_a_pull_from_a_table_without_a_feed_says_once_that_deletes_are_missing(spark, tmp_path):
    spec = load_spec(write_spec(tmp_path, city_target("upsert")))
    write_batch(tmp_path, city_rows([1, 2, 3], 1))
    first = run_pipeline(spec, spark=spark)
    write_batch(tmp_path, city_rows([2, 4], 2))
    second = run_pipeline(spec, spark=spark)
    table = tmp_path / "table"

    pulled = CliRunner().invoke(cli, ["read", str(table), "--since", first.instant])
    assert pulled.exit_code == 0, pulled.output
    assert sorted(json.loads(line)["id"] for line in pulled.stdout.splitlines()) == [2, 4]
    assert pulled.stderr.count("deletes are not included") == 1
    assert f"{table} has no change data feed" in pulled.stderr
    assert "target.change_data_feed: true" in pulled.stderr
    whole = CliRunner().invoke(cli, ["read", str(table)])  # not a pull: nothing to say
    assert whole.exit_code == 0 and "note:" not in whole.stderr

    # the versions of a range of runner instants (the rows' _commit_time)
    location, delta = locate(str(table)), DeltaTable(str(table))
    assert versions_for_instants(location, delta, first.instant, None) == (
        second.version,
        second.version,
    )
    assert versions_for_instants(location, delta, None, first.instant)[1] == first.version
    assert versions_for_instants(location, delta, second.instant, None) is None
