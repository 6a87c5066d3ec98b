"""A table written by the runner on pyspark 4.0.1 (tests/data/spark-4.0.1, made by its
make.py), upserted on the pinned pyspark: every stored key keeps its text, its partition
path and its bucket, byte for byte, so no update lands beside the row it replaces; the
deletion vectors written then and now read the same through delta-rs and delta-spark."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from runner.index.naming import FILE_NAME_RE
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.delta_spark import read_with_delta_spark
from tests.helpers import read_table

pytestmark = pytest.mark.spark

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "spark-4.0.1"
META = ["_record_key", "_partition_path", "_bucket"]


def _keys(table: Path) -> dict[int, tuple[str, str, int]]:
    rows = read_table(table)
    assert rows["id"].is_unique, "a key stored twice: an update moved to another bucket"
    return {i: (k, p, b) for i, k, p, b in zip(rows["id"], *(rows[c] for c in META), strict=True)}


def _file_buckets_agree(table: Path) -> None:
    """Each live file holds rows of the bucket its name leads with, and only those."""
    for path in DeltaTable(str(table)).file_uris():
        named = int(FILE_NAME_RE.match(Path(path).name)["bucket"])
        assert set(pq.read_table(path, columns=["_bucket"])["_bucket"].to_pylist()) == {named}


def test_a_table_written_on_spark_4_0_1_is_upserted_with_no_key_or_bucket_moved(
    tmp_path, needs_delta_spark
):
    spark = needs_delta_spark
    work = tmp_path / "spark-4.0.1"
    shutil.copytree(FIXTURE, work, ignore=shutil.ignore_patterns("make.py"))
    table = work / "table"
    before = _keys(table)
    assert len(before) == 200
    assert sorted(r["id"] for r in read_with_delta_spark(spark, table)) == sorted(before)

    shutil.copytree(work / "inputs" / "upsert2", work / "incoming")
    summary = run_pipeline(load_spec(work / "spec.yaml"), spark=spark)

    assert (summary.updated, summary.inserted, summary.deleted) == (140, 40, 0)
    assert summary.buckets_with_deletion_vectors > 0
    after = _keys(table)
    assert {i: after[i] for i in before} == before  # written again on 4.2.0 for ids 60-199
    assert len(after) == 240
    _file_buckets_agree(table)
    rows = read_table(table).set_index("id")["value"].to_dict()
    assert rows == {i: f"v{1 if i < 60 else 3}-{i}" for i in range(240)}
    by_delta_spark = {r["id"]: r["value"] for r in read_with_delta_spark(spark, table)}
    assert by_delta_spark == rows
