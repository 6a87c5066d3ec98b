"""A change feed's events applied to one bucket (runner/write/cdc_apply.py), and the
tombstones that remember deleted keys (runner/write/tombstones.py), without Spark."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from runner.spec.model import CdcSpec, ScdSpec
from runner.storage.meta_columns import META_FIELDS, RECORD_KEY
from runner.storage.parquet_file import BucketFile, conform
from runner.write import tombstones
from runner.write.bucket_merge import DELETE
from runner.write.cdc_apply import ChangeFeed, apply_changes

SCD1 = pa.schema([*META_FIELDS, ("name", pa.string()), ("lsn", pa.int64())])
SCD2 = pa.schema(
    [*SCD1, ("valid_from", pa.int64()), ("valid_to", pa.int64()), ("is_current", pa.bool_())]
)
NOW = "20261124120000000"


def _rows(schema: pa.Schema, *rows: tuple) -> pa.Table:
    """(key, name, lsn[, deleted]) rows in the file schema, newest first per key as the
    writer hands them over."""
    table = pa.table(
        {
            RECORD_KEY: [r[0] for r in rows],
            "name": [r[1] for r in rows],
            "lsn": [r[2] for r in rows],
        }
    )
    out = conform(table, schema)
    return out.append_column(DELETE, pa.array([len(r) > 3 and r[3] for r in rows]))


def _apply(schema, batch, stored, remembered=None, scd=1, nulls=False):
    cdc = CdcSpec("lsn", "op", ignore_null_updates=nulls)
    remembered = (
        remembered if remembered is not None else tombstones.schema(pa.int64()).empty_table()
    )
    return apply_changes(batch, stored, remembered, ChangeFeed(cdc, ScdSpec(type=scd), schema, NOW))


def test_type_1_skips_late_events_and_remembers_deletes():
    stored = conform(_rows(SCD1, ("a", "a5", 5), ("b", "b5", 5)), SCD1)
    batch = _rows(SCD1, ("a", "a3", 3), ("b", None, 9, True), ("c", "c1", 1))
    applied = _apply(SCD1, batch, stored)
    assert applied.merge.write.column("name").to_pylist() == ["c1"]
    assert sorted(applied.merge.drop_keys.to_pylist()) == ["b"]
    assert {k: v for k, v in applied.merge.counts.items() if v} == {
        "insert": 1,
        "deleted": 1,
        "late": 1,
    }
    assert applied.tombstones.to_pylist() == [{RECORD_KEY: "b", "sequence": 9, "deleted_at": NOW}]
    # a later batch with an update older than the delete: skipped, no row comes back
    again = _apply(SCD1, _rows(SCD1, ("b", "b7", 7)), stored.slice(0, 0), applied.tombstones)
    assert again.merge.write.num_rows == 0 and again.merge.counts["late"] == 1
    assert not again.tombstones_changed


def test_type_1_redelivery_and_the_batch_order():
    stored = conform(_rows(SCD1, ("a", "a5", 5)), SCD1)
    # newest first: the later input of two events at lsn 8 comes first
    batch = _rows(SCD1, ("a", "second", 8), ("a", "first", 8), ("a", "again", 5), ("a", "a6", 6))
    applied = _apply(SCD1, batch, stored)
    assert applied.merge.write.column("name").to_pylist() == ["second"]
    counts = applied.merge.counts
    assert (counts["duplicate"], counts["superseded"], counts["update"]) == (2, 1, 1)


def test_type_1_ignore_null_updates_fills_from_the_state_before():
    stored = conform(_rows(SCD1, ("a", "kept", 5)), SCD1)
    applied = _apply(SCD1, _rows(SCD1, ("a", None, 6)), stored, nulls=True)
    assert applied.merge.write.select(["name", "lsn"]).to_pylist() == [{"name": "kept", "lsn": 6}]


def test_type_2_puts_a_late_event_in_its_place():
    stored = pa.table(
        {
            RECORD_KEY: ["a", "a"],
            "name": ["v1", "v3"],
            "lsn": [1, 3],
            "valid_from": [1, 3],
            "valid_to": [3, None],
            "is_current": [False, True],
        }
    )
    stored = conform(stored, SCD2)
    applied = _apply(SCD2, _rows(SCD2, ("a", "v2", 2), ("a", None, 4, True)), stored, scd=2)
    versions = applied.merge.write.select(["name", "valid_from", "valid_to", "is_current"])
    assert versions.sort_by("valid_from").to_pylist() == [
        {"name": "v1", "valid_from": 1, "valid_to": 2, "is_current": False},
        {"name": "v2", "valid_from": 2, "valid_to": 3, "is_current": False},
        {"name": "v3", "valid_from": 3, "valid_to": 4, "is_current": False},
    ]
    counts = applied.merge.counts
    assert (counts["late"], counts["update"], counts["deleted"], counts["closed"]) == (1, 1, 1, 3)
    assert applied.tombstones.num_rows == 0  # the delete is v3's end


def test_tombstones_travel_in_the_footer_and_expire(tmp_path):
    fs = pafs.LocalFileSystem()
    remembered = pa.table(
        {RECORD_KEY: ["a", "b"], "sequence": [4, 9], "deleted_at": ["20261101000000000", NOW]}
    ).cast(tombstones.schema(pa.int64()))
    out = BucketFile(fs, f"{tmp_path}/f.parquet", SCD1, key_filter=True)
    tombstones.attach(out, tombstones.encode(remembered), ("", 0))
    assert out.close()  # no row, and still a file
    assert pq.read_table(tmp_path / "f.parquet").num_rows == 0
    back = tombstones.read(fs, str(tmp_path), ["f.parquet"], pa.int64())
    assert back.equals(remembered)
    assert tombstones.unexpired(back, NOW, hours=168).column(RECORD_KEY).to_pylist() == ["b"]
