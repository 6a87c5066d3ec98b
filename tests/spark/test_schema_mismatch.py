"""target.on_schema_mismatch: an input column of a type the table does not take is cast value
by value; a value that does not fit (a string "abc" for a long, an overflow, a fraction for
an integer) goes to quarantine with its column and reason, or fails the run naming it, and is
never written as a null. Tables are read back with delta-rs, Polars and delta-spark and
compared with a pandas reference."""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable

from runner.delta.schema_evolution import ValueCast
from runner.errors import BadRecordsError, SchemaChangeError
from runner.pipeline.run import run_pipeline
from runner.pipeline.value_fit import TYPE_ERROR, cast_to_table
from runner.spec import load_spec
from tests.delta_spark import delta_spark_ready, read_with_delta_spark
from tests.helpers import file_bytes, read_table, write_batch

pytestmark = pytest.mark.spark

COLUMNS = ["id", "city", "ts", "n"]


def _spec(tmp_path, fmt: str, table_type: str = "COPY_ON_WRITE", **target) -> object:
    spec = {
        "name": "fit",
        "sources": [{"name": "src", "format": fmt, "path": "in"}],
        "target": {
            "path": "table",
            "operation": "upsert",
            "record_key": "id",
            "precombine_field": "ts",
            "key_generator": {"partition_fields": "city"},
            "index": {"buckets": 2},
            "table_type": table_type,
            "quarantine": {"path": "quarantine", "max_fraction": 0.5},
            **target,
        },
    }
    path = tmp_path / "fit.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return load_spec(path)


def _json_batch(tmp_path, records: list[dict]) -> None:
    inp = tmp_path / "in"
    inp.mkdir(exist_ok=True)
    for old in inp.iterdir():
        old.unlink()
    (inp / "batch.json").write_text("".join(json.dumps(r) + "\n" for r in records))


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[COLUMNS].sort_values("id").reset_index(drop=True)


def _check_readers(spark, table, expected: pd.DataFrame) -> None:
    """delta-rs, Polars and delta-spark all read `expected` (n as the table's long)."""
    got = _sorted(read_table(table))
    pd.testing.assert_frame_equal(got, expected, check_dtype=False, obj="delta-rs")
    fields = json.loads(DeltaTable(str(table)).schema().to_json())["fields"]
    assert [f["type"] for f in fields if f["name"] == "n"] == ["long"]
    got = _sorted(pl.read_delta(str(table)).to_pandas())
    pd.testing.assert_frame_equal(got, expected, check_dtype=False, obj="polars")
    if delta_spark_ready(spark) is None:
        got = _sorted(pd.DataFrame(read_with_delta_spark(spark, table)))
        pd.testing.assert_frame_equal(got, expected, check_dtype=False, obj="delta-spark")


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_string_for_a_long_column_is_quarantined_with_its_reason(spark, tmp_path, table_type):
    spec = _spec(tmp_path, "json", table_type, on_schema_mismatch="quarantine")
    first = [{"id": i, "city": "ams" if i % 2 else "sf", "ts": 1, "n": i * 10} for i in range(8)]
    _json_batch(tmp_path, first)
    run_pipeline(spec, spark=spark)

    # a producer starts sending n as text: Spark's JSON reader then reads the column as string
    second = [
        {"id": 1, "city": "ams", "ts": 2, "n": "abc"},  # does not fit: quarantined
        {"id": 2, "city": "sf", "ts": 2, "n": 7},  # a number among strings: "7" fits
        {"id": 3, "city": "ams", "ts": 2, "n": None},  # a null stays a null
        {"id": 50, "city": "sf", "ts": 2, "n": "12"},  # a new key whose text parses
    ]
    _json_batch(tmp_path, second)
    summary = run_pipeline(spec, spark=spark)
    assert summary.rows_quarantined == 1
    assert summary.rejected_by_rule == {"schema_mismatch": 1}
    assert (summary.inserted, summary.updated) == (1, 2)

    expected = pd.DataFrame(first)
    expected.loc[expected["id"] == 2, ["ts", "n"]] = [2, 7]
    expected.loc[expected["id"] == 3, ["ts", "n"]] = [2, None]
    expected = pd.concat([expected, pd.DataFrame([{"id": 50, "city": "sf", "ts": 2, "n": 12}])])
    _check_readers(spark, tmp_path / "table", _sorted(expected))

    quarantined = DeltaTable(str(tmp_path / "quarantine")).to_pandas()
    assert quarantined["_rule"].tolist() == ["schema_mismatch"]
    assert quarantined["_reason"].tolist() == ["column n: string value 'abc' is not a valid long"]
    assert json.loads(quarantined["_record"][0]) == second[0]  # as it came, not a null


def test_an_overflow_fails_the_run_naming_the_record_and_writes_nothing(spark, tmp_path):
    spec = _spec(tmp_path, "parquet", on_schema_mismatch="fail")
    narrow = pa.schema(
        [("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64()), ("n", pa.int32())]
    )
    rows = pd.DataFrame(
        {"id": [1, 2, 3], "city": ["ams", "sf", "ams"], "ts": [1] * 3, "n": [1, 2, 3]}
    )
    write_batch(tmp_path, rows, narrow)
    run_pipeline(spec, spark=spark)
    before = file_bytes(tmp_path / "table")

    # the producer moved n to long; under schema_evolution add, its values are cast to int
    wide = narrow.set(3, pa.field("n", pa.int64()))
    batch = rows.assign(ts=2, n=[10, 2**40, 30])
    write_batch(tmp_path, batch, wide)
    with pytest.raises(BadRecordsError) as failed:
        run_pipeline(spec, spark=spark)
    message = str(failed.value)
    assert message.startswith("1 record(s) are rejected; nothing was written.")
    assert "set target.on_schema_mismatch: quarantine" in message
    assert "column n: long value '1099511627776' does not fit the table's integer" in message
    assert '"id": 2' in message and '"n": 1099511627776' in message  # the record as it came
    assert file_bytes(tmp_path / "table") == before
    assert not (tmp_path / "quarantine").exists()

    # refused outright (the default), the error points at the setting
    refusing = _spec(tmp_path, "parquet", schema_evolution="none")
    with pytest.raises(SchemaChangeError, match=r"target\.on_schema_mismatch"):
        run_pipeline(refusing, spark=spark)
    assert file_bytes(tmp_path / "table") == before


def test_which_values_fit_the_table_type(spark):
    """Spark's try_cast and a cast back: what is lost is refused, what round-trips fits."""
    cases = [
        ("string", "long", ["12", " 7 ", "abc", "1.5", None]),
        ("long", "integer", [2**31 - 1, 2**31, -(2**31), None, 5]),
        ("double", "long", [2.0, 1.5, float("nan"), 1e30, None]),
        ("decimal(6,3)", "decimal(5,2)", [Decimal("1.230"), Decimal("1.234"), None, None, None]),
        ("timestamp", "date", [datetime(2024, 1, 2), datetime(2024, 1, 2, 3), None, None, None]),
        ("string", "date", ["2024-02-29", "2023-02-29", "", None, "2024-01-02 03:04:05"]),
        ("string", "decimal(5,2)", ["1.23", "1.239", "1.5", "1000", None]),
        ("string", "double", ["1e400", "inf", "-Infinity", "1.5", "x"]),
    ]
    expected_fits = [
        [True, True, False, False, True],
        [True, False, True, True, True],
        [True, False, False, False, True],
        [True, False, True, True, True],
        [True, False, True, True, True],
        [True, False, False, True, False],
        [True, False, True, False, True],
        [False, True, True, True, False],
    ]
    for (from_type, to_type, values), fits in zip(cases, expected_fits, strict=True):
        frame = spark.createDataFrame([(v,) for v in values], f"v {from_type}")
        rows = cast_to_table(frame, [ValueCast("v", to_type, from_type)]).collect()
        got = [row[TYPE_ERROR] is None for row in rows]
        assert got == fits, (from_type, to_type, values, [row[TYPE_ERROR] for row in rows])
        for row in rows:  # a value that does not fit is null in the column, never a guess
            assert row[TYPE_ERROR] is None or row["v"] is None
    dated = spark.createDataFrame([(date(2024, 1, 2),)], "v date")
    (row,) = cast_to_table(dated, [ValueCast("v", "timestamp_ntz", "date")]).collect()
    assert row[TYPE_ERROR] is None and row["v"] == datetime(2024, 1, 2)


def test_validate_against_lists_the_changes_the_run_then_makes(spark, tmp_path):
    """The comparison without Spark (runner validate --against) and the run agree."""
    from runner.commands.schema_against import compare_with_table

    spec = _spec(tmp_path, "parquet", schema_evolution="widen", on_schema_mismatch="fail")
    narrow = pa.schema(
        [("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64()), ("n", pa.int32())]
    )
    rows = pd.DataFrame({"id": [1, 2], "city": ["ams", "sf"], "ts": [1, 1], "n": [1, 2]})
    write_batch(tmp_path, rows, narrow)
    run_pipeline(spec, spark=spark)
    # n widens, note is new, ts arrives as text: cast value by value
    wide = pa.schema(
        [("id", pa.int64()), ("city", pa.string()), ("ts", pa.string()), ("n", pa.int64())]
    ).append(pa.field("note", pa.string()))
    write_batch(tmp_path, rows.assign(ts=["2", "2"], n=[2**40, 3], note="x"), wide)
    planned = compare_with_table(spec, str(tmp_path / "table"))
    assert planned.exit_code == 0 and planned.plan is not None
    assert [c.column for c in planned.plan.casts] == ["ts"]
    summary = run_pipeline(spec, spark=spark)
    assert summary.columns_added == [c.describe() for c in planned.plan.changes]
    assert summary.columns_added == ["n: integer -> long", "note"]
    assert summary.updated == 2
