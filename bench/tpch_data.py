"""The TPC-H scenario's data (bench/tpch.py): `lineitem` from tpchgen-cli, cut into the
initial load and the three refresh batches, each with the checksum the table must have
after it, computed here with pyarrow alone (the reference every engine is checked against).

- load: every lineitem but those of RF1's orders;
- rf1: the lineitems of 0.1 % of the orders, drawn at random (new orders);
- rf2: the lineitems of another 0.1 % of the orders, all loaded (deleted orders);
- update: 1 % of the table's rows, drawn among the loaded open lines (l_linestatus 'O') of
  orders neither refresh set touches, with l_linestatus 'F' (late status updates).

The refresh sets may be sized as at another scale factor (`cut`'s `resize`, the shares'
factor: --refresh-scale over --scale): a refresh of the same rows into a larger table.

Each generated file is cut on its own, so the whole table never sits in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

KEY = ("l_orderkey", "l_linenumber")
REFRESH = 0.001  # RF1 and RF2: a share of the orders
UPDATE = 0.01  # the late status update: a share of the rows
BATCHES = ("load", "rf1", "rf2", "update")


@dataclass(frozen=True)
class TpchSum:
    """Rows, sum of l_orderkey, sum of l_extendedprice in cents and lines with status 'F':
    exact whatever the row order, and moved by each step (the update by the last)."""

    rows: int = 0
    orderkeys: int = 0
    cents: int = 0
    final: int = 0

    def __add__(self, other: TpchSum) -> TpchSum:
        return TpchSum(*(a + b for a, b in zip(self.values(), other.values(), strict=True)))

    def __sub__(self, other: TpchSum) -> TpchSum:
        return TpchSum(*(a - b for a, b in zip(self.values(), other.values(), strict=True)))

    def values(self) -> tuple[int, int, int, int]:
        return (self.rows, self.orderkeys, self.cents, self.final)


# the same sums in Spark SQL, for Hudi's side (bench/hudi_job.py)
SPARK_SUMS = [
    "count(1)",
    "sum(l_orderkey)",
    "cast(sum(l_extendedprice) * 100 as bigint)",
    "sum(case when l_linestatus = 'F' then 1 else 0 end)",
]
COLUMNS = ["l_orderkey", "l_extendedprice", "l_linestatus"]


def tpch_sum(batch: pa.Table | pa.RecordBatch) -> TpchSum:
    if batch.num_rows == 0:
        return TpchSum()
    price = pc.sum(batch.column("l_extendedprice")).as_py()
    status = pc.cast(batch.column("l_linestatus"), pa.string())  # delta-rs: string_view
    final = pc.sum(pc.cast(pc.equal(status, "F"), pa.int64())).as_py()
    return TpchSum(
        batch.num_rows, pc.sum(batch.column("l_orderkey")).as_py(), int(price * 100), final
    )


@dataclass(frozen=True)
class TpchData:
    """The source directory of each batch (BATCHES) and the table's sum after each step."""

    sources: dict[str, Path]
    expected: dict[str, TpchSum]
    rows: dict[str, int]


def cut(generated: Path, out: Path, resize: float = 1.0, seed: int = 56) -> TpchData:
    """The batches of BATCHES under `out`, from the parquet files tpchgen-cli wrote; the
    refresh sets' shares (REFRESH, UPDATE) times `resize`."""
    files = sorted(generated.glob("*.parquet"))
    orders = np.unique(
        np.concatenate([pq.read_table(f, columns=["l_orderkey"])[0].to_numpy() for f in files])
    )
    rng = np.random.default_rng(seed)
    n = max(1, round(len(orders) * REFRESH * resize))
    drawn = rng.choice(orders, 2 * n, replace=False)
    rf1, rf2 = pa.array(drawn[:n]), pa.array(drawn[n:])
    sources = {name: out / name for name in BATCHES}
    for directory in sources.values():
        directory.mkdir(parents=True, exist_ok=True)
    sums = {name: TpchSum() for name in ("load", "rf1", "rf2", "update_old", "update_new")}
    for i, file in enumerate(files):
        table = _plain_strings(pq.read_table(file))
        new = pc.is_in(table["l_orderkey"], rf1)
        parts = {
            "load": table.filter(pc.invert(new)),
            "rf1": table.filter(new),
            "rf2": table.filter(pc.is_in(table["l_orderkey"], rf2)),
        }
        old, updated = _late_updates(parts["load"], drawn, rng, UPDATE * resize)
        parts["update"] = updated
        for name, part in parts.items():
            pq.write_table(part, sources[name] / f"part-{i:05d}.parquet")
            sums[name if name != "update" else "update_new"] += tpch_sum(part)
        sums["update_old"] += tpch_sum(old)
    after_rf1 = sums["load"] + sums["rf1"]
    after_rf2 = after_rf1 - sums["rf2"]
    expected = {
        "load": sums["load"],
        "rf1": after_rf1,
        "rf2": after_rf2,
        "update": after_rf2 - sums["update_old"] + sums["update_new"],
    }
    rows = {name: sums[name if name != "update" else "update_new"].rows for name in BATCHES}
    return TpchData(sources, expected, rows)


def _plain_strings(table: pa.Table) -> pa.Table:
    """tpchgen-cli writes string_view columns: plain strings, as every engine reads them."""
    fields = [f.with_type(pa.string()) if f.type == pa.string_view() else f for f in table.schema]
    return table.cast(pa.schema(fields))


def _late_updates(
    loaded: pa.Table, refreshed: np.ndarray, rng: np.random.Generator, share: float
) -> tuple[pa.Table, pa.Table]:
    """`share` of the file's rows, drawn among its open lines of orders no refresh set
    touches: those rows as loaded, and as updated (l_linestatus 'F')."""
    open_lines = pc.and_(
        pc.equal(loaded["l_linestatus"], "O"),
        pc.invert(pc.is_in(loaded["l_orderkey"], pa.array(refreshed))),
    )
    candidates = np.flatnonzero(open_lines.to_numpy(zero_copy_only=False))
    n = min(len(candidates), max(1, round(loaded.num_rows * share)))
    old = loaded.take(pa.array(np.sort(rng.choice(candidates, n, replace=False))))
    status = old.schema.get_field_index("l_linestatus")
    return old, old.set_column(status, "l_linestatus", pa.array(["F"] * n, pa.string()))
