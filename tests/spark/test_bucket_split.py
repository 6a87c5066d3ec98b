"""One hot bucket split alone (extendible hashing) on real Delta tables: the split's commit,
the writes after it, a child split again, a partition-wide expansion after it, writers that
race it, and the automatic split, against a pandas reference and an independent bucket model
(tests/reference.py's spark_hash and the leaves each split leaves)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from deltalake import DeltaTable

from runner.actions.expand import (
    ExpansionRequest,
    expand_table,
    run_expansion,
)
from runner.actions.rehash_bitmaps import bitmap_frame
from runner.commands.keys import preview_keys, table_layout
from runner.delta.snapshot import open_table
from runner.errors import CommitConflictError
from runner.index.bucket import layout_bucket_column
from runner.index.layout import BucketLayout
from runner.index.naming import parse_data_file_name
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.helpers import (
    NEVER_REWRITE,
    assert_rows_not_shuffled,
    assert_stale_writer_refused,
    city_rows,
    city_target,
    log_actions,
    read_table,
    write_batch,
    write_spec,
)
from tests.reference import spark_hash

Leaves = dict[str, set[tuple[int, int]]]  # partition: its buckets as (bucket, modulus)


def _model_bucket(leaves: Leaves, city: str, key: int) -> int:
    h = spark_hash(str(key))
    (bucket,) = [b for b, m in leaves[city] if h % m == b]
    return bucket


def _split(leaves: Leaves, city: str, bucket: int) -> None:
    (modulus,) = [m for b, m in leaves[city] if b == bucket]
    leaves[city] -= {(bucket, modulus)}
    leaves[city] |= {(bucket, 2 * modulus), (bucket + modulus, 2 * modulus)}


def _ids_in(city_parity: int, leaf: tuple[int, int], count: int, start: int = 0) -> list[int]:
    """`count` ids of one city (odd: ams, even: sf) whose hash falls in `leaf`."""
    bucket, modulus = leaf
    ids = (i for i in range(start, 10**6) if i % 2 == city_parity)
    picked = (i for i in ids if spark_hash(str(i)) % modulus == bucket)
    return [next(picked) for _ in range(count)]


class Table:
    """A city_target table (2 buckets, a change data feed, deletes by the `gone` column)
    with its pandas reference: each batch's ts is above every earlier one."""

    def __init__(self, spark, tmp_path: Path, table_type: str):
        mor = {"compaction": NEVER_REWRITE} if table_type == "MERGE_ON_READ" else {}
        target = city_target(
            "upsert", table_type=table_type, change_data_feed=True, delete_marker="gone", **mor
        )
        target["index"] = {"buckets": 2}
        self.spark, self.dir, self.path = spark, tmp_path, tmp_path / "table"
        self.spec = load_spec(write_spec(tmp_path, target))
        self.rows: dict[int, tuple] = {}
        self.ts = 0
        self.leaves: Leaves = {c: {(0, 2), (1, 2)} for c in ("ams", "sf")}

    def write(self, ids, gone=()) -> None:
        self.ts += 1
        batch = city_rows(ids, self.ts)
        batch["gone"] = [i in gone for i in batch["id"]]
        write_batch(self.dir, batch)
        run_pipeline(self.spec, spark=self.spark)
        for row in batch.itertuples(index=False):
            if row.gone:
                self.rows.pop(row.id, None)
            else:
                self.rows[row.id] = (row.city, row.ts, row.v)

    def expand(self, request: ExpansionRequest):
        _, done = expand_table(self.spec, request, spark=self.spark)
        assert done is not None
        return done

    def check(self) -> pd.DataFrame:
        """delta-rs reads the reference's rows, each in its bucket by the model, and each
        file holds one bucket of the model, named in its file name."""
        rows = read_table(self.path)
        got = rows[["id", "city", "ts", "v"]].sort_values("id").reset_index(drop=True)
        expected = pd.DataFrame(
            [(k, *v) for k, v in sorted(self.rows.items())], columns=["id", "city", "ts", "v"]
        )
        pd.testing.assert_frame_equal(got, expected, check_dtype=False)
        for row in rows.itertuples():
            assert row._5 == _model_bucket(self.leaves, row.city, row.id), row
        for f in open_table(str(self.path)).files():
            name = parse_data_file_name(f.path)
            assert name is not None and name.bucket == f.bucket
            assert f.bucket in {b for b, _ in self.leaves[f.partition_path]}
        return rows


def _commit_of(table: Path, version: int) -> dict[str, list[dict]]:
    by_kind: dict[str, list[dict]] = {}
    for action in log_actions(table, version):
        kind = next(iter(action))
        by_kind.setdefault(kind, []).append(action[kind])
    return by_kind


def test_the_spark_expression_follows_every_split_depth_and_count(spark):
    """Partitions with their own count, splits at several depths, the table root, and a
    partition with neither: every key's bucket against the model."""
    layout = BucketLayout(4, {"b": 3}).split("a", 1).split("a", 5).split("a", 13)
    layout = layout.split("b", 2).split("", 0).split("", 4)
    leaves: Leaves = {pp: set(layout.leaves(pp)) for pp in ("a", "b", "", "c")}
    assert leaves["a"] == {(0, 4), (2, 4), (3, 4), (1, 8), (5, 16), (13, 32), (29, 32)}
    keys = [(pp, i) for pp in leaves for i in range(300)]
    frame = spark.createDataFrame(keys, "pp string, id long")
    bucket = layout_bucket_column(("id",), layout, frame["pp"])
    got = [(r.pp, r.id, r.b) for r in frame.select("pp", "id", bucket.alias("b")).collect()]
    assert got == [(pp, i, _model_bucket(leaves, pp, i)) for pp, i in keys]
    assert all(layout.bucket_of(pp, spark_hash(str(i))) == b for pp, i, b in got)


def test_a_bucket_splits_alone_then_writes_a_child_split_and_a_partition_expansion_follow(
    spark, tmp_path, table_type
):
    t = Table(spark, tmp_path, table_type)
    t.write(range(200))
    hot = _ids_in(0, (1, 2), 12)  # sf keys of bucket 1
    t.write([*hot[:6], 300, 302], gone=hot[6:9])  # MOR: deletion vectors and a delta file
    snapshot = open_table(str(t.path))
    before = {f.path: f for f in snapshot.files()}

    done = t.expand(ExpansionRequest(None, split=("sf/1",)))
    _split(t.leaves, "sf", 1)
    assert done.version == snapshot.version + 1 and done.buckets_split == 1 and not done.shuffle
    commit = _commit_of(t.path, done.version)
    conf = commit["metaData"][0]["configuration"]
    assert json.loads(conf["runner.index.buckets.splits"]) == {"sf": {"1": 4, "3": 4}}
    assert conf["runner.index.buckets"] == "2"
    removed = [before[r["path"]] for r in commit["remove"]]
    assert {(f.partition_path, f.bucket) for f in removed} == {("sf", 1)}
    assert [f for f in before.values() if (f.partition_path, f.bucket) == ("sf", 1)] == removed
    if table_type == "MERGE_ON_READ":  # a base file with a deletion vector and a delta file
        assert len(removed) >= 2 and any(f.deletion_vector for f in removed)
    # one file per child, the deleted rows not copied, no row changed, nothing in the feed
    live = sum(1 for k, (city, _, _) in t.rows.items() if city == "sf" and spark_hash(str(k)) % 2)
    assert sorted(parse_data_file_name(a["path"]).bucket for a in commit["add"]) == [1, 3]
    assert sum(json.loads(a["stats"])["numRecords"] for a in commit["add"]) == live == done.rows
    assert not any(a.get("deletionVector") for a in commit["add"])
    assert not any(a["dataChange"] for a in commit["add"] + commit["remove"])
    assert "cdc" not in commit
    t.check()

    # upserts and deletes on both sides of the split, and new keys
    side_1, side_3 = _ids_in(0, (1, 4), 4, 1000), _ids_in(0, (3, 4), 4, 1000)
    t.write(side_1 + side_3 + [hot[0], hot[1], 401], gone=[side_1[0], side_3[0], hot[1]])
    rows = t.check()
    assert {1, 3} <= set(rows[rows.city == "sf"]["_bucket"])

    # a child splits again: 3 at modulus 4 into 3 and 7 at 8
    t.expand(ExpansionRequest(None, split=("sf/3",)))
    _split(t.leaves, "sf", 3)
    t.write(_ids_in(0, (7, 8), 3, 2000) + side_3[1:2], gone=side_3[2:3])
    t.check()
    layout = table_layout(t.spec.target)  # `runner keys` follows the table's layout
    lines = t.dir / "keys.jsonl"
    lines.write_text("".join(f'{{"id": {i}, "city": "sf", "ts": 1}}\n' for i in range(40)))
    keyed = preview_keys(spark, t.spec.target, lines, "id long, city string, ts long", layout)
    assert [k["bucket"] for k in keyed] == [_model_bucket(t.leaves, "sf", i) for i in range(40)]

    # the whole table 2 -> 4: sf's buckets at modulus 4 fold into the count, 3 and 7 at 8 stay
    t.expand(ExpansionRequest(4, "multiple_rehash"))
    t.leaves = {"ams": {(b, 4) for b in range(4)}, "sf": {(0, 4), (1, 4), (2, 4), (3, 8), (7, 8)}}
    conf = DeltaTable(str(t.path)).metadata().configuration
    assert json.loads(conf["runner.index.buckets.splits"]) == {"sf": {"3": 8, "7": 8}}
    t.write([*side_1[1:3], 5000, 5002], gone=side_1[3:4])
    t.check()


def test_writers_racing_a_split(spark, tmp_path):
    """A write to another bucket meanwhile: the split commits over it. A write to the split
    bucket meanwhile: the split is refused. A writer that read the old layout: refused."""
    t = Table(spark, tmp_path, "COPY_ON_WRITE")
    t.write(range(100))
    stale = open_table(str(t.path))
    plan, _ = expand_table(t.spec, ExpansionRequest(None, split=("sf/1",), dry_run=True))
    assert_rows_not_shuffled(
        bitmap_frame(spark, stale, t.spec.target, plan, plan.files), ["v", "ts"]
    )

    t.write([*_ids_in(0, (0, 2), 3), 1, 3])  # sf bucket 0 and ams: not the split bucket
    done = run_expansion(spark, stale, t.spec.target, plan)
    assert done.version == 3  # version 2 was the other writer's
    _split(t.leaves, "sf", 1)
    t.check()
    assert_stale_writer_refused(stale)

    again, _ = expand_table(t.spec, ExpansionRequest(None, split=("sf/3",), dry_run=True))
    read = open_table(str(t.path))
    t.write(_ids_in(0, (3, 4), 2))  # into the bucket being split
    with pytest.raises(CommitConflictError, match="changed files of the partitions being"):
        run_expansion(spark, read, t.spec.target, again)
    t.check()


def test_the_policy_split_splits_each_bucket_past_max_bucket_bytes_after_a_commit(spark, tmp_path):
    target = city_target("upsert")
    target["index"] = {
        "buckets": 2,
        "expansion": {"policy": "split", "max_bucket_bytes": 6000},
    }
    spec = load_spec(write_spec(tmp_path, target))
    big = _ids_in(1, (0, 2), 1200)  # ams bucket 0 passes the threshold, nothing else does
    ids = sorted({*big, 1, 3, 2, 4, 6})
    write_batch(tmp_path, city_rows(ids, 1))
    summary = run_pipeline(spec, spark=spark)
    assert summary.expansion is not None and summary.expansion["buckets_split"] == 1
    assert "split 1 bucket(s) alone" in summary.render()
    conf = DeltaTable(str(tmp_path / "table")).metadata().configuration
    assert json.loads(conf["runner.index.buckets.splits"]) == {"ams": {"0": 4, "2": 4}}
    leaves = {"ams": {(0, 4), (2, 4), (1, 2)}, "sf": {(0, 2), (1, 2)}}
    rows = read_table(tmp_path / "table")
    assert sorted(rows["id"]) == ids
    for row in rows.itertuples():
        assert row._5 == _model_bucket(leaves, row.city, row.id), row
    # a bare `runner expand` splits by the same rule: the children still past it
    sizes: dict[str, int] = {}
    for f in open_table(str(tmp_path / "table")).files():
        name = f"{f.partition_path}/{f.bucket}"
        sizes[name] = sizes.get(name, 0) + f.size
    plan, _ = expand_table(spec, ExpansionRequest(None, dry_run=True))
    assert [s.name for s in plan.splits] == sorted(n for n, b in sizes.items() if b > 6000)
    assert [s.name for s in plan.splits] == ["ams/0", "ams/2"] and not plan.changes
