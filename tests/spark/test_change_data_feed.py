"""Delta's change data feed written by the runner (target.change_data_feed), read back by
delta-spark's readChangeFeed, delta-rs' load_cdf and `runner read --since`, against a pandas
reference of what each version changed; and rows that change nothing left alone
(target.skip_unchanged).

The reference is the table's state after each run, computed with pandas from the batches;
the changes of a version are the difference of two states, by key: a key only after is an
insert, only before a delete, on both sides with other values an update (its pre- and
post-image).
"""

from __future__ import annotations

import math

import pandas as pd
import pyarrow as pa
import pytest
import yaml
from click.testing import CliRunner
from deltalake import DeltaTable

from runner.actions.compact import compact_table
from runner.cli import cli
from runner.commands.read import read_rows
from runner.delta.snapshot import open_table
from runner.errors import InvalidSpecError, UserError
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.helpers import (
    city_rows,
    city_target,
    log_actions,
    read_table,
    write_batch,
    write_spec,
)

COLUMNS = ["id", "city", "ts", "v"]
Change = tuple  # (id, city, ts, v, change type, version)


def _spec(tmp_path, table_type, **extra):
    target = city_target(
        "upsert", table_type=table_type, change_data_feed=True, delete_marker="gone", **extra
    )
    return write_spec(tmp_path, target)


def _batch(ids, ts, gone=()):
    frame = city_rows(ids, ts)
    frame["gone"] = [i in gone for i in frame["id"]]
    return frame


class Reference:
    """The table's state by key, and what each committed version changed."""

    def __init__(self):
        self.state: dict[int, tuple] = {}
        self.changes: list[Change] = []

    def apply(self, batch: pd.DataFrame, version: int | None) -> None:
        before = dict(self.state)
        for row in batch.sort_values("ts").itertuples(index=False):
            stored = self.state.get(row.id)
            if stored is not None and stored[1] > row.ts:
                continue  # event_time: the stored row is newer
            if row.gone:
                self.state.pop(row.id, None)
            else:
                self.state[row.id] = (row.city, row.ts, row.v)
        diff = _diff(before, self.state)
        assert (version is None) == (not diff), (version, diff)
        self.changes += [(*c, version) for c in diff]


def _diff(before: dict, after: dict) -> list[tuple]:
    out = []
    for key in before.keys() | after.keys():
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if old is None:
            out.append((key, *new, "insert"))
        elif new is None:
            out.append((key, *old, "delete"))
        else:
            out += [(key, *old, "update_preimage"), (key, *new, "update_postimage")]
    return out


def _run(spark, tmp_path, spec, batch):
    write_batch(tmp_path, batch)
    return run_pipeline(load_spec(spec), spark=spark)


def _rows(frame: pd.DataFrame, first: int) -> list[Change]:
    frame = frame[frame["_commit_version"] >= first]
    return sorted(
        (
            int(r["id"]),
            r["city"],
            int(r["ts"]),
            r["v"],
            r["_change_type"],
            int(r["_commit_version"]),
        )
        for r in frame.to_dict("records")
    )


def _history(spark, tmp_path, table_type) -> tuple[Reference, list]:
    """Inserts, updates, deletes, a stale update and a replayed batch into one table."""
    spec = _spec(tmp_path, table_type)
    reference, summaries = Reference(), []
    batches = [
        _batch(range(20), 1),
        _batch([0, 1, 2, 3, 20, 21], 2),  # updates and inserts
        _batch([4, 5, 6], 3, gone={4, 5}),  # deletes and an update
        _batch([0, 1, 2, 3, 20, 21], 2),  # the second batch again: changes nothing
        _batch([7, 8], 0),  # older than stored: changes nothing
        _batch([9, 10, 11, 4], 4, gone={9}),  # a delete, updates, a deleted key again
    ]
    for batch in batches:
        summary = _run(spark, tmp_path, spec, batch)
        reference.apply(batch, summary.version)
        summaries.append(summary)
    return reference, summaries


def test_every_reader_sees_the_reference_changes(needs_delta_spark, tmp_path, table_type):
    spark = needs_delta_spark
    reference, summaries = _history(spark, tmp_path, table_type)
    table = str(tmp_path / "table")
    replay = summaries[3]
    assert replay.version is None and replay.unchanged == 6 and replay.updated == 0
    assert "unchanged 6" in replay.render()

    expected = sorted(reference.changes)
    by_spark = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 1)
        .load(table)
        .toPandas()
    )
    assert _rows(by_spark, 1) == expected
    by_runner = read_rows(table, since="0" * 17).rows.to_pandas()
    assert _rows(by_runner, 1) == expected
    if table_type == "COPY_ON_WRITE":  # delta-rs 1.6 misreads removes with deletion vectors
        by_delta_rs = pa.table(DeltaTable(table).load_cdf(starting_version=1).read_all())
        assert _rows(by_delta_rs.to_pandas(), 1) == expected
    # the table itself is the reference state
    live = spark.read.format("delta").load(table).toPandas()
    assert {int(r.id): (r.city, int(r.ts), r.v) for r in live.itertuples()} == reference.state


def test_a_change_data_file_follows_the_bucket_layout(spark, tmp_path):
    spec = _spec(tmp_path, "COPY_ON_WRITE")
    _run(spark, tmp_path, spec, _batch(range(8), 1))
    summary = _run(spark, tmp_path, spec, _batch([1, 2], 2))
    actions = log_actions(tmp_path / "table", summary.version)
    data = sorted(a["add"]["path"] for a in actions if "add" in a)
    changes = sorted(a["cdc"]["path"] for a in actions if "cdc" in a)
    assert changes == [f"_change_data/{p}" for p in data]
    assert all(not a["cdc"]["dataChange"] for a in actions if "cdc" in a)
    assert summary.change_data_files == 2
    assert "+2 change data" in summary.render()


def test_a_first_load_writes_no_change_data(needs_delta_spark, tmp_path, table_type):
    """A version that only adds new rows' files is read as inserts by every reader."""
    spark = needs_delta_spark
    spec = _spec(tmp_path, table_type)
    summary = _run(spark, tmp_path, spec, _batch(range(10), 1))
    assert summary.change_data_files == 0
    assert not (tmp_path / "table" / "_change_data").exists()
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 1)
        .load(str(tmp_path / "table"))
        .toPandas()
    )
    assert sorted(changes["_change_type"]) == ["insert"] * 10


def test_the_feed_is_turned_on_for_an_existing_table(needs_delta_spark, tmp_path, table_type):
    spark = needs_delta_spark
    plain = write_spec(tmp_path, city_target("upsert", table_type=table_type), name="plain")
    _run(spark, tmp_path, plain, city_rows(range(6), 1))
    spec = _spec(tmp_path, table_type)
    summary = _run(spark, tmp_path, spec, _batch([1], 2, gone={1}))
    table = DeltaTable(str(tmp_path / "table"))
    assert table.metadata().configuration["delta.enableChangeDataFeed"] == "true"
    enabled = summary.version - 1
    assert table.history(2)[1]["operation"] == "SET TBLPROPERTIES"
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", enabled)
        .load(str(tmp_path / "table"))
        .toPandas()
    )
    assert _rows(changes, enabled) == [(1, "ams", 1, "v1-1", "delete", summary.version)]
    # the runner settings stay, and so does the feed when the spec no longer asks for it
    again = _run(spark, tmp_path, plain, city_rows([2], 3))
    assert again.change_data_files == 1


def test_compaction_writes_no_change_data(needs_delta_spark, tmp_path):
    spark = needs_delta_spark
    spec = _spec(tmp_path, "MERGE_ON_READ")
    _run(spark, tmp_path, spec, _batch(range(200), 1))
    _run(spark, tmp_path, spec, _batch([1, 2, 3], 2))  # deletion vectors and delta files
    compacted = compact_table(load_spec(spec), spark=spark)
    assert compacted.version is not None
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", compacted.version)
        .load(str(tmp_path / "table"))
        .toPandas()
    )
    assert changes.empty
    assert not any("cdc" in a for a in log_actions(tmp_path / "table", compacted.version))


@pytest.mark.parametrize(
    ("table_type", "feed"),
    [("COPY_ON_WRITE", True), ("MERGE_ON_READ", False)],
    ids=["whole-rows", "column-by-column"],  # the feed reads whole stored rows; MoR need not
)
def test_unchanged_rows_are_compared_as_a_reader_sees_them(spark, tmp_path, table_type, feed):
    """NaN equals NaN, null equals null, -0.0 is not 0.0; a changed row among unchanged
    ones rewrites its bucket alone."""
    target = city_target("upsert", change_data_feed=feed, table_type=table_type)
    spec = write_spec(tmp_path, target)
    first = city_rows(range(4), 1)
    first["x"] = [math.nan, None, 0.0, 1.5]
    _run(spark, tmp_path, spec, first)
    same = first.copy()
    assert _run(spark, tmp_path, spec, same).unchanged == 4
    signed = first.copy()
    signed["x"] = [math.nan, None, -0.0, 1.5]
    summary = _run(spark, tmp_path, spec, signed)
    assert (summary.updated, summary.unchanged, summary.buckets_touched) == (1, 3, 1)


def test_skip_unchanged_false_rewrites_and_counts_updates(spark, tmp_path):
    spec = write_spec(tmp_path, city_target("upsert", skip_unchanged=False))
    _run(spark, tmp_path, spec, city_rows(range(6), 1))
    summary = _run(spark, tmp_path, spec, city_rows(range(6), 1))
    assert (summary.updated, summary.unchanged, summary.version) == (6, 0, 2)
    assert open_table(str(tmp_path / "table")).version == 2


def _chained(directory, source, **target):
    """A pipeline reading `source`'s table incrementally into <directory>/table."""
    directory.mkdir(exist_ok=True)
    spec = {
        "name": directory.name,
        "sources": [
            {"name": "up", "format": "delta", "path": str(source), "incremental": {"since": "last"}}
        ],
        "target": {
            "path": "table",
            "record_key": "id",
            "key_generator": {"partition_fields": "city"},
            "index": {"buckets": 2},
            **target,
        },
    }
    path = directory / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _content(table) -> dict:
    frame = read_table(table)
    return {int(r["id"]): (r["city"], int(r["ts"]), r["v"]) for r in frame.to_dict("records")}


def test_deletes_reach_the_end_of_a_chain(spark, tmp_path, table_type):
    """A -> B (upsert, with a change feed) -> C (a change feed target, SCD type 1): every
    delete of A reaches C, also when several versions of A come between two runs."""
    a = _spec(tmp_path, table_type)
    b = _chained(
        tmp_path / "b",
        tmp_path / "table",
        precombine_field="ts",
        change_data_feed=True,
        table_type=table_type,
    )
    c = _chained(tmp_path / "c", tmp_path / "b" / "table", cdc={"sequence_by": "ts"})
    reference = Reference()
    rounds = [
        [_batch(range(10), 1)],
        [_batch([1, 2, 3, 4, 10], 2, gone={3, 4})],
        [_batch([5], 3, gone={5}), _batch([3, 6], 4), _batch([6], 5, gone={6})],
        [_batch([7], 6)],
    ]
    for batches in rounds:
        for batch in batches:
            reference.apply(batch, _run(spark, tmp_path, a, batch).version)
        middle = run_pipeline(load_spec(b), spark=spark)
        end = run_pipeline(load_spec(c), spark=spark)
        assert _content(tmp_path / "b" / "table") == reference.state
        assert _content(tmp_path / "c" / "table") == reference.state
    assert (middle.deleted, end.deleted) == (0, 0)  # the last round deletes nothing
    assert middle.updated == end.updated == 1


def _renamed(spec, name):
    """The spec under another pipeline name, beside it (so its paths mean the same)."""
    text = yaml.safe_load(spec.read_text())
    path = spec.with_name(f"{name}.yaml")
    path.write_text(yaml.safe_dump({**text, "name": name}, sort_keys=False))
    return path


def test_a_renamed_chained_pipeline_is_refused_until_told_where_its_rows_came_from(spark, tmp_path):
    """Renamed, a chained pipeline has no checkpoint (it is under the old name): a first
    read of A in full would keep the keys deleted in A meanwhile. The run is refused,
    naming the old name and its checkpoint; --ignore-checkpoint does what the refusal says
    (the deleted key stays), the --checkpoint it gives hands the delete on."""
    a = _spec(tmp_path, "COPY_ON_WRITE")
    _run(spark, tmp_path, a, _batch(range(4), 1))
    b = _chained(tmp_path / "b", tmp_path / "table", precombine_field="ts")
    run_pipeline(load_spec(b), spark=spark)
    _run(spark, tmp_path, a, _batch([1], 2, gone={1}))  # version 2 of A deletes key 1

    renamed = _renamed(b, "b_v2")
    refused = CliRunner().invoke(cli, ["run", str(renamed)])
    assert isinstance(refused.exception, UserError), refused.output
    message = str(refused.exception)
    assert message.startswith("source 'up': pipeline 'b_v2' has no checkpoint in ")
    assert f"a first read of {tmp_path / 'table'} in full hands on none of the deletes" in message
    assert "pipeline 'b' recorded up at version 1 (table version 1): run with " in message
    assert "--checkpoint up=1 (or under the name 'b')" in message
    assert "--ignore-checkpoint reads" in message and "\n" not in message
    assert set(_content(tmp_path / "b" / "table")) == {0, 1, 2, 3}  # nothing was read

    reset = CliRunner().invoke(cli, ["run", str(renamed), "--ignore-checkpoint"])
    assert reset.exit_code == 0, reset.output
    assert 1 in _content(tmp_path / "b" / "table")  # as the refusal said: key 1 stays

    told = CliRunner().invoke(cli, ["run", str(_renamed(b, "b_v3")), "--checkpoint", "up=1"])
    assert told.exit_code == 0, told.output
    assert _content(tmp_path / "b" / "table") == _content(tmp_path / "table")


def test_a_source_without_a_change_feed_is_refused_unless_deletes_are_ignored(spark, tmp_path):
    plain = write_spec(tmp_path, city_target("upsert"))
    _run(spark, tmp_path, plain, city_rows(range(4), 1))
    chained = _chained(tmp_path / "b", tmp_path / "table", precombine_field="ts")
    run_pipeline(load_spec(chained), spark=spark)  # the first read is whole: no delete to miss
    _run(spark, tmp_path, plain, city_rows([1], 2))
    with pytest.raises(
        UserError, match=r"source 'up'.* keeps no change data feed.*deletes: ignore"
    ):
        run_pipeline(load_spec(chained), spark=spark)
    spec = yaml.safe_load(chained.read_text())
    spec["sources"][0]["incremental"]["deletes"] = "ignore"
    chained.write_text(yaml.safe_dump(spec))
    assert run_pipeline(load_spec(chained), spark=spark).updated == 1


def test_an_insert_target_cannot_take_a_source_that_hands_on_deletes(tmp_path):
    chained = _chained(tmp_path / "b", tmp_path / "table", operation="insert")
    with pytest.raises(InvalidSpecError, match="operation insert cannot apply"):
        load_spec(chained)
