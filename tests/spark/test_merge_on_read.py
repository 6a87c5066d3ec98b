"""MERGE_ON_READ tables: deletion vectors and delta files, the per-bucket rewrite, compaction,
every runner reader honouring deletion vectors, crashes and concurrent writers.

Write semantics against the pandas reference run for both table types in
test_write_semantics.py; this file covers what only merge-on-read has.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import polars as pl
import pytest
import yaml
from deltalake import DeltaTable

from runner.actions.clean import clean_table
from runner.actions.compact import CompactSummary, compact_table, plan_compaction, run_compaction
from runner.actions.expand import ExpansionRequest, expand_table
from runner.commands.inspect import inspect_table
from runner.commands.read import read_rows
from runner.delta import transaction
from runner.delta.snapshot import open_table
from runner.delta.spark_read import read_table as spark_read_table
from runner.errors import TableMismatchError
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.helpers import (
    city_content,
    city_rows,
    city_target,
    file_bytes,
    read_table,
    write_batch,
    write_spec,
)

N = 400


def _target(**extra) -> dict:
    return city_target(extra.pop("operation", "upsert"), table_type="MERGE_ON_READ", **extra)


@pytest.fixture
def table(spark, tmp_path):
    """A MERGE_ON_READ table of N rows, 2 partitions x 4 buckets, one file per bucket."""
    spec = write_spec(tmp_path, _target())
    write_batch(tmp_path, city_rows(range(N), 1))
    run_pipeline(load_spec(spec), spark=spark)
    return spec


def _delete_spec(tmp_path, **extra):
    target = {k: v for k, v in _target(operation="delete", **extra).items()}
    target.pop("precombine_field")
    return write_spec(tmp_path, target, name="del")


def _upsert(spark, tmp_path, spec, frame):
    write_batch(tmp_path, frame)
    return run_pipeline(load_spec(spec), spark=spark)


def test_a_small_upsert_writes_deletion_vectors_and_delta_files_only(spark, tmp_path, table):
    before = open_table(str(tmp_path / "table")).files()
    summary = _upsert(spark, tmp_path, table, city_rows([1, 2, 3], 2))
    assert (summary.updated, summary.files_removed) == (3, 0)
    assert summary.buckets_with_deletion_vectors == summary.buckets_touched > 0
    assert summary.buckets_rewritten == 0
    assert "got deletion vectors" in summary.render()

    after = open_table(str(tmp_path / "table")).files()
    assert {f.path for f in before} <= {f.path for f in after}  # stored files stay
    delta_files = [f for f in after if f.path not in {b.path for b in before}]
    assert sum(f.num_records for f in delta_files) == 3  # only the batch's rows were written
    assert sum(f.deleted_records for f in after) == 3
    assert sum(f.live_records for f in after) == N
    protocol = DeltaTable(str(tmp_path / "table")).protocol()
    assert "deletionVectors" in protocol.reader_features
    content = city_content(tmp_path / "table")
    assert len(content) == N
    assert content.set_index("id").loc[2, "v"] == "v2-2"
    # each reader a user would try sees the same rows
    via_polars = pl.read_delta(str(tmp_path / "table")).to_pandas()
    assert sorted(via_polars["v"]) == sorted(content["v"])
    via_spark = spark_read_table(spark, str(tmp_path / "table")).toPandas()
    assert sorted(via_spark["v"]) == sorted(content["v"])
    # the README's reader too (delta-rs' to_pyarrow_table() refuses deletion vectors)
    assert _readme_reader(tmp_path / "table") == (DeltaTable(str(tmp_path / "table")).version(), N)


def _readme_reader(table: Path) -> object:
    """What the README's reader (its tour's Python block) gives on `table`: its first
    expression, (version, rows)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {}
    values = []
    for line in block.replace("pipelines/warehouse/trips", str(table)).splitlines():
        code = line.partition("#")[0].strip()
        try:
            values.append(eval(compile(code, "README.md", "eval"), namespace))
        except SyntaxError:
            exec(code, namespace)
    return values[0]


def test_a_bucket_past_the_thresholds_is_rewritten_in_the_same_commit(spark, tmp_path, table):
    spec = write_spec(tmp_path, _target(compaction={"max_deleted_fraction": 0.3}))
    # ids 0..99 of the sf partition's buckets: about half of each sf bucket's rows change
    summary = _upsert(spark, tmp_path, spec, city_rows(range(0, 200, 2), 2))
    assert summary.buckets_rewritten > 0 and summary.files_removed == summary.buckets_rewritten
    # one more small upsert on the ams side still gets deletion vectors
    small = _upsert(spark, tmp_path, spec, city_rows([1], 3))
    assert small.buckets_with_deletion_vectors == 1
    content = city_content(tmp_path / "table")
    assert len(content) == N and content.set_index("id").loc[0, "ts"] == 2


def test_max_delta_files_caps_the_files_of_a_bucket(spark, tmp_path, table):
    spec = write_spec(tmp_path, _target(compaction={"max_delta_files": 3}))
    for ts in range(2, 7):
        _upsert(spark, tmp_path, spec, city_rows([5], ts))
    files = open_table(str(tmp_path / "table")).files_by_group()
    assert max(len(f) for f in files.values()) <= 3
    assert city_content(tmp_path / "table").set_index("id").loc[5, "ts"] == 6


def test_a_bulk_loads_several_files_of_a_bucket_are_its_base_not_delta_files(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    limits = {"max_delta_files": 2}
    load = write_spec(tmp_path, _target(operation="bulk_insert", compaction=limits))
    (tmp_path / "in").mkdir()
    for part in range(4):  # several input tasks: each writes its own file per bucket
        rows = pa.Table.from_pandas(city_rows(range(part * 100, part * 100 + 100), 1))
        pq.write_table(rows, tmp_path / "in" / f"{part}.parquet")
    run_pipeline(load_spec(load), spark=spark)
    loaded = open_table(str(tmp_path / "table")).files_by_group()
    base = max(loaded.values(), key=len)  # the load's base of a bucket: files of one commit
    assert len(base) >= 2
    key = int(pl.read_parquet(str(tmp_path / "table" / base[0].path))["id"][0])
    spec = write_spec(tmp_path, _target(compaction=limits), name="up")
    first = _upsert(spark, tmp_path, spec, city_rows([key], 2))
    # one commit wrote the bucket: a deletion vector and a delta file, no rewrite
    assert (first.buckets_rewritten, first.buckets_with_deletion_vectors) == (0, 1)
    second = _upsert(spark, tmp_path, spec, city_rows([key], 3))
    assert second.buckets_rewritten == 1  # two commits wrote it now: max_delta_files 2
    assert city_content(tmp_path / "table").set_index("id").loc[key, "ts"] == 3


def test_small_delta_files_are_folded_into_the_next_one(spark, tmp_path):
    # one bucket per partition, large enough that a few rows are small beside its base file
    spec = write_spec(tmp_path, _target(index={"buckets": 1}))
    write_batch(tmp_path, city_rows(range(12000), 1))
    run_pipeline(load_spec(spec), spark=spark)
    base = {f.path for f in open_table(str(tmp_path / "table")).files()}
    # 6 and 8 are sf rows: the second upsert replaces 6 again, in the delta file this time
    _upsert(spark, tmp_path, spec, city_rows([6, 8], 2))
    second = _upsert(spark, tmp_path, spec, city_rows([6, 10], 3))
    assert second.files_removed == 1 and second.buckets_rewritten == 0

    files = open_table(str(tmp_path / "table")).files_by_group()
    sf = files[("sf", 0)]
    assert len(sf) == 2  # the base file and one delta file, however many upserts
    (delta,) = [f for f in sf if f.path not in base]
    assert delta.deletion_vector is None  # the replaced row of the folded file was left out
    assert sorted(pl.read_parquet(str(tmp_path / "table" / delta.path))["id"]) == [6, 8, 10]
    (stored,) = [f for f in sf if f.path in base]
    assert stored.deleted_records == 3
    content = city_content(tmp_path / "table").set_index("id")
    assert len(content) == 12000
    assert (content.loc[6, "ts"], content.loc[8, "ts"], content.loc[10, "ts"]) == (3, 2, 3)
    via_polars = pl.read_delta(str(tmp_path / "table")).to_pandas().set_index("id")
    assert len(via_polars) == 12000 and via_polars.loc[6, "ts"] == 3

    # new keys only: both files' key filters rule them out, so neither file's keys are
    # read, and the folded delta file's rows are copied whole into the new one
    third = _upsert(spark, tmp_path, spec, city_rows([20000, 20002], 4))
    assert (third.inserted, third.stored_files_searched, third.stored_files_ruled_out) == (2, 2, 2)
    assert "2 ruled out by their key filters" in third.render()
    sf = open_table(str(tmp_path / "table")).files_by_group()[("sf", 0)]
    (delta,) = [f for f in sf if f.path not in base]
    assert sorted(pl.read_parquet(str(tmp_path / "table" / delta.path))["id"]) == [
        *(6, 8, 10, 20000, 20002)
    ]
    content = city_content(tmp_path / "table").set_index("id")
    assert len(content) == 12002 and (content.loc[6, "ts"], content.loc[20000, "ts"]) == (3, 4)


def test_compaction_folds_each_bucket_into_one_sorted_file(spark, tmp_path, table):
    for ts, ids in ((2, [1, 2, 3, 4]), (3, [3, 4, 500, 501])):
        _upsert(spark, tmp_path, table, city_rows(ids, ts))
    _upsert(spark, tmp_path, _delete_spec(tmp_path), city_rows([10, 11], 0)[["id", "city"]])
    expected = city_content(tmp_path / "table")
    report = inspect_table(str(tmp_path / "table"))
    assert report["deleted_rows"] > 0 and report["table_type"] == "MERGE_ON_READ"

    dry = compact_table(load_spec(table), dry_run=True)
    assert dry.buckets > 0 and dry.version is None and "would fold" in dry.render()
    done = compact_table(load_spec(table), spark=spark)
    assert done.version is not None and done.buckets == dry.buckets
    snapshot = open_table(str(tmp_path / "table"))
    groups = snapshot.files_by_group()
    assert all(len(files) == 1 for files in groups.values())
    assert not any(f.deletion_vector for f in snapshot.files())
    pd.testing.assert_frame_equal(city_content(tmp_path / "table"), expected)
    # one file per bucket, sorted by key; nothing left to compact
    one = DeltaTable(str(tmp_path / "table")).file_uris()[0]
    keys = pl.read_parquet(one)["_record_key"].to_list()
    assert keys == sorted(keys)
    assert compact_table(load_spec(table)).buckets == 0
    # the commit changes no row: an incremental reader of it gets nothing
    assert DeltaTable(str(tmp_path / "table")).history(1)[0]["operation"] == "OPTIMIZE"


@pytest.mark.parametrize("point", ["after_bucket_file", "before_commit"])
def test_a_failed_compaction_leaves_the_table_as_it_was(spark, tmp_path, table, monkeypatch, point):
    """A compaction is a table change like a run's write (runner/actions/table_change.py):
    a failure before its commit leaves every file and the log as they were."""
    _upsert(spark, tmp_path, table, city_rows([1, 2, 3], 2))
    before = file_bytes(tmp_path / "table")
    monkeypatch.setenv("RUNNER_FAULT", point)
    with pytest.raises(Exception, match=f"injected fault at {point}"):
        compact_table(load_spec(table), spark=spark)
    assert file_bytes(tmp_path / "table") == before  # its new files are removed
    monkeypatch.delenv("RUNNER_FAULT")
    assert compact_table(load_spec(table), spark=spark).version is not None


def test_compaction_after_commit_folds_the_buckets_past_a_threshold(spark, tmp_path, table):
    spec = write_spec(
        tmp_path,
        _target(
            compaction={"max_delta_files": 2, "max_deleted_fraction": 1.0, "after_commit": True}
        ),
    )
    summary = _upsert(spark, tmp_path, spec, city_rows([7], 2))
    assert summary.compaction is not None and summary.compaction["buckets"] == 1
    assert "compacted" in summary.render()
    assert all(len(f) == 1 for f in open_table(str(tmp_path / "table")).files_by_group().values())
    assert city_content(tmp_path / "table").set_index("id").loc[7, "ts"] == 2


def test_a_writer_committing_during_compaction_loses_no_delete(spark, tmp_path, table):
    _upsert(spark, tmp_path, table, city_rows([1, 2], 2))
    stale = open_table(str(tmp_path / "table"))
    buckets = plan_compaction(stale)
    # a writer deletes (by DV) a row of a bucket compaction is about to fold
    _upsert(spark, tmp_path, table, city_rows([1], 3))
    summary = CompactSummary(str(tmp_path / "table"), dry_run=False)
    done = run_compaction(spark, stale, buckets, summary)
    assert len(done.buckets_dropped) == 1
    content = city_content(tmp_path / "table").set_index("id")
    assert len(content) == N and content.loc[1, "ts"] == 3 and content.loc[2, "ts"] == 2


def _race(monkeypatch, spark, tmp_path, frame):
    """Another writer commits `frame` just before this run's first commit attempt."""
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = write_spec(other_dir, {**_target(), "path": str(tmp_path / "table")}, name="other")
    real = transaction._publish_entry
    pending = [frame]

    def racing(*args, **kwargs):
        if pending:
            write_batch(other_dir, pending.pop())
            run_pipeline(load_spec(other), spark=spark)
        return real(*args, **kwargs)

    monkeypatch.setattr(transaction, "_publish_entry", racing)


def test_two_writers_adding_deletion_vectors_to_one_file_lose_no_delete(
    spark, tmp_path, table, monkeypatch
):
    # 1 and 9 share a bucket file (4 buckets, ids hashed): find two ids of one bucket
    files = open_table(str(tmp_path / "table")).files()
    one = pl.read_parquet(str(tmp_path / "table" / files[0].path))
    a, b = one["id"].to_list()[:2]
    _race(monkeypatch, spark, tmp_path, city_rows([a], 5, city=[one["city"][0]]))
    summary = _upsert(spark, tmp_path, table, city_rows([b], 6, city=[one["city"][0]]))
    assert summary.version is not None
    content = city_content(tmp_path / "table").set_index("id")
    assert len(content) == N  # neither old row of a or b came back
    assert content.loc[a, "ts"] == 5 and content.loc[b, "ts"] == 6


@pytest.mark.parametrize("point", ["after_deletion_vector", "before_commit"])
def test_a_failed_upsert_leaves_the_table_as_it_was(spark, tmp_path, table, monkeypatch, point):
    before = file_bytes(tmp_path / "table")
    monkeypatch.setenv("RUNNER_FAULT", point)
    write_batch(tmp_path, city_rows([1, 2, 3], 2))
    with pytest.raises(Exception, match="injected fault"):
        run_pipeline(load_spec(table), spark=spark)
    assert file_bytes(tmp_path / "table") == before  # its DV and data files are removed
    monkeypatch.delenv("RUNNER_FAULT")
    assert run_pipeline(load_spec(table), spark=spark).updated == 3


def test_runner_readers_honour_deletion_vectors(spark, tmp_path, table):
    first = _upsert(spark, tmp_path, table, city_rows([1, 2], 2))
    _upsert(spark, tmp_path, table, city_rows([2, 3], 3))
    path = str(tmp_path / "table")
    everything = read_rows(path)
    assert everything.rows.num_rows == N
    since = read_rows(path, since=first.instant)
    assert sorted(since.rows.column("id").to_pylist()) == [2, 3]  # 1's row of `first` too...
    older = read_rows(path, as_of=str(first.version))
    assert older.rows.num_rows == N
    assert {r["id"]: r["ts"] for r in older.rows.to_pylist() if r["id"] in (1, 2, 3)} == {
        1: 2,
        2: 2,
        3: 1,
    }

    # a pipeline reading the MOR table as a delta source sees each key once
    chained = tmp_path / "chain"
    chained.mkdir()
    spec = {
        "name": "chain",
        "sources": [{"name": "up", "format": "delta", "path": path}],
        "target": {
            "path": "out",
            "operation": "insert",
            "record_key": "id",
            "key_generator": {"partition_fields": "city"},
            "index": {"buckets": 2},
        },
    }
    (chained / "chain.yaml").write_text(yaml.safe_dump(spec))
    run_pipeline(load_spec(chained / "chain.yaml"), spark=spark)
    out = read_table(chained / "out")
    assert len(out) == N and out["id"].is_unique


def test_expansion_never_resurrects_a_deleted_row(spark, tmp_path, table):
    _upsert(spark, tmp_path, table, city_rows([1, 2, 3], 2))
    expected = city_content(tmp_path / "table")
    spec = write_spec(tmp_path, _target())
    expand_table(load_spec(spec), ExpansionRequest(8, "overwrite"), spark=spark)
    pd.testing.assert_frame_equal(city_content(tmp_path / "table"), expected)
    # multiple_rehash splits a bucket's base and delta files alike, minus deleted rows
    eight = write_spec(tmp_path, _target(index={"buckets": 8}))
    _upsert(spark, tmp_path, eight, city_rows([4], 2))
    # a delete leaves a deletion vector and no new file: the split must not bring 5 back
    delete = _delete_spec(tmp_path, index={"buckets": 8})
    _upsert(spark, tmp_path, delete, city_rows([5], 0)[["id", "city"]])
    expected = city_content(tmp_path / "table")
    assert 5 not in set(expected["id"])
    assert max(len(f) for f in open_table(str(tmp_path / "table")).files_by_group().values()) > 1
    expand_table(load_spec(eight), ExpansionRequest(16), spark=spark)
    pd.testing.assert_frame_equal(city_content(tmp_path / "table"), expected)
    after = open_table(str(tmp_path / "table"))
    assert not any(f.deletion_vector for f in after.files())
    assert {f.bucket for f in after.files()} <= set(range(16))


def test_clean_keeps_live_deletion_vector_files_and_removes_replaced_ones(spark, tmp_path, table):
    _upsert(spark, tmp_path, table, city_rows([1, 2], 2))
    dv_files = set((tmp_path / "table").rglob("deletion_vector_*.bin"))
    assert dv_files
    spec = load_spec(table)
    assert clean_table(spec, retain_commits=1, min_age_hours=0).files == []
    assert set((tmp_path / "table").rglob("deletion_vector_*.bin")) == dv_files
    compact_table(spec, spark=spark)
    removed = clean_table(spec, retain_commits=1, min_age_hours=0).files
    assert any("_deletion_vectors/" in f for f in removed)
    assert not list((tmp_path / "table").rglob("deletion_vector_*.bin"))
    assert len(city_content(tmp_path / "table")) == N


def test_a_spec_disagreeing_on_the_table_type_is_refused(spark, tmp_path, table):
    spec = write_spec(tmp_path, {**_target(), "table_type": "COPY_ON_WRITE"})
    write_batch(tmp_path, city_rows([1], 2))
    with pytest.raises(TableMismatchError, match=r"table\.type: table has 'MERGE_ON_READ'"):
        run_pipeline(load_spec(spec), spark=spark)
