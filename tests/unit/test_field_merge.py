"""Merges of fields (partial update, overwrite non-defaults, the user's merger) on one
bucket, in pyarrow: no Spark needed. The Spark runs against a pandas reference are in
tests/spark/test_merge_modes.py."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from runner.spec.model import MergerSpec
from runner.storage.meta_columns import META_FIELDS, RECORD_KEY
from runner.write.bucket_merge import ACTION, DELETE, MergeSettings
from runner.write.field_merge import Merger, MergerError, load_merger, merge_fields

SCHEMA = pa.schema(
    [
        *META_FIELDS,
        pa.field("ts", pa.int64()),
        pa.field("amount", pa.float64()),
        pa.field("note", pa.string()),
        pa.field("tags", pa.list_(pa.string())),
    ]
)


def _settings(mode: str, precombine: str | None = "ts") -> MergeSettings:
    return MergeSettings("upsert", precombine, mode, filter_dupes=False)  # type: ignore[arg-type]


def _rows(rows: list[dict], incoming: bool = True) -> pa.Table:
    """Rows of one bucket; incoming ones in key runs, newest first, as the writer gets them."""
    full = [
        {
            "_commit_time": "i1" if incoming else "i0",
            "_commit_seqno": None,
            "_record_key": r["key"],
            "_partition_path": "p",
            "_bucket": 0,
            "ts": r.get("ts"),
            "amount": r.get("amount"),
            "note": r.get("note"),
            "tags": r.get("tags"),
        }
        for r in rows
    ]
    table = pa.Table.from_pylist(full, schema=SCHEMA)
    if incoming:
        delete = [bool(r.get("delete")) for r in rows]
        action = [
            "candidate" if i == 0 or rows[i - 1]["key"] != r["key"] else "duplicate"
            for i, r in enumerate(rows)
        ]
        table = table.append_column(DELETE, pa.array(delete)).append_column(
            ACTION, pa.array(action)
        )
    return table


def _by_key(table: pa.Table) -> dict[str, dict]:
    return {r[RECORD_KEY]: r for r in table.to_pylist()}


def test_partial_update_folds_the_batch_newest_first_then_fills_from_stored():
    incoming = _rows(
        [
            {"key": "a", "ts": 3, "amount": None, "note": "newest"},
            {"key": "a", "ts": 2, "amount": 5.0, "note": None, "tags": ["x"]},
            {"key": "a", "ts": 1, "amount": 7.0, "note": "oldest", "tags": ["old"]},
            {"key": "b", "ts": 4, "amount": None, "note": None},
        ]
    )
    stored = _rows([{"key": "b", "ts": 1, "amount": 9.0, "note": "kept", "tags": ["s"]}], False)
    merge = merge_fields(incoming, stored, _settings("partial_update"), SCHEMA)
    rows = _by_key(merge.write)
    # within the batch: each null filled from the next newest row that has the field
    assert (rows["a"]["ts"], rows["a"]["amount"], rows["a"]["note"]) == (3, 5.0, "newest")
    assert rows["a"]["tags"] == ["x"]
    # against the stored row: the incoming is newer, its nulls keep the stored values
    assert (rows["b"]["ts"], rows["b"]["amount"], rows["b"]["note"]) == (4, 9.0, "kept")
    assert rows["b"]["tags"] == ["s"]
    assert rows["b"]["_commit_time"] == "i1"
    assert merge.drop_keys.to_pylist() == ["b"]
    assert merge.counts == {"insert": 1, "update": 1, "deleted": 0, "delete_missing": 0}


def test_partial_update_keeps_a_newer_stored_row_as_the_base():
    incoming = _rows([{"key": "a", "ts": 1, "amount": 1.0, "note": "late"}])
    stored = _rows([{"key": "a", "ts": 5, "amount": None, "note": "current"}], False)
    merge = merge_fields(incoming, stored, _settings("partial_update"), SCHEMA)
    row = _by_key(merge.write)["a"]
    # the stored row is newer: its fields win, its null amount is filled from the late row
    assert (row["ts"], row["amount"], row["note"]) == (5, 1.0, "current")
    assert merge.counts["update"] == 1


def test_partial_update_without_a_precombine_field_takes_the_incoming_as_base():
    incoming = _rows([{"key": "a", "ts": 1, "note": "in"}])
    stored = _rows([{"key": "a", "ts": 5, "amount": 2.0, "note": "st"}], False)
    row = _by_key(merge_fields(incoming, stored, _settings("partial_update", None), SCHEMA).write)
    assert (row["a"]["ts"], row["a"]["amount"], row["a"]["note"]) == (1, 2.0, "in")


def test_overwrite_non_defaults_ignores_the_ordering_and_keeps_stored_values_for_nulls():
    incoming = _rows(
        [
            {"key": "a", "ts": 1, "amount": None, "note": "new"},
            {"key": "a", "ts": 0, "amount": 3.0, "note": "older"},  # not folded: a duplicate
        ]
    )
    stored = _rows([{"key": "a", "ts": 9, "amount": 4.0, "note": "st", "tags": ["t"]}], False)
    merge = merge_fields(incoming, stored, _settings("overwrite_non_defaults"), SCHEMA)
    row = _by_key(merge.write)["a"]
    assert (row["ts"], row["amount"], row["note"], row["tags"]) == (1, 4.0, "new", ["t"])


@pytest.mark.parametrize("mode", ["partial_update", "overwrite_non_defaults"])
def test_a_delete_deletes_whatever_the_ordering(mode):
    incoming = _rows([{"key": "a", "ts": 0, "delete": True}, {"key": "z", "delete": True}])
    stored = _rows([{"key": "a", "ts": 9}, {"key": "a", "ts": 8}], False)
    merge = merge_fields(incoming, stored, _settings(mode), SCHEMA)
    assert merge.write.num_rows == 0
    assert merge.drop_keys.to_pylist() == ["a"]
    assert merge.counts == {"insert": 0, "update": 0, "deleted": 2, "delete_missing": 1}


class Summing(Merger):
    """Keeps one row per key: its newest incoming row, with the stored amount plus every
    incoming amount."""

    def merge(self, stored: pa.Table, incoming: pa.Table) -> pa.Table:
        keys = pc.unique(incoming.column("_record_key"))
        newest = incoming.take(pc.index_in(keys, value_set=incoming.column("_record_key")))
        amounts = pa.concat_tables(
            [t.select(["_record_key", "amount"]) for t in (stored, incoming)]
        )
        sums = amounts.group_by("_record_key").aggregate([("amount", "sum")])
        total = pc.take(
            sums.column("amount_sum"), pc.index_in(keys, value_set=sums.column("_record_key"))
        )
        return newest.set_column(newest.schema.get_field_index("amount"), "amount", total)


def _custom(merger: Merger, incoming: pa.Table, stored: pa.Table):
    settings = MergeSettings(
        "upsert", "ts", "custom", False, MergerSpec("tests.unit.test_field_merge:Summing")
    )
    return merge_fields(incoming, stored, settings, SCHEMA, merger)


def test_a_custom_merger_gets_stored_and_incoming_rows_and_its_rows_are_kept():
    incoming = _rows(
        [
            {"key": "a", "ts": 2, "amount": 1.0, "note": "a2"},
            {"key": "a", "ts": 1, "amount": 2.0, "note": "a1"},
            {"key": "b", "ts": 1, "amount": 5.0},
            {"key": "d", "ts": 1, "amount": 5.0, "delete": True},
        ]
    )
    stored = _rows([{"key": "a", "ts": 0, "amount": 10.0}, {"key": "d", "ts": 0}], False)
    merge = _custom(Summing({}), incoming, stored)
    rows = _by_key(merge.write)
    assert set(rows) == {"a", "b"}
    assert (rows["a"]["amount"], rows["a"]["note"], rows["b"]["amount"]) == (13.0, "a2", 5.0)
    assert rows["a"]["_partition_path"] == "p" and rows["a"]["_bucket"] == 0
    assert sorted(merge.drop_keys.to_pylist()) == ["a", "d"]
    assert merge.counts == {"insert": 1, "update": 1, "deleted": 1, "delete_missing": 0}


class Broken(Merger):
    def merge(self, stored: pa.Table, incoming: pa.Table) -> pa.Table:
        kind = self.properties["kind"]
        if kind == "raises":
            raise ValueError("no amount")
        if kind == "dict":
            return incoming.to_pydict()  # type: ignore[return-value]
        if kind == "no_column":
            return incoming.drop_columns(["note"])
        if kind == "stranger":
            return incoming.set_column(2, "_record_key", pa.array(["zz"] * len(incoming)))
        return incoming.set_column(6, "amount", pa.array(["x"] * len(incoming)))


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("raises", "failed: ValueError('no amount')"),
        ("dict", "returned dict; merge() must return a pyarrow.Table"),
        ("no_column", "without the column(s) ['note']"),
        ("stranger", "with key 'zz', which the batch does not hold"),
        ("bad_type", "returned columns of other types than the table's"),
    ],
)
def test_a_merger_that_fails_or_returns_wrong_rows_is_named(kind, message):
    incoming = _rows([{"key": "a", "ts": 1, "amount": 1.0}])
    with pytest.raises(MergerError, match=r"target\.merger\.class") as failure:
        _custom(Broken({"kind": kind}), incoming, _rows([], False))
    assert message in str(failure.value)


def test_a_merger_class_is_imported_only_when_named_and_must_subclass_merger(tmp_path):
    (tmp_path / "my_mergers.py").write_text(
        "from runner.write.field_merge import Merger\n"
        "class Keep(Merger):\n"
        "    def merge(self, stored, incoming):\n"
        "        return incoming\n"
        "class NotOne:\n"
        "    pass\n"
    )
    merger = load_merger(MergerSpec("my_mergers:Keep", {"a": "1"}, str(tmp_path)))
    assert merger.properties == {"a": "1"}
    with pytest.raises(MergerError, match="has no class NotOne that subclasses"):
        load_merger(MergerSpec("my_mergers:NotOne", {}, str(tmp_path)))
    with pytest.raises(MergerError, match="cannot import no_such_merger_module"):
        load_merger(MergerSpec("no_such_merger_module:X", {}, str(tmp_path)))


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("partial_update", {"1": (2000, 11.0), "2": (1000, 22.0)}),
        ("overwrite_non_defaults", {"1": (2000, 11.0), "2": (500, 99.0)}),
    ],
)
def test_what_hudi_1_1_stores_for_its_partial_update_payloads(mode, expected):
    """Observed with Hudi 1.1.1 (hudi-spark3.5-bundle on Spark 3.5.9; no bundle for Spark 4
    resolves here): a copy-on-write table holding keys 1 and 2 at ts 1000, upserted with key
    1 newer and its fare null, key 2 older with a fare, under each payload class alone."""
    stored = _rows(
        [{"key": "1", "ts": 1000, "amount": 11.0}, {"key": "2", "ts": 1000, "amount": 22.0}], False
    )
    incoming = _rows(
        [{"key": "1", "ts": 2000, "amount": None}, {"key": "2", "ts": 500, "amount": 99.0}]
    )
    rows = _by_key(merge_fields(incoming, stored, _settings(mode), SCHEMA).write)
    assert {k: (r["ts"], r["amount"]) for k, r in rows.items()} == expected


def test_a_merger_that_cannot_load_stops_the_run_before_spark_starts(tmp_path):
    from runner.pipeline.run import run_pipeline
    from runner.spec import load_spec
    from tests.helpers import write_spec

    spec = write_spec(
        tmp_path,
        {
            "record_key": "id",
            "merge_mode": "custom",
            "merger": {"class": "absent_merger_module:Sum"},
            "key_generator": {"type": "NON_PARTITIONED"},
            "index": {"buckets": 2},
        },
    )
    with pytest.raises(MergerError, match="cannot import absent_merger_module"):
        run_pipeline(load_spec(spec), spark=None)
    assert not (tmp_path / "table").exists()


def test_a_merger_written_against_0_1_0s_import_path_still_loads_with_a_warning():
    import importlib
    import sys

    sys.modules.pop("runner.table.field_merge", None)
    with pytest.warns(DeprecationWarning, match="runner.write.field_merge"):
        old = importlib.import_module("runner.table.field_merge")
    assert old.Merger is Merger
