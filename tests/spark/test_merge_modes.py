"""Merges of fields (merge_mode partial_update, overwrite_non_defaults, custom) against a
pandas reference of Hudi's payload semantics, on both table types, merged on the driver and
in a Spark write job."""

from __future__ import annotations

import random
import textwrap

import pandas as pd
import pyarrow as pa
import pytest

from runner.errors import UserError
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.helpers import (
    NEVER_REWRITE,
    check_merge_place,
    merge_place,
    read_table,
    write_batch,
    write_spec,
)

FIELDS = ["id", "city", "ts", "amount", "note"]
CITIES = ["ams", "sf", "nyc"]
BATCH_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("city", pa.string()),
        ("ts", pa.int64()),
        ("amount", pa.float64()),
        ("note", pa.string()),
        ("deleted", pa.bool_()),
    ]
)


def _target(table_type: str, merged_on: str, mode: str, **extra) -> dict:
    return {
        "operation": "upsert",
        "table_type": table_type,
        **({"compaction": NEVER_REWRITE} if table_type == "MERGE_ON_READ" else {}),
        **merge_place(merged_on),
        "record_key": "id",
        "precombine_field": "ts",
        "merge_mode": mode,
        "delete_marker": "deleted",
        "key_generator": {"type": "SIMPLE", "partition_fields": "city"},
        "index": {"buckets": 4},
        **extra,
    }


def _value(v):
    return None if v is None or (isinstance(v, float) and pd.isna(v)) else v


class Reference:
    """The expected rows by key, with Hudi's payloads spelled out one row at a time."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.rows: dict[int, dict] = {}

    def upsert(self, batch: pd.DataFrame) -> None:
        records = [{k: _value(v) for k, v in r.items()} for r in batch.to_dict("records")]
        by_key: dict[int, list[tuple[int, dict]]] = {}
        for position, row in enumerate(records):
            by_key.setdefault(row["id"], []).append((position, row))
        for key, rows in by_key.items():
            newest_first = [r for _, r in sorted(rows, key=lambda p: (p[1]["ts"], p[0]))][::-1]
            incoming = dict(newest_first[0])
            if self.mode == "partial_update":  # preCombine: nulls filled from older rows
                for older in newest_first[1:]:
                    for f in FIELDS:
                        if incoming[f] is None:
                            incoming[f] = older[f]
            if incoming["deleted"]:
                self.rows.pop(key, None)
                continue
            stored = self.rows.get(key)
            if stored is None:
                self.rows[key] = {f: incoming[f] for f in FIELDS}
                continue
            base, other = incoming, stored
            if self.mode == "partial_update" and stored["ts"] > incoming["ts"]:
                base, other = stored, incoming
            self.rows[key] = {f: base[f] if base[f] is not None else other[f] for f in FIELDS}

    def frame(self) -> pd.DataFrame:
        return _normalized(pd.DataFrame(list(self.rows.values()), columns=FIELDS))


def _normalized(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame[FIELDS].sort_values("id").reset_index(drop=True)
    out = out.astype({"id": "int64", "ts": "int64", "amount": "float64"})
    return out.astype({"note": "object"}).where(out.notna(), None)


def _batch(rng: random.Random, n: int) -> pd.DataFrame:
    rows = []
    for _ in range(n):
        key = rng.randrange(30)
        rows.append(
            {
                "id": key,
                "city": CITIES[key % 3],
                "ts": rng.randrange(6),  # ties, stale rows and newer stored rows
                "amount": None if rng.random() < 0.4 else round(rng.uniform(0, 100), 2),
                "note": None if rng.random() < 0.4 else f"n{rng.randrange(1000)}",
                "deleted": rng.random() < 0.1,
            }
        )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("mode", ["partial_update", "overwrite_non_defaults"])
def test_field_merges_match_the_pandas_reference(spark, tmp_path, table_type, merged_on, mode):
    rng = random.Random(f"{mode}-{table_type}-{merged_on}")
    spec = load_spec(write_spec(tmp_path, _target(table_type, merged_on, mode)))
    reference = Reference(mode)
    for step in range(3):
        batch = _batch(rng, 45)
        write_batch(tmp_path, batch, BATCH_SCHEMA)
        summary = run_pipeline(spec, spark=spark)
        reference.upsert(batch)
        check_merge_place(summary, merged_on)
        assert summary.stale_skipped == 0  # an older record is merged, never skipped
        assert summary.duplicates_dropped == len(batch) - batch["id"].nunique()
        pd.testing.assert_frame_equal(
            _normalized(read_table(tmp_path / "table")),
            reference.frame(),
            check_dtype=False,
            obj=f"{mode} after batch {step}",
        )
    if table_type == "MERGE_ON_READ":
        assert summary.buckets_with_deletion_vectors > 0


def test_partial_update_keeps_stored_values_where_the_batch_has_nulls(spark, tmp_path):
    """The case users ask for: a change feed that sends only the columns that changed."""
    spec = load_spec(write_spec(tmp_path, _target("COPY_ON_WRITE", "driver", "partial_update")))
    full = {"id": 1, "city": "ams", "ts": 1, "amount": 10.0, "note": "first", "deleted": False}
    write_batch(tmp_path, pd.DataFrame([full]), BATCH_SCHEMA)
    run_pipeline(spec, spark=spark)
    change = {**full, "ts": 2, "amount": None, "note": "second"}
    write_batch(tmp_path, pd.DataFrame([change]), BATCH_SCHEMA)
    summary = run_pipeline(spec, spark=spark)
    row = read_table(tmp_path / "table").iloc[0]
    assert (row["ts"], row["amount"], row["note"]) == (2, 10.0, "second")
    assert summary.updated == 1


MERGER = textwrap.dedent(
    '''
    """A running total: each key keeps its newest row, with the stored amount plus the
    batch's amounts."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from runner.write.field_merge import Merger


    class RunningTotal(Merger):
        def merge(self, stored, incoming):
            if self.properties.get("fail") == "true":
                raise RuntimeError("the ledger is closed")
            keys = pc.unique(incoming.column("_record_key"))
            newest = incoming.take(pc.index_in(keys, value_set=incoming.column("_record_key")))
            amounts = pa.concat_tables(
                [t.select(["_record_key", "amount"]) for t in (stored, incoming)]
            )
            sums = amounts.group_by("_record_key").aggregate([("amount", "sum")])
            where = pc.index_in(keys, value_set=sums.column("_record_key"))
            total = pc.take(sums.column("amount_sum"), where)
            return newest.set_column(newest.schema.get_field_index("amount"), "amount", total)
    '''
)


def test_a_custom_merger_runs_where_the_batch_is_merged(spark, tmp_path, table_type, merged_on):
    (tmp_path / "ledger_merger.py").write_text(MERGER)
    target = _target(
        table_type, merged_on, "custom", merger={"class": "ledger_merger:RunningTotal"}
    )
    spec = load_spec(write_spec(tmp_path, target))
    rng = random.Random(f"custom-{table_type}-{merged_on}")
    totals: dict[int, float] = {}
    for _ in range(3):
        batch = _batch(rng, 40).assign(amount=lambda f: f["amount"].fillna(1.0))
        write_batch(tmp_path, batch, BATCH_SCHEMA)
        summary = run_pipeline(spec, spark=spark)
        for key, rows in batch.groupby("id"):
            newest = rows.assign(_pos=range(len(rows))).sort_values(["ts", "_pos"]).iloc[-1]
            if newest["deleted"]:
                totals.pop(key, None)
            else:
                live = rows[~rows["deleted"]]
                totals[key] = round(totals.get(key, 0.0) + live["amount"].sum(), 6)
        check_merge_place(summary, merged_on)
    got = read_table(tmp_path / "table")
    assert dict(zip(got["id"], got["amount"].round(6), strict=True)) == totals


def test_a_failing_merger_fails_the_run_with_its_error_and_commits_nothing(spark, tmp_path):
    (tmp_path / "ledger_merger.py").write_text(MERGER)
    merger = {"class": "ledger_merger:RunningTotal", "properties": {"fail": True}}
    spec = load_spec(
        write_spec(tmp_path, _target("COPY_ON_WRITE", "spark", "custom", merger=merger))
    )
    write_batch(tmp_path, _batch(random.Random(1), 10), BATCH_SCHEMA)
    with pytest.raises(UserError, match=r"ledger_merger:RunningTotal failed: .*ledger is closed"):
        run_pipeline(spec, spark=spark)
    assert not (tmp_path / "table" / "_delta_log").exists()
