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
