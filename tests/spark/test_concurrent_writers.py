"""Two writers on one table: disjoint buckets both commit; the same bucket is refused."""

from __future__ import annotations

import pandas as pd
import pytest
from deltalake import DeltaTable

from runner.errors import CommitConflictError
from runner.ops.run import run_pipeline
from runner.spec import load_spec
from runner.table import commit
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


def _race(monkeypatch, spark, tmp_path, other_batch: pd.DataFrame) -> None:
    """Let another writer commit `other_batch` just before this run's first commit attempt."""
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = write_spec(other_dir, {**TARGET, "path": str(tmp_path / "table")}, name="other")
    write_batch(other_dir, other_batch)
    real = commit._commit_once
    raced = []

    def racing(*args, **kwargs):
        if not raced:
            raced.append(True)
            run_pipeline(load_spec(other), spark=spark)
        return real(*args, **kwargs)

    monkeypatch.setattr(commit, "_commit_once", racing)


def test_writers_on_disjoint_buckets_both_commit(spark, table, tmp_path, monkeypatch):
    version = DeltaTable(str(tmp_path / "table")).version()
    _race(monkeypatch, spark, tmp_path, _rows([1, 2], "us", 2))
    write_batch(tmp_path, _rows([1, 2], "nl", 3))
    summary = run_pipeline(load_spec(table), spark=spark)
    assert summary.version == version + 2  # the other writer's commit, then this one
    rows = read_table(tmp_path / "table").set_index(["country", "id"])
    assert rows.loc[("nl", 1), "v"] == "nl3" and rows.loc[("us", 2), "v"] == "us2"
    assert len(rows) == 40


def test_writers_on_the_same_bucket_the_later_is_refused(spark, table, tmp_path, monkeypatch):
    version = DeltaTable(str(tmp_path / "table")).version()
    _race(monkeypatch, spark, tmp_path, _rows([1], "nl", 2))
    write_batch(tmp_path, _rows([1], "nl", 3))
    with pytest.raises(CommitConflictError, match="rewrote 1 bucket"):
        run_pipeline(load_spec(table), spark=spark)
    assert DeltaTable(str(tmp_path / "table")).version() == version + 1
    rows = read_table(tmp_path / "table").set_index(["country", "id"])
    assert rows.loc[("nl", 1), "v"] == "nl2"  # the other writer's update, nothing lost
    live = {f.rsplit("/", 1)[1] for f in DeltaTable(str(tmp_path / "table")).file_uris()}
    on_disk = {p.name for p in (tmp_path / "table").rglob("*.parquet")}
    assert len(on_disk - live) == 1  # the file the other writer replaced; none of this run


def test_a_batch_id_commits_once(spark, table, tmp_path):
    write_batch(tmp_path, _rows([1], "nl", 5))
    first = run_pipeline(load_spec(table), spark=spark, batch_id="2026-11-22")
    assert first.version is not None and first.updated == 1
    dt = DeltaTable(str(tmp_path / "table"))
    assert dt.transaction_version("runner/t/2026-11-22") == 1
    assert dt.history(1)[0]["runner"]["batch_id"] == "2026-11-22"

    write_batch(tmp_path, _rows([1], "nl", 6))  # same batch id: not run again
    again = run_pipeline(load_spec(table), spark=spark, batch_id="2026-11-22")
    assert again.batch_already_committed and again.version is None
    assert "already committed" in again.render()
    assert DeltaTable(str(tmp_path / "table")).version() == first.version
    assert read_table(tmp_path / "table").set_index(["country", "id"]).loc[("nl", 1), "ts"] == 5

    later = run_pipeline(load_spec(table), spark=spark, batch_id="2026-11-23")
    assert later.version == first.version + 1
