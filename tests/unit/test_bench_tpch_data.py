"""The TPC-H scenario's batches (bench/tpch_data.py): the refresh sets' sizes, and the sums
every engine's table is checked against."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.tpch_data import cut, tpch_sum


def _lineitems(generated, orders: int, files: int = 2) -> pa.Table:
    """`orders` orders of 4 lines each, every line open, cut into `files` files."""
    keys = np.repeat(np.arange(1, orders + 1), 4)
    table = pa.table(
        {
            "l_orderkey": keys,
            "l_linenumber": np.tile(np.arange(1, 5, dtype=np.int32), orders),
            "l_extendedprice": np.full(len(keys), 2.5),
            "l_linestatus": pa.array(["O"] * len(keys), pa.string_view()),
        }
    )
    generated.mkdir()
    step = len(keys) // files
    for i in range(files):
        pq.write_table(table.slice(i * step, step), generated / f"lineitem.{i}.parquet")
    return table


def test_refresh_sets_sized_as_at_another_scale_keep_the_sums_exact(tmp_path):
    table = _lineitems(tmp_path / "generated", orders=20_000)
    same = cut(tmp_path / "generated", tmp_path / "same")
    smaller = cut(tmp_path / "generated", tmp_path / "smaller", resize=0.1)
    # RF1 and RF2: 0.1 % of the orders (20 of 4 lines), a tenth of it resized (2 orders);
    # the update: 1 % of the loaded rows, a tenth of it resized
    assert same.rows["rf1"] == same.rows["rf2"] == 80
    assert smaller.rows["rf1"] == smaller.rows["rf2"] == 8
    loaded = same.rows["load"]
    assert abs(same.rows["update"] - loaded * 0.01) <= 1  # rounded in each of 2 files
    assert abs(smaller.rows["update"] - loaded * 0.001) <= 1
    for data in (same, smaller):
        # the load and RF1 are the table, whatever their sizes; RF2 removes its rows and
        # the update turns its lines to 'F'
        assert data.rows["load"] + data.rows["rf1"] == table.num_rows
        expected = data.expected
        assert expected["rf1"] == tpch_sum(table.cast(_plain(table.schema)))
        assert expected["rf2"].rows == table.num_rows - data.rows["rf2"]
        assert expected["update"].final == data.rows["update"]


def _plain(schema: pa.Schema) -> pa.Schema:
    return pa.schema(
        [f.with_type(pa.string()) if f.type == pa.string_view() else f for f in schema]
    )
