"""Which incoming rows change nothing (target.skip_unchanged), row for row with the stored
rows they would replace (runner/write/change_rows.py)."""

from __future__ import annotations

import math

import pyarrow as pa

from runner.storage.meta_columns import COMMIT_TIME, RECORD_KEY
from runner.write.change_rows import unchanged_keys

SCHEMA = pa.schema([(COMMIT_TIME, pa.string()), (RECORD_KEY, pa.string()), ("fare", pa.float64())])


def _rows(*rows: tuple[str, str, float | None]) -> pa.Table:
    return pa.Table.from_pylist(
        [{COMMIT_TIME: t, RECORD_KEY: k, "fare": f} for t, k, f in rows], schema=SCHEMA
    )


def test_a_row_equal_but_for_its_commit_time_is_unchanged_and_a_changed_one_is_not():
    before = _rows(("1", "a", 1.0), ("1", "b", 2.0), ("1", "c", None), ("1", "d", math.nan))
    after = _rows(("2", "d", math.nan), ("2", "c", None), ("2", "b", 2.5), ("2", "e", 9.0))
    assert sorted(unchanged_keys(before, after).to_pylist()) == ["c", "d"]


def test_a_key_with_several_rows_on_a_side_is_never_called_unchanged():
    # an insert that kept duplicates: "a" twice stored, once incoming; "b" the other way
    before = _rows(("1", "a", 1.0), ("1", "a", 1.0), ("1", "b", 2.0), ("1", "c", 3.0))
    after = _rows(("2", "a", 1.0), ("2", "b", 2.0), ("2", "b", 2.0), ("2", "c", 3.0))
    assert unchanged_keys(before, after).to_pylist() == ["c"]


def test_few_rows_and_many_rows_compare_alike():
    # a bucket's few updated rows compare as Python values, many as Arrow columns: the
    # same verdicts either way (nulls equal nulls, floats by their bits, decimals and
    # times by value)
    import datetime as dt
    from decimal import Decimal

    from runner.write.change_rows import _FEW_ROWS, equal_rows

    schema = pa.schema(
        [
            ("fare", pa.float64()),
            ("price", pa.decimal128(10, 2)),
            ("at", pa.timestamp("us", "UTC")),
            ("tags", pa.list_(pa.string())),
        ]
    )
    utc = dt.UTC
    pairs = [  # (before, after, equal)
        ((1.0, Decimal("1.10"), dt.datetime(2026, 1, 1, tzinfo=utc), ["a"]),) * 2 + (True,),
        ((0.0, None, None, None), (-0.0, None, None, None), False),
        ((math.nan, None, None, None), (math.nan, None, None, None), True),
        ((None, Decimal("2.00"), None, None), (None, Decimal("2.01"), None, None), False),
        ((None, None, dt.datetime(2026, 1, 1, tzinfo=utc), None), (None,) * 4, False),
        ((None, None, None, ["a", None]), (None, None, None, ["a", None]), True),
        ((None, None, None, ["a"]), (None, None, None, ["b"]), False),
    ]

    def table(side: int, times: int) -> pa.Table:
        rows = [dict(zip(schema.names, p[side], strict=True)) for p in pairs] * times
        return pa.Table.from_pylist(rows, schema=schema)

    expected = [p[2] for p in pairs]
    few = equal_rows(table(0, 1), table(1, 1), schema.names)
    times = _FEW_ROWS // len(pairs) + 1  # past the Python path
    many = equal_rows(table(0, times), table(1, times), schema.names)
    assert few.tolist() == expected
    assert many.tolist() == expected * times
