"""Two writers on one table: both commit, in commit order, whether their buckets overlap or not.

The other writer is a whole second run, committed just before this run's commit attempt.
"""

from __future__ import annotations

import pandas as pd
import pytest
from deltalake import DeltaTable

from runner.delta import transaction
from runner.errors import CommitConflictError
from runner.pipeline.context import RunOptions
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.helpers import read_table, write_batch, write_spec

TARGET = {
    "operation": "upsert",
    "record_key": "id",
    "precombine_field": "ts",
    "key_generator": {"partition_fields": "country"},
    "index": {"buckets": 4},
}


def _rows(ids, country, ts) -> pd.DataFrame:
    return pd.DataFrame(
        {"id": ids, "country": country, "ts": ts, "v": [f"{country}{ts}"] * len(ids)}
    )


@pytest.fixture
def table(spark, tmp_path):
    spec = write_spec(tmp_path, TARGET)
    write_batch(tmp_path, pd.concat([_rows(range(20), "nl", 1), _rows(range(20), "us", 1)]))
    run_pipeline(load_spec(spec), spark=spark)
    return spec


def _race(monkeypatch, spark, tmp_path, *other_batches: pd.DataFrame) -> None:
    """Let another writer commit each of `other_batches`, one just before each of this run's
    commit attempts."""
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = write_spec(other_dir, {**TARGET, "path": str(tmp_path / "table")}, name="other")
    real = transaction._commit_with_delta_rs
    pending = list(other_batches)
    racing_now = []

    def racing(*args, **kwargs):
        if pending and not racing_now:  # the other writer's own commit is not raced
            write_batch(other_dir, pending.pop(0))
            racing_now.append(True)
            try:
                run_pipeline(load_spec(other), spark=spark)
            finally:
                racing_now.clear()
        return real(*args, **kwargs)

    monkeypatch.setattr(transaction, "_commit_with_delta_rs", racing)


def _orphans(table) -> set[str]:
    live = {f.rsplit("/", 1)[1] for f in DeltaTable(str(table)).file_uris()}
    return {p.name for p in table.rglob("*.parquet")} - live


def test_writers_on_disjoint_buckets_both_commit(spark, table, tmp_path, monkeypatch):
    version = DeltaTable(str(tmp_path / "table")).version()
    _race(monkeypatch, spark, tmp_path, _rows([1, 2], "us", 2))
    write_batch(tmp_path, _rows([1, 2], "nl", 3))
    summary = run_pipeline(load_spec(table), spark=spark)
    assert summary.version == version + 2  # the other writer's commit, then this one
    rows = read_table(tmp_path / "table").set_index(["country", "id"])
    assert rows.loc[("nl", 1), "v"] == "nl3" and rows.loc[("us", 2), "v"] == "us2"
    assert len(rows) == 40


def test_writers_on_the_same_bucket_both_land_in_commit_order(spark, table, tmp_path, monkeypatch):
    version = DeltaTable(str(tmp_path / "table")).version()
    _race(monkeypatch, spark, tmp_path, _rows([1, 3], "nl", 2))
    write_batch(tmp_path, _rows([1], "nl", 3))
    summary = run_pipeline(load_spec(table), spark=spark)
    assert summary.version == version + 2 and summary.updated == 1
    rows = read_table(tmp_path / "table").set_index(["country", "id"])
    assert rows.loc[("nl", 1), "v"] == "nl3"  # this run's newer row, merged on the other's
    assert rows.loc[("nl", 3), "v"] == "nl2"  # the other writer's update, not lost
    assert len(rows) == 40
    # on disk beside the live files: only files replaced by the two commits (for readers of
    # older versions); the first, superseded write of this run is gone
    assert len(_orphans(tmp_path / "table")) == summary.files_removed + 2


def test_a_remerge_keeps_a_newer_row_of_the_other_writer(spark, table, tmp_path, monkeypatch):
    _race(monkeypatch, spark, tmp_path, _rows([1], "nl", 5))
    write_batch(tmp_path, _rows([1], "nl", 3))
    summary = run_pipeline(load_spec(table), spark=spark)
    assert summary.stale_skipped == 1 and summary.version is None  # nothing left to change
    rows = read_table(tmp_path / "table").set_index(["country", "id"])
    assert rows.loc[("nl", 1), "v"] == "nl5"


def test_a_writer_overtaken_more_often_than_its_retries_gives_up(
    spark, table, tmp_path, monkeypatch
):
    spec = write_spec(tmp_path, {**TARGET, "commit_retries": 1})
    version = DeltaTable(str(tmp_path / "table")).version()
    _race(monkeypatch, spark, tmp_path, _rows([1], "nl", 2), _rows([1], "nl", 4))
    write_batch(tmp_path, _rows([1], "nl", 6))
    with pytest.raises(CommitConflictError, match=r"re-merged 1 time\(s\)"):
        run_pipeline(load_spec(spec), spark=spark)
    assert DeltaTable(str(tmp_path / "table")).version() == version + 2  # the other's two
    rows = read_table(tmp_path / "table").set_index(["country", "id"])
    assert rows.loc[("nl", 1), "v"] == "nl4"


def test_a_batch_id_commits_once(spark, table, tmp_path):
    write_batch(tmp_path, _rows([1], "nl", 5))
    first = run_pipeline(load_spec(table), spark=spark, options=RunOptions(batch_id="2026-11-22"))
    assert first.version is not None and first.updated == 1
    dt = DeltaTable(str(tmp_path / "table"))
    assert dt.transaction_version("runner/t/2026-11-22") == 1
    assert dt.history(1)[0]["runner"]["batch_id"] == "2026-11-22"

    write_batch(tmp_path, _rows([1], "nl", 6))  # same batch id: not run again
    again = run_pipeline(load_spec(table), spark=spark, options=RunOptions(batch_id="2026-11-22"))
    assert again.batch_already_committed and again.version is None
    assert "already committed" in again.render()
    assert DeltaTable(str(tmp_path / "table")).version() == first.version
    assert read_table(tmp_path / "table").set_index(["country", "id"]).loc[("nl", 1), "ts"] == 5

    later = run_pipeline(load_spec(table), spark=spark, options=RunOptions(batch_id="2026-11-23"))
    assert later.version == first.version + 1

    # a batch that changes no row (older than stored) is recorded all the same
    write_batch(tmp_path, _rows([2], "nl", 0))
    stale = run_pipeline(load_spec(table), spark=spark, options=RunOptions(batch_id="2026-11-24"))
    assert (stale.stale_skipped, stale.files_added, stale.version) == (1, 0, later.version + 1)
    assert f"recorded batch 2026-11-24 in version {stale.version} (no row changed)" in (
        stale.render()
    )
    again = run_pipeline(load_spec(table), spark=spark, options=RunOptions(batch_id="2026-11-24"))
    assert again.batch_already_committed
    assert DeltaTable(str(tmp_path / "table")).version() == stale.version
    assert read_table(tmp_path / "table").set_index(["country", "id"]).loc[("nl", 2), "ts"] == 1


def test_a_column_the_other_writer_added_is_kept_or_the_run_stops(
    spark, table, tmp_path, monkeypatch
):
    # disjoint buckets: this run's files lack the new column, the table keeps it
    _race(monkeypatch, spark, tmp_path, _rows([1, 2], "us", 2).assign(extra="x"))
    write_batch(tmp_path, _rows([1, 2], "nl", 3))
    run_pipeline(load_spec(table), spark=spark)
    rows = read_table(tmp_path / "table").set_index(["country", "id"])
    assert rows.loc[("us", 2), "extra"] == "x" and pd.isna(rows.loc[("nl", 1), "extra"])

    # the same bucket: a re-merge would drop the other writer's values, so the run stops
    monkeypatch.undo()
    (tmp_path / "other").rename(tmp_path / "other1")
    _race(monkeypatch, spark, tmp_path, _rows([3], "nl", 4).assign(extra="y", more=1))
    write_batch(tmp_path, _rows([3], "nl", 5).assign(extra="z"))
    with pytest.raises(CommitConflictError, match=r"new or changed column\(s\) more"):
        run_pipeline(load_spec(table), spark=spark)
    rows = read_table(tmp_path / "table").set_index(["country", "id"])
    assert rows.loc[("nl", 3), "more"] == 1 and rows.loc[("nl", 3), "extra"] == "y"
