"""A bulk load's row places: bucket and row index in one number across the Arrow hand-off
(runner/write/bulk_writer.py), and the limits past which the rows come from Spark."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runner.index.layout import BucketLayout
from runner.storage.parquet_rows import ParquetRows
from runner.write.bulk_writer import (
    PLACE_BITS,
    PLACE_BUCKETS,
    SOURCE_PLACE,
    places_overflow,
    unpack_places,
)


def test_a_place_gives_back_the_bucket_and_the_row_index_at_their_limits():
    buckets = [0, 3, 99_999_998, PLACE_BUCKETS - 1, PLACE_BUCKETS - 1]
    rows = [0, 12, 7, 0, (1 << PLACE_BITS) - 1]
    places = [b * (1 << PLACE_BITS) + r for b, r in zip(buckets, rows, strict=True)]
    keys = pa.table(
        {
            SOURCE_PLACE: pa.array(places, pa.int64()),
            "_record_key": [str(i) for i in range(5)],
            "_partition_path": ["a"] * 5,
        }
    )
    unpacked = unpack_places(keys)
    assert unpacked.column("_bucket").to_pylist() == buckets
    assert unpacked.column("_bucket").type == pa.int32()
    assert unpacked.column("__runner_source_row").to_pylist() == rows
    assert unpacked.column("_record_key").to_pylist() == ["0", "1", "2", "3", "4"]


def test_every_bucket_count_a_spec_allows_fits_a_place_and_a_larger_layout_does_not():
    assert places_overflow(BucketLayout(99_999_999).largest_modulus()) is None
    split = BucketLayout(4).split("a", 1)
    assert split.largest_modulus() == 8
    grown = BucketLayout(4, partitions={"a": PLACE_BUCKETS + 1})
    why = places_overflow(grown.largest_modulus())
    assert why is not None and f"{PLACE_BUCKETS:,}" in why


def test_a_file_with_more_rows_than_a_place_numbers_is_refused_by_name(tmp_path):
    pq.write_table(pa.table({"v": list(range(10))}), tmp_path / "big.parquet")
    rows = ParquetRows(["v"], most_rows=9)
    with pytest.raises(OSError, match=r"big\.parquet(.|\n)*10 rows, more than the 9"):
        rows.take(f"file://{tmp_path}/big.parquet", pa.array([0, 1]))
    assert ParquetRows(["v"], most_rows=10).take(
        f"file://{tmp_path}/big.parquet", pa.array([9, 0])
    ).column("v").to_pylist() == [9, 0]
