"""File groups inside a bucket (index.file_group_bytes): several sorted groups of disjoint key
ranges per bucket, an upsert that rewrites (or marks) only the groups its keys fall in,
splits during a write, merges at compaction, tables written with one group per bucket.

Groups are a few KiB here so that each bucket holds many; the table's content is checked
against a pandas reference after every step, and read back by delta-rs, Polars, the
runner's Spark reader and delta-spark.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import defaultdict

import pandas as pd
import polars as pl
import pyarrow.parquet as pq
import pytest

from runner.actions.compact import compact_table
from runner.actions.expand import ExpansionRequest, expand_table
from runner.commands.inspect import inspect_table, render_report
from runner.commands.key_lookup import lookup_keys
from runner.delta.snapshot import DataFile, open_table
from runner.delta.spark_read import read_table as spark_read_table
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.delta_spark import delta_spark_ready, read_with_delta_spark
from tests.helpers import NEVER_REWRITE, city_content, live_paths, write_batch, write_spec

GROUP_BYTES = 4096  # some 60 of these rows


def _target(table_type: str, group_bytes: int | None = GROUP_BYTES, **extra) -> dict:
    index = {"buckets": 2, **({"file_group_bytes": group_bytes} if group_bytes else {})}
    mor = {"compaction": NEVER_REWRITE} if table_type == "MERGE_ON_READ" else {}
    return {
        "operation": "upsert",
        "table_type": table_type,
        "record_key": "id",
        "precombine_field": "ts",
        "key_generator": {"partition_fields": "city"},
        "index": index,
        "delete_marker": "gone",
        **mor,
        **extra,
    }


def _rows(ids, ts: int, gone: bool = False) -> pd.DataFrame:
    ids = list(ids)
    return pd.DataFrame(
        {
            "id": ids,
            "city": ["ams" if i % 2 else "sf" for i in ids],
            "ts": [ts] * len(ids),
            "v": [f"v{ts}-{i}-" + hashlib.sha1(f"{ts}{i}".encode()).hexdigest() for i in ids],
            "gone": [gone] * len(ids),
        }
    )


class Reference:
    def __init__(self) -> None:
        self.rows: dict[int, tuple] = {}

    def apply(self, batch: pd.DataFrame) -> None:
        for r in batch.itertuples(index=False):
            if r.gone:
                self.rows.pop(r.id, None)
            else:
                self.rows[r.id] = (r.id, r.city, r.ts, r.v)

    def frame(self) -> pd.DataFrame:
        rows = sorted(self.rows.values())
        return pd.DataFrame(rows, columns=["id", "city", "ts", "v"])


def _groups(table) -> dict[tuple[str, int], dict[str, list[DataFile]]]:
    """Per bucket, its files by file group id."""
    by_bucket: dict = defaultdict(lambda: defaultdict(list))
    for f in open_table(str(table)).files():
        by_bucket[(f.partition_path, f.bucket)][f.file_id].append(f)
    return by_bucket


def _check_groups(table) -> int:
    """Every bucket's groups cover disjoint key ranges, and every base file is sorted by
    key; the number of groups."""
    count = 0
    for bucket, groups in _groups(table).items():
        ranges = sorted(
            (min(f.min_key for f in fs), max(f.max_key for f in fs)) for fs in groups.values()
        )
        for (_, hi), (lo, _) in itertools.pairwise(ranges):
            assert hi < lo, f"{bucket}: overlapping groups {ranges}"
        for files in groups.values():
            base = max(files, key=lambda f: f.size)
            keys = pq.read_table(table / base.path, columns=["_record_key"]).column(0).to_pylist()
            assert keys == sorted(keys), f"{base.path} is not sorted by key"
        count += len(groups)
    return count


def _content(table) -> pd.DataFrame:
    return city_content(table).astype({"id": "int64", "ts": "int64"})


# keys are strings: "100".."199" sort below "1000".."1999", "5000".. above them
STEPS = [
    ("first load", lambda: _rows(range(1000, 2000), 1)),
    ("keys inside the ranges", lambda: _rows(range(1000, 2000, 7), 2)),
    ("keys below every range", lambda: _rows(range(100, 200), 3)),
    ("keys above every range", lambda: _rows(range(5000, 5100), 4)),
    ("deletes on both sides", lambda: _rows([*range(100, 120), *range(1500, 1600)], 5, True)),
    ("a mix", lambda: _rows([*range(150, 170), *range(1200, 1300, 3), *range(5090, 5200)], 6)),
]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_groups_match_the_pandas_reference(spark, tmp_path, table_type):
    spec = write_spec(tmp_path, _target(table_type))
    ref = Reference()
    table = tmp_path / "table"
    for step, make in STEPS:
        batch = make()
        write_batch(tmp_path, batch)
        run_pipeline(load_spec(spec), spark=spark)
        ref.apply(batch)
        pd.testing.assert_frame_equal(_content(table), ref.frame(), obj=step)
        groups = _check_groups(table) if table_type == "COPY_ON_WRITE" else len(live_paths(table))
        assert groups >= 4 * 2, f"{step}: every bucket holds several groups"
    if table_type == "MERGE_ON_READ":
        compact_table(load_spec(spec), spark=spark)
        _check_groups(table)
    expected = ref.frame()
    pd.testing.assert_frame_equal(_content(table), expected)
    data = ["id", "city", "ts", "v"]
    for name, frame in [
        ("spark", spark_read_table(spark, str(table)).toPandas()),
        ("polars", pl.read_delta(str(table)).to_pandas()),
    ]:
        got = frame[data].sort_values("id").reset_index(drop=True).astype({"id": "int64"})
        pd.testing.assert_frame_equal(got, expected, check_dtype=False, obj=name)
    if delta_spark_ready(spark) is None:
        got = pd.DataFrame(read_with_delta_spark(spark, table))[data]
        got = got.sort_values("id").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, expected, check_dtype=False, obj="delta-spark")


def test_a_copy_on_write_upsert_rewrites_only_its_keys_groups(spark, tmp_path):
    spec = write_spec(tmp_path, _target("COPY_ON_WRITE"))
    write_batch(tmp_path, _rows(range(1000, 2000), 1))
    run_pipeline(load_spec(spec), spark=spark)
    table = tmp_path / "table"
    before = live_paths(table)
    bucket_files = {
        g: {f.path for fs in groups.values() for f in fs} for g, groups in _groups(table).items()
    }

    write_batch(tmp_path, _rows([1234], 2))
    done = run_pipeline(load_spec(spec), spark=spark)

    after = live_paths(table)
    [gone] = before - after  # one group's file replaced
    [bucket] = [g for g, paths in bucket_files.items() if gone in paths]
    assert len(bucket_files[bucket]) >= 3  # ... out of a bucket of several groups
    assert (done.updated, done.files_removed) == (1, 1)
    assert done.bytes_written < sum(f.size for f in open_table(str(table)).files()) / 5
    assert _check_groups(table) >= len(before)

    # `runner inspect` counts the groups, none of them a multi-file group
    report = inspect_table(str(table))
    assert all(p["file_groups"] > p["buckets"] for p in report["partitions"])
    assert report["buckets_with_several_files"] == 0
    assert " groups" in render_report(report).splitlines()[3]

    # a key lookup opens one file per partition: its bucket's group whose range holds it
    found = lookup_keys(str(table), ["1234"])
    assert found.rows.column("v").to_pylist() == _rows([1234], 2)["v"].tolist()
    assert dict(found.opened) == {"sf": 1, "ams": 1} and found.files_total > 12


def test_a_merge_on_read_upsert_marks_and_appends_to_its_keys_group_only(spark, tmp_path):
    spec = write_spec(tmp_path, _target("MERGE_ON_READ"))
    write_batch(tmp_path, _rows(range(1000, 2000), 1))
    run_pipeline(load_spec(spec), spark=spark)
    table = tmp_path / "table"
    before = {f.path: f for f in open_table(str(table)).files()}

    write_batch(tmp_path, _rows([1234, 1236], 2))  # both in "sf", maybe two buckets
    done = run_pipeline(load_spec(spec), spark=spark)

    files = open_table(str(table)).files()
    marked = [f for f in files if f.deletion_vector is not None]
    new = [f for f in files if f.path not in before]
    assert done.updated == 2 and done.files_removed == 0
    assert len(marked) == len(new) == done.buckets_with_deletion_vectors  # one group each
    for delta in new:  # each delta file joins the group of the base file it marks
        assert delta.file_id in {f.file_id for f in marked}
        assert delta.min_key in {"1234", "1236"}
    assert len(before) > 4 * len(marked)


def test_a_rewrite_past_the_target_splits_its_group_in_one_commit(spark, tmp_path, monkeypatch):
    spec = write_spec(tmp_path, _target("COPY_ON_WRITE", group_bytes=64 * 1024))
    write_batch(tmp_path, _rows(range(1000, 1400), 1))
    run_pipeline(load_spec(spec), spark=spark)
    table = tmp_path / "table"
    assert _check_groups(table) == 4  # one group per bucket: under the target
    version = open_table(str(table)).version
    files_on_disk = set(table.rglob("*.parquet"))

    spec = write_spec(tmp_path, _target("COPY_ON_WRITE", group_bytes=4096))
    write_batch(tmp_path, _rows(range(1000, 1400, 50), 2))
    monkeypatch.setenv("RUNNER_FAULT", "after_group_split")
    with pytest.raises(Exception, match="injected fault at after_group_split"):
        run_pipeline(load_spec(spec), spark=spark)
    assert open_table(str(table)).version == version  # the failed split changed nothing
    assert set(table.rglob("*.parquet")) == files_on_disk
    monkeypatch.delenv("RUNNER_FAULT")

    done = run_pipeline(load_spec(spec), spark=spark)
    assert done.version == version + 1
    # each rewritten bucket split into two or more groups, in the same commit
    assert done.files_removed >= 1 and done.files_added >= 2 * done.files_removed
    assert _check_groups(table) == 4 + done.files_added - done.files_removed
    assert len(_content(table)) == 400


def test_compaction_merges_small_groups_and_a_table_of_one_group_per_bucket_converts(
    spark, tmp_path
):
    """A table written with one group per bucket (as before file groups) upserts and
    compacts as it did; with a small target its rewritten buckets become sorted groups,
    and a large target's compaction merges them back."""
    table = tmp_path / "table"
    big = write_spec(tmp_path, _target("MERGE_ON_READ", group_bytes=None), name="big")
    write_batch(tmp_path, _rows(range(1000, 1600), 1))
    run_pipeline(load_spec(big), spark=spark)
    write_batch(tmp_path, _rows(range(1000, 1600, 9), 2))
    run_pipeline(load_spec(big), spark=spark)
    expected = _content(table)
    assert len(_groups(table)) == 4 and all(len(g) == 1 for g in _groups(table).values())

    small = write_spec(tmp_path, _target("MERGE_ON_READ", group_bytes=4096), name="small")
    summary = compact_table(load_spec(small), spark=spark)
    assert summary.buckets == 4
    assert _check_groups(table) > 8
    pd.testing.assert_frame_equal(_content(table), expected)
    # nothing to compact now: groups of the target, each one file
    assert compact_table(load_spec(small), spark=spark).buckets == 0

    merged = compact_table(load_spec(big), spark=spark)  # the default target, 128 MiB
    assert merged.buckets == 4 and _check_groups(table) == 4
    pd.testing.assert_frame_equal(_content(table), expected)


def test_bulk_insert_sorted_by_key_writes_sorted_groups_of_the_target(spark, tmp_path):
    """bulk_insert_sort: by_key writes each bucket as sorted groups of about the target,
    every row kept (a key twice stays twice, in one group); the default writes one
    unsorted file per bucket and task, which the first upsert sorts into groups."""
    rows = _rows(range(1000, 2000), 1)
    twice = _rows([1500], 1)  # the same key twice in the batch: bulk_insert keeps both
    write_batch(tmp_path, pd.concat([rows, twice]).sample(frac=1, random_state=7))
    target = _target("COPY_ON_WRITE", operation="bulk_insert", bulk_insert_sort="by_key")
    del target["delete_marker"]  # for upserts only
    run_pipeline(load_spec(write_spec(tmp_path, target)), spark=spark)
    table = tmp_path / "table"
    assert _check_groups(table) >= 4 * 3  # every bucket cut into several sorted groups
    sizes = [f.size for f in open_table(str(table)).files()]
    assert max(sizes) < 3 * GROUP_BYTES
    content = _content(table)
    assert len(content) == 1001 and (content["id"] == 1500).sum() == 2

    unsorted = tmp_path / "unsorted"
    unsorted.mkdir()
    write_batch(unsorted, rows)
    del target["bulk_insert_sort"]
    run_pipeline(load_spec(write_spec(unsorted, target)), spark=spark)
    per_bucket = [len(groups) for groups in _groups(unsorted / "table").values()]
    assert per_bucket == [1] * 4  # one group (of one file per task) per bucket
    upsert = _target("COPY_ON_WRITE")
    del upsert["delete_marker"]  # the bulk load stored `gone` as a column
    write_batch(unsorted, _rows(range(1000, 2000, 5), 2))
    run_pipeline(load_spec(write_spec(unsorted, upsert)), spark=spark)
    assert _check_groups(unsorted / "table") >= 4 * 3  # rewritten: sorted, in groups


@pytest.mark.parametrize(
    ("table_type", "policy"),
    [
        ("COPY_ON_WRITE", "multiple_rehash"),
        ("COPY_ON_WRITE", "split"),
        ("MERGE_ON_READ", "overwrite"),
    ],
)
def test_an_expansion_keeps_each_new_bucket_in_groups(spark, tmp_path, table_type, policy):
    """Doubling a partition (or splitting one bucket) writes each new bucket as several
    groups of disjoint key ranges, not one file; upserts and deletes on both sides of the
    split then rewrite only their groups, and the content follows the pandas reference."""
    spec = write_spec(tmp_path, _target(table_type))
    ref = Reference()
    for batch in (_rows(range(1000, 2000), 1), _rows(range(1000, 2000, 13), 2)):
        write_batch(tmp_path, batch)
        run_pipeline(load_spec(spec), spark=spark)
        ref.apply(batch)
    table = tmp_path / "table"
    split = ("sf/1",) if policy == "split" else ()
    request = ExpansionRequest(None, split=split) if split else ExpansionRequest(4, policy)
    expand_table(load_spec(spec), request, spark=spark)
    pd.testing.assert_frame_equal(_content(table), ref.frame())
    after = _groups(table)
    grown = [("sf", 1), ("sf", 3)] if split else list(after)  # bucket 1 of 2 splits into 1, 3
    assert len(after) == (5 if split else 8)
    for g in grown:  # each new bucket several groups, not one file
        assert len(after[g]) > 2, f"{g}: {len(after[g])} group(s)"
    _check_groups(table)

    batch = _rows([*range(1300, 1400, 9), *range(5000, 5010)], 3)  # old keys and new ones
    batch.loc[batch.index[:5], "gone"] = True
    write_batch(tmp_path, batch)
    done = run_pipeline(load_spec(spec), spark=spark)
    ref.apply(batch)
    pd.testing.assert_frame_equal(_content(table), ref.frame())
    assert done.files_removed + done.buckets_with_deletion_vectors < len(live_paths(table)) / 2
