"""Delta's change data files (`_change_data/`) are cleaned like the runner's data files: kept
while a retained version names them, removed once none does or when no version ever did (a
killed run's), and a change feed reader still reads the retained versions after a clean.

The table's later versions are written here by hand as the runner's change feed writer
writes them: a bucket's new data file, its change data file under `_change_data/` with the
same name, and one log entry with the remove, the add and the `cdc` action.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from runner.actions.clean import clean_table
from runner.commands.inspect import inspect_table
from runner.commands.keys import preview_keys
from runner.delta.log_entry import (
    NewFile,
    add_action,
    commit_info,
    metadata_action,
    now_ms,
    publish,
    remove_action,
)
from runner.delta.snapshot import DataFile, open_table
from runner.index.naming import data_file_path, new_instant
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from runner.spec.model import PipelineSpec
from runner.storage.in_flight import in_flight
from runner.storage.location import locate
from runner.write.uncommitted import remove_uncommitted
from tests.helpers import keys_target, write_batch, write_spec

pytestmark = pytest.mark.spark

DAY_AGO = time.time() - 24 * 3600
KILLED = "20200101000000000"  # the instant of a run killed before its commit


@dataclass
class Feed:
    """A table with the change data feed: v1 the first run (ids 1, 2 in ams, 3 in sf), v2
    the feed turned on, v3 id 1 updated (ams), v4 id 3 updated (sf)."""

    spec: PipelineSpec
    root: Path
    replaced: dict[int, str]  # version -> the data file it replaced
    changes: dict[int, str]  # version -> its change data file


def _file(root: Path, partition: str) -> DataFile:
    snapshot = open_table(str(root))
    assert snapshot is not None
    (found,) = [f for f in snapshot.files() if f.partition_path == partition]
    return found


def _publish(root: Path, actions: list[dict]) -> int:
    table = DeltaTable(str(root))
    version = table.version() + 1
    assert publish(locate(str(root)), version, actions)
    return version


def _enable_change_feed(root: Path) -> None:
    table = DeltaTable(str(root))
    configuration = {**table.metadata().configuration, "delta.enableChangeDataFeed": "true"}
    _publish(
        root,
        [
            commit_info("SET TBLPROPERTIES", {}, now_ms()),
            {"protocol": {"minReaderVersion": 1, "minWriterVersion": 4}},
            metadata_action(table, configuration),
        ],
    )


def _cdc(path: str, size: int) -> dict:
    return {"cdc": {"path": path, "partitionValues": {}, "size": size, "dataChange": False}}


def _write(root: Path, relative: str, rows: pa.Table) -> int:
    (root / relative).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, root / relative)
    return (root / relative).stat().st_size


def _change_rows(rows: pa.Table, kind: str) -> pa.Table:
    return rows.append_column("_change_type", pa.array([kind] * rows.num_rows, pa.string()))


def _update(root: Path, partition: str, key: int, value: int, instant: str) -> tuple[str, str]:
    """Version: the key's row of `partition`'s bucket gets v=value, with its change data
    file; returns (the replaced file, the change data file)."""
    old = _file(root, partition)
    before = pq.read_table(root / old.path)
    hit = pc.equal(before.column("id"), key)
    values = pc.if_else(hit, pa.scalar(value, before.schema.field("v").type), before["v"])
    after = before.set_column(before.schema.get_field_index("v"), "v", values)
    path = data_file_path(partition, old.file_id, "0-0-0", instant)
    size = _write(root, path, after)
    changes = pa.concat_tables(
        [
            _change_rows(before.filter(hit), "update_preimage"),
            _change_rows(after.filter(hit), "update_postimage"),
        ]
    )
    cdc = f"_change_data/{path}"
    cdc_size = _write(root, cdc, changes)
    now = now_ms()
    placed = {"_partition_path": partition, "_bucket": old.bucket}  # what snapshots read
    stats = json.dumps({"numRecords": after.num_rows, "minValues": placed, "maxValues": placed})
    _publish(
        root,
        [
            commit_info("WRITE", {"instant": instant}, now),
            remove_action(old, now, data_change=True),
            add_action(NewFile(path, size, stats), now, data_change=True),
            _cdc(cdc, cdc_size),
        ],
    )
    return old.path, cdc


def _orphan(root: Path, partition: str, instant: str) -> str:
    """A change data file of a run that never committed (its name, another instant)."""
    name = data_file_path(partition, _file(root, partition).file_id, "0-0-0", instant)
    path = f"_change_data/{name}"
    _write(root, path, pa.table({"id": [9], "_change_type": ["insert"]}))
    return path


def _age(root: Path) -> None:
    for path in root.rglob("*.parquet"):
        os.utime(path, (DAY_AGO, DAY_AGO))


@pytest.fixture
def feed(spark, tmp_path) -> Feed:
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
    write_batch(tmp_path, pd.DataFrame({"id": [1, 2, 3], "city": ["ams", "ams", "sf"], "v": 1}))
    run_pipeline(load_spec(spec_path), spark=spark)
    root = tmp_path / "table"
    _enable_change_feed(root)
    replaced3, cdc3 = _update(root, "ams", 1, 2, "20240101000003000")
    replaced4, cdc4 = _update(root, "sf", 3, 2, "20240101000004000")
    assert DeltaTable(str(root)).version() == 4
    _age(root)
    return Feed(load_spec(spec_path), root, {3: replaced3, 4: replaced4}, {3: cdc3, 4: cdc4})


def test_clean_keeps_the_change_data_of_kept_versions_and_removes_the_rest(feed):
    root = feed.root
    killed = _orphan(root, "ams", KILLED)
    _age(root)
    young = _orphan(root, "sf", "20200101000001000")  # just written: a run may still commit it

    planned = clean_table(feed.spec, retain_commits=2, min_age_hours=1, dry_run=True)

    assert set(planned.files) == {feed.replaced[3], killed}
    assert f"  {killed}" in planned.render().splitlines()
    assert planned.too_young == 1
    assert (root / killed).exists(), "a dry run removes nothing"

    done = clean_table(feed.spec, retain_commits=2, min_age_hours=1)

    assert set(done.files) == {feed.replaced[3], killed}
    assert not (root / killed).exists() and (root / young).exists()
    assert all((root / cdc).exists() for cdc in feed.changes.values())

    # version 3 leaves the kept range: its change data file goes, version 4's stays
    done = clean_table(feed.spec, retain_commits=1, min_age_hours=1)

    assert feed.changes[3] in done.files and feed.replaced[4] in done.files
    assert (root / feed.changes[4]).exists() and not (root / feed.changes[3]).exists()


def test_a_kept_version_without_change_data_keeps_the_files_it_removes(feed):
    """A version that removes files and names no change data file (a whole bucket deleted,
    as delta-spark deletes a partition): a change feed reader reads the removed file's rows
    as deleted, so the file stays while that version is kept."""
    root = feed.root
    gone = _file(root, "ams")
    now = now_ms()
    _publish(root, [commit_info("DELETE", {}, now), remove_action(gone, now, data_change=True)])
    _age(root)

    done = clean_table(feed.spec, retain_commits=1, min_age_hours=0)

    assert (root / gone.path).exists()
    assert gone.path not in done.files
    assert set(done.files) == {*feed.replaced.values(), *feed.changes.values()}


def test_delta_spark_reads_the_change_feed_of_the_kept_versions_after_clean(
    needs_delta_spark, feed
):
    spark = needs_delta_spark
    _orphan(feed.root, "ams", KILLED)
    _age(feed.root)

    def changes(start: int) -> list[tuple]:
        frame = (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", start)
            .load(str(feed.root))
        )
        rows = frame.select("id", "v", "_change_type", "_commit_version").collect()
        return sorted(tuple(r) for r in rows)

    clean_table(feed.spec, retain_commits=2, min_age_hours=0)
    assert changes(3) == [
        (1, 1, "update_preimage", 3),
        (1, 2, "update_postimage", 3),
        (3, 1, "update_preimage", 4),
        (3, 2, "update_postimage", 4),
    ]

    now = now_ms()
    whole = _file(feed.root, "ams")
    _publish(feed.root, [commit_info("DELETE", {}, now), remove_action(whole, now, True)])
    _age(feed.root)
    clean_table(feed.spec, retain_commits=1, min_age_hours=0)
    assert changes(5) == [(1, 2, "delete", 5), (2, 1, "delete", 5)]


def test_a_change_data_file_of_a_writer_in_flight_is_kept_until_its_heartbeat_lapses(feed):
    instant = new_instant()
    location = locate(str(feed.root))
    with in_flight(location, instant, "run"):
        orphan = _orphan(feed.root, "ams", instant)
        _age(feed.root)
        running = clean_table(feed.spec, retain_commits=2, min_age_hours=0)
        assert running.in_flight == 1 and (feed.root / orphan).exists()

    done = clean_table(feed.spec, retain_commits=2, min_age_hours=0)

    assert orphan in done.files and not (feed.root / orphan).exists()


def test_a_failed_run_takes_its_change_data_files_and_never_a_committed_ones(spark, feed):
    root, location = feed.root, locate(str(feed.root))
    failed = new_instant()
    orphan = _orphan(root, "sf", failed)

    remove_uncommitted(spark, location, failed)

    assert not (root / orphan).exists()
    assert all((root / cdc).exists() for cdc in feed.changes.values())

    # a commit that only removes a bucket's file and writes its change data file leaves no
    # live file of its own: the log's commitInfo still says it went through
    deleting = new_instant()
    whole = _file(root, "ams")
    cdc = _orphan(root, "ams", deleting)
    now = now_ms()
    _publish(
        root,
        [
            commit_info("WRITE", {"instant": deleting}, now),
            remove_action(whole, now, data_change=True),
            _cdc(cdc, (root / cdc).stat().st_size),
        ],
    )

    remove_uncommitted(spark, location, deleting)

    assert (root / cdc).exists()


def test_change_data_is_no_partition_to_inspect_nor_a_partition_path(spark, feed, tmp_path):
    _orphan(feed.root, "ams", KILLED)

    report = inspect_table(str(feed.root))

    assert [p["partition"] for p in report["partitions"]] == ["ams", "sf"]
    assert report["files"] == 2 and report["rows"] == 3

    lines = tmp_path / "records.jsonl"
    lines.write_text(json.dumps({"id": 1, "c": "_change_data"}) + "\n")
    target = keys_target(tmp_path, {"type": "SIMPLE", "partition_fields": "c"}, "id")
    (out,) = preview_keys(spark, target, lines, "id long, c string")
    assert "names a directory the table reserves" in out["error"]
