"""Expectations and the quarantine: rejected rows are counted, set aside with their reason,
or fail the run before anything is written."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from deltalake import DeltaTable

from runner.errors import BadRecordsError, UserError
from runner.pipeline.context import RunOptions
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.helpers import read_table, write_batch, write_spec

TARGET = {
    "operation": "upsert",
    "record_key": "id",
    "precombine_field": "ts",
    "key_generator": {"partition_fields": "country"},
    "index": {"buckets": 2},
}
RULES = [
    {"name": "fare_not_negative", "sql": "fare >= 0", "action": "quarantine"},
    {"name": "has_note", "sql": "note IS NOT NULL", "action": "drop"},
]


def _batch(n: int = 100) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "id": [f"k{i}" for i in range(n)],
            "country": ["nl" if i % 2 else "us" for i in range(n)],
            "ts": [1] * n,
            "fare": [float(i) for i in range(n)],
            "note": ["ok"] * n,
        }
    )
    frame.loc[3, "id"] = None  # cannot be keyed
    frame.loc[[5, 6], "fare"] = -1.0  # breaks fare_not_negative
    frame.loc[7, "fare"] = None  # NULL breaks it too
    frame.loc[[8, 9], "note"] = None  # dropped
    return frame


def _spec(tmp_path, max_fraction=0.05, rules=RULES, quarantine=True, operation="upsert"):
    target = {**TARGET, "operation": operation}
    if quarantine:
        target["quarantine"] = {"path": "quarantine", "max_fraction": max_fraction}
    return load_spec(write_spec(tmp_path, target, expectations=rules))


# bulk_insert judges the rows in the same pass that writes them (runner/write/bulk_writer.py)
@pytest.mark.parametrize("operation", ["upsert", "bulk_insert"])
def test_rejected_rows_go_to_quarantine_with_rule_reason_and_record(spark, tmp_path, operation):
    write_batch(tmp_path, _batch())
    summary = run_pipeline(
        _spec(tmp_path, operation=operation), spark=spark, options=RunOptions(batch_id="b1")
    )

    assert summary.rows_read == 100
    assert summary.rows_quarantined == 4 and summary.rows_dropped == 2
    assert summary.rejected_by_rule == {"key_generator": 1, "fare_not_negative": 3, "has_note": 2}
    assert "4 quarantined, 2 dropped" in summary.render()
    table = read_table(tmp_path / "table")
    assert len(table) == 94
    assert not set(table["id"]) & {None, "k5", "k6", "k7", "k8", "k9"}

    quarantined = read_table(tmp_path / "quarantine").sort_values("_record")
    assert len(quarantined) == 4
    assert set(quarantined["_run_id"]) == {summary.run_id}
    assert set(quarantined["_instant"]) == {summary.instant}
    assert set(quarantined["_batch_id"]) == {"b1"}
    by_id = {json.loads(q["_record"])["id"]: q for q in quarantined.to_dict("records")}
    assert json.loads(by_id[None]["_record"]) == {
        "id": None,
        "country": "nl",
        "ts": 1,
        "fare": 3.0,
        "note": "ok",
    }
    assert by_id[None]["_rule"] == "key_generator"
    assert "cannot be null or empty" in by_id[None]["_reason"]
    assert (by_id["k5"]["_rule"], by_id["k5"]["_reason"]) == (
        "fare_not_negative",
        "breaks fare_not_negative: fare >= 0",
    )
    assert by_id["k7"]["_rule"] == "fare_not_negative"  # a NULL result breaks the rule

    # The same batch again: no second commit, and no row quarantined twice.
    again = run_pipeline(
        _spec(tmp_path, operation=operation), spark=spark, options=RunOptions(batch_id="b1")
    )
    assert again.batch_already_committed
    assert len(read_table(tmp_path / "quarantine")) == 4
    assert DeltaTable(str(tmp_path / "table")).version() == 1  # created, then one commit


@pytest.mark.parametrize("operation", ["upsert", "bulk_insert"])
def test_quarantine_past_max_fraction_fails_and_writes_nothing(spark, tmp_path, operation):
    write_batch(tmp_path, _batch())
    with pytest.raises(BadRecordsError) as err:
        run_pipeline(_spec(tmp_path, max_fraction=0.03, operation=operation), spark=spark)
    message = str(err.value)
    assert message.startswith(
        "4 of 100 record(s) (4.00%) would go to quarantine, more than "
        "target.quarantine.max_fraction (3.00%); nothing was written."
    )
    assert "By rule: fare_not_negative 3, has_note 2, key_generator 1" in message
    assert message.count("record: ") == 4
    assert not (tmp_path / "table").exists()
    assert not (tmp_path / "quarantine").exists()


def test_a_fail_rule_stops_the_run_with_counts_and_samples(spark, tmp_path):
    rules = [*RULES, {"name": "known_country", "sql": "country IN ('nl', 'de')"}]
    write_batch(tmp_path, _batch(10))
    with pytest.raises(BadRecordsError) as err:
        run_pipeline(_spec(tmp_path, rules=rules), spark=spark)
    message = str(err.value)
    assert message.startswith("5 record(s) are rejected; nothing was written.")
    assert "known_country 5" in message
    assert "breaks known_country: country IN ('nl', 'de')" in message
    assert '"country": "us"' in message
    assert not (tmp_path / "table").exists()


def test_without_a_quarantine_unkeyable_rows_fail_the_run(spark, tmp_path):
    write_batch(tmp_path, _batch(10))
    with pytest.raises(BadRecordsError) as err:
        run_pipeline(_spec(tmp_path, rules=[], quarantine=False), spark=spark)
    message = str(err.value)
    assert message.startswith("1 record(s) cannot be keyed; nothing was written.")
    assert "set target.quarantine" in message


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("fare >>= 0", "is not a valid Spark SQL expression over the input"),
        ("fares >= 0", "its columns are: id, country, ts, fare, note"),
        ("fare + 1", "gives double, not a boolean"),
    ],
)
def test_a_broken_expectation_is_refused_before_any_work(spark, tmp_path, sql, expected):
    write_batch(tmp_path, _batch(10))
    rules = [{"name": "fare_rule", "sql": sql, "action": "drop"}]
    with pytest.raises(UserError, match="expectation 'fare_rule'") as err:
        run_pipeline(_spec(tmp_path, rules=rules), spark=spark)
    assert expected in str(err.value)
    assert not (tmp_path / "table").exists()
