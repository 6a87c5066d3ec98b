"""Bucket expansion on real Delta tables: layout, content, atomicity, later writes, failures."""

from __future__ import annotations

import json
import random

import pandas as pd
import pytest
from deltalake import DeltaTable

from runner.actions import rehash_bitmaps
from runner.actions.expand import ExpansionRequest, expand_table
from runner.actions.expansion_plan import plan_expansion
from runner.actions.rehash_bitmaps import bitmap_frame
from runner.delta.snapshot import open_table
from runner.errors import UserError
from runner.index.naming import parse_data_file_name
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.helpers import (
    assert_rows_not_shuffled,
    assert_stale_writer_refused,
    log_actions,
    read_table,
    write_batch,
    write_spec,
)
from tests.reference import bucket_of

CITIES = ["ams", "sf", "nyc"]


def _batch(rng: random.Random, keys: range) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": list(keys),
            "city": [CITIES[k % 3] for k in keys],
            "ts": [rng.randrange(100) for _ in keys],
            "amount": [round(rng.uniform(0, 100), 2) for _ in keys],
        }
    )


@pytest.fixture
def table(spark, tmp_path):
    """A 4-bucket upsert table over 3 partitions, 300 rows, with its pandas reference."""
    spec_path = write_spec(
        tmp_path,
        {
            "operation": "upsert",
            "record_key": "id",
            "precombine_field": "ts",
            "key_generator": {
                "type": "SIMPLE",
                "partition_fields": "city",
                "hive_style_partitioning": True,
            },
            "index": {"buckets": 4},
        },
    )
    batch = _batch(random.Random(7), range(300))
    write_batch(tmp_path, batch)
    run_pipeline(load_spec(spec_path), spark=spark)
    return spec_path, tmp_path / "table", batch


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values("id").reset_index(drop=True)


def _check_layout(table_dir, counts: dict[str, int]) -> pd.DataFrame:
    """Every row's _bucket is the bucket function of its partition's count; every file holds
    one bucket and carries it in its name. Returns the rows."""
    dt = DeltaTable(str(table_dir))
    rows = dt.to_pyarrow_table().to_pandas()
    for row in rows.itertuples():
        assert row._5 == bucket_of((str(row.id),), counts[row.city]), row
    for path in dt.file_uris():
        name = parse_data_file_name(path)
        assert name is not None, path
        buckets = set(pd.read_parquet(path, columns=["_bucket"])["_bucket"])
        assert buckets == {name.bucket}, path
        city = path.split("city=")[1].split("/")[0]
        assert name.bucket < counts[city]
    return rows


def _configuration(table_dir) -> dict[str, str]:
    return dict(DeltaTable(str(table_dir)).metadata().configuration)


def test_multiple_rehash_4_to_8_then_overwrite_8_to_6(spark, table, monkeypatch):
    spec_path, table_dir, batch = table
    spec = load_spec(spec_path)
    before = _sorted(read_table(table_dir))
    version = DeltaTable(str(table_dir)).version()
    # the rehash goes in rounds of whole old buckets, as a table of billions of rows would
    monkeypatch.setattr(rehash_bitmaps, "ROUND_ROWS", 100)  # 3 rounds of the 300 rows
    old_files = {p.rsplit("/", 1)[-1] for p in DeltaTable(str(table_dir)).file_uris()}

    _, done = expand_table(spec, ExpansionRequest(8, "multiple_rehash"), spark=spark)
    assert done is not None and done.version == version + 1 and not done.shuffle
    after = _sorted(_check_layout(table_dir, dict.fromkeys(CITIES, 8)))
    # the same rows, keys and values: only _bucket moved
    pd.testing.assert_frame_equal(before.drop(columns="_bucket"), after.drop(columns="_bucket"))
    assert _configuration(table_dir)["runner.index.buckets"] == "8"

    # one commit: the new bucket count, every old file out, the new ones in
    actions = log_actions(table_dir, version + 1)
    kinds = [next(iter(a)) for a in actions]
    assert kinds.count("metaData") == 1
    conf = next(a["metaData"]["configuration"] for a in actions if "metaData" in a)
    assert conf["runner.index.buckets"] == "8" and conf["runner.index.buckets.created"] == "4"
    removed = {a["remove"]["path"].rsplit("/", 1)[-1] for a in actions if "remove" in a}
    assert removed == old_files
    assert kinds.count("add") == done.files_written == len(DeltaTable(str(table_dir)).file_uris())

    # a rehash's rows are never shuffled: Spark reads the bucket function's inputs only
    snapshot = open_table(str(table_dir))
    replan = plan_expansion(snapshot, spec.target, 16, "multiple_rehash")
    assert_rows_not_shuffled(
        bitmap_frame(spark, snapshot, spec.target, replan, replan.files), ["amount", "ts"]
    )

    # 8 to 6 is no multiple: refused, with overwrite offered
    with pytest.raises(UserError, match="use --policy overwrite"):
        expand_table(spec, ExpansionRequest(6, "multiple_rehash"), spark=spark)
    _, done = expand_table(spec, ExpansionRequest(6, "overwrite"), spark=spark)
    assert done.shuffle and done.version == version + 2
    after = _sorted(_check_layout(table_dir, dict.fromkeys(CITIES, 6)))
    pd.testing.assert_frame_equal(before.drop(columns="_bucket"), after.drop(columns="_bucket"))

    # a later upsert lands in the 6-bucket layout and the table equals the reference
    update = _batch(random.Random(8), range(250, 400)).assign(ts=1000)
    write_batch(table_dir.parent, update)
    summary = run_pipeline(spec, spark=spark)
    assert summary.updated == 50 and summary.inserted == 100
    expected = pd.concat([batch[batch.id < 250], update])
    rows = _sorted(_check_layout(table_dir, dict.fromkeys(CITIES, 6)))
    pd.testing.assert_frame_equal(
        rows[["id", "city", "ts", "amount"]], _sorted(expected), check_dtype=False
    )


def test_one_partition_grows_alone_and_writes_follow_its_count(spark, table):
    spec_path, table_dir, _ = table
    spec = load_spec(spec_path)
    plan, _ = expand_table(spec, ExpansionRequest(None, partitions=["city=sf"], dry_run=True))
    assert [c.partition_path for c in plan.changes] == ["city=sf"]
    assert plan.changes[0].buckets_after == 8  # the spec's default factor, 2

    expand_table(spec, ExpansionRequest(16, partitions=["city=sf"]), spark=spark)
    counts = {"ams": 4, "sf": 16, "nyc": 4}
    _check_layout(table_dir, counts)
    conf = _configuration(table_dir)
    assert json.loads(conf["runner.index.buckets.partitions"]) == {"city=sf": 16}
    assert conf["runner.index.buckets"] == "4"

    update = _batch(random.Random(9), range(280, 330))
    write_batch(table_dir.parent, update)
    run_pipeline(spec, spark=spark)
    rows = _check_layout(table_dir, counts)
    assert len(rows) == 330 and rows["id"].is_unique

    with pytest.raises(UserError, match="did you mean 'city=sf'"):
        expand_table(spec, ExpansionRequest(32, partitions=["city=sg"], dry_run=True))


@pytest.mark.parametrize(
    "point, request_",
    [
        ("after_bucket_file", ExpansionRequest(8, "multiple_rehash")),
        ("before_commit", ExpansionRequest(8, "multiple_rehash")),
        ("after_bucket_file", ExpansionRequest(None, split=("city=sf/1",))),  # one bucket
    ],
)
def test_a_failed_expansion_leaves_the_table_as_it_was(spark, table, monkeypatch, point, request_):
    spec_path, table_dir, _ = table
    before = _sorted(read_table(table_dir))
    version = DeltaTable(str(table_dir)).version()
    on_disk = {p for p in table_dir.rglob("*.parquet")}
    monkeypatch.setenv("RUNNER_FAULT", point)
    with pytest.raises(Exception, match="injected fault"):
        expand_table(load_spec(spec_path), request_, spark=spark)
    monkeypatch.delenv("RUNNER_FAULT")
    assert DeltaTable(str(table_dir)).version() == version
    pd.testing.assert_frame_equal(_sorted(read_table(table_dir)), before)
    assert {p for p in table_dir.rglob("*.parquet")} == on_disk, "the failed run's files are gone"
    _check_layout(table_dir, dict.fromkeys(CITIES, 4))


def test_a_writer_that_read_the_old_layout_cannot_commit(spark, table):
    spec_path, table_dir, _ = table
    stale = open_table(str(table_dir))
    expand_table(load_spec(spec_path), ExpansionRequest(8, "multiple_rehash"), spark=spark)
    assert_stale_writer_refused(stale)


def test_a_bucket_past_max_bucket_bytes_expands_its_partition_after_the_commit(spark, tmp_path):
    spec_path = write_spec(
        tmp_path,
        {
            "operation": "upsert",
            "record_key": "id",
            "precombine_field": "ts",
            "key_generator": {"type": "SIMPLE", "partition_fields": "city"},
            # one partition gets big buckets: only it passes the threshold
            "index": {"buckets": 2, "expansion": {"factor": 4, "max_bucket_bytes": 6000}},
        },
    )
    rng = random.Random(3)
    big = _batch(rng, range(0, 3000, 3))  # all in 'ams' (k % 3 == 0)
    small = _batch(rng, range(1, 30, 3))  # a few rows in 'sf'
    write_batch(tmp_path, pd.concat([big, small]))
    summary = run_pipeline(load_spec(spec_path), spark=spark)
    assert summary.expansion is not None and summary.expansion["partitions"] == 1
    assert summary.expansion["version"] == summary.version + 1
    conf = _configuration(tmp_path / "table")
    assert json.loads(conf["runner.index.buckets.partitions"]) == {"ams": 8}
    _check_layout_plain(tmp_path / "table", {"ams": 8, "sf": 2})


def _check_layout_plain(table_dir, counts: dict[str, int]) -> None:
    rows = DeltaTable(str(table_dir)).to_pyarrow_table().to_pandas()
    for row in rows.itertuples():
        assert row._5 == bucket_of((str(row.id),), counts[row.city]), row
