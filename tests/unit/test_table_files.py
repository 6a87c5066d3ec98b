"""The table layer's pieces in pyarrow alone: file statistics, names, layout, file checkpoints.

No Spark: each piece is checked against values worked out by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import os

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from runner.index.layout import BucketLayout
from runner.index.naming import data_file_name, new_file_id, parse_data_file_name
from runner.sources.listing import FileCheckpoint, list_new_files
from runner.storage import parquet_file
from runner.storage.key_filter import footer_filter, key_hashes
from runner.storage.parquet_file import BucketFile, OpenFiles


def test_a_bucket_file_is_zstd_parquet_with_delta_statistics(tmp_path):
    schema = pa.schema(
        [
            ("_record_key", pa.string()),
            ("n", pa.int64()),
            ("x", pa.float64()),
            ("at", pa.timestamp("us", tz="UTC")),
        ]
    )
    moments = [dt.datetime(2026, 1, 1, 0, 0, 0, 1500, tzinfo=dt.UTC), None]
    out = BucketFile(pafs.LocalFileSystem(), f"{tmp_path}/p=1/f.parquet", schema, key_filter=True)
    out.write(pa.table({"_record_key": ["c"], "n": [-7], "x": [0.5], "at": [None]}, schema=schema))
    out.write(pa.table({"_record_key": ["b", "a"], "n": [3, None], "x": [1.5, float("nan")],
                        "at": moments}, schema=schema))  # fmt: skip

    assert out.close() and out.size == os.path.getsize(tmp_path / "p=1" / "f.parquet")
    stats = json.loads(out.stats.to_json())
    assert stats["numRecords"] == 3
    assert stats["minValues"]["_record_key"] == "a" and stats["maxValues"]["_record_key"] == "c"
    assert (stats["minValues"]["n"], stats["maxValues"]["n"]) == (-7, 3)
    assert "x" not in stats["minValues"]  # NaN makes float bounds unusable: left out
    # millisecond precision: the min rounds down, the max up, so pruning stays safe
    assert stats["minValues"]["at"] == "2026-01-01T00:00:00.001Z"
    assert stats["maxValues"]["at"] == "2026-01-01T00:00:00.002Z"
    assert stats["nullCount"] == {"_record_key": 0, "n": 1, "x": 0, "at": 2}
    written = pq.ParquetFile(tmp_path / "p=1" / "f.parquet")
    assert written.metadata.row_group(0).column(0).compression == "ZSTD"
    assert written.metadata.num_row_groups == 1  # the two writes buffered into one group
    assert written.read().column("n").to_pylist() == [-7, 3, None]


def test_only_columns_whose_values_repeat_get_a_dictionary(tmp_path):
    """A dictionary of nearly distinct values is as large as the values: such columns (and
    the always-distinct meta columns) are written plain, repeating ones and dates with a
    dictionary."""
    n = 3000
    rows = pa.table(
        {
            "_record_key": [f"k{i}" for i in range(n)],
            "id": pa.array(range(n), pa.int64()),
            "note": [f"note-{i * 7919 % 100003}" for i in range(n)],
            "city": ["ams", "sf", "nyc"] * (n // 3),
            "status": pa.array([i % 40 for i in range(n)], pa.int32()),
            "tags": [[i % 3] for i in range(n)],  # nested: leaves are not named, so plain
            # a date: its days repeat over the file, if not in the first 1,000 rows
            "shipped": pa.array([dt.date(1992, 1, 1) + dt.timedelta(i % 1500) for i in range(n)]),
        }
    )
    out = BucketFile(pafs.LocalFileSystem(), f"{tmp_path}/f.parquet", rows.schema, key_filter=True)
    out.write(rows)
    assert out.close()

    written = pq.ParquetFile(tmp_path / "f.parquet")
    group = written.metadata.row_group(0)
    encoded = {
        group.column(i).path_in_schema: "RLE_DICTIONARY" in group.column(i).encodings
        for i in range(group.num_columns)
    }
    assert encoded == {
        "_record_key": False,
        "id": False,
        "note": False,
        "city": True,
        "status": True,
        "tags.list.element": False,
        "shipped": True,
    }
    assert written.read().equals(rows)


def test_string_bounds_follow_byte_order_and_are_left_out_when_unknown(tmp_path):
    schema = pa.schema([("s", pa.string()), ("long", pa.string()), ("empty", pa.string())])
    out = BucketFile(pafs.LocalFileSystem(), f"{tmp_path}/f.parquet", schema, key_filter=True)
    out.write(pa.table({"s": ["é", "z"], "long": ["a", "x" * 5000], "empty": [None, None]},
                       schema=schema))  # fmt: skip
    assert out.close()
    stats = json.loads(out.stats.to_json())
    # UTF-8 byte order, as every Delta reader compares: "é" (0xC3...) sorts after "z"
    assert (stats["minValues"]["s"], stats["maxValues"]["s"]) == ("z", "é")
    # parquet keeps no bounds for a value over 4 KiB: the column gets none rather than wrong
    assert "long" not in stats["minValues"] and "long" not in stats["maxValues"]
    assert "empty" not in stats["minValues"] and stats["nullCount"]["empty"] == 2


def test_a_bucket_file_with_no_rows_is_never_created(tmp_path):
    out = BucketFile(
        pafs.LocalFileSystem(),
        f"{tmp_path}/f.parquet",
        pa.schema([("a", pa.int8())]),
        key_filter=True,
    )
    assert not out.close() and not (tmp_path / "f.parquet").exists()


def test_file_names_carry_bucket_file_group_token_and_instant():
    file_id = new_file_id(37)
    name = data_file_name(file_id, "3-12-0", "20261123120000123")

    parsed = parse_data_file_name(f"city=paris/{name}")

    assert parsed is not None
    assert (parsed.bucket, parsed.file_id) == (37, file_id)
    assert (parsed.write_token, parsed.instant) == ("3-12-0", "20261123120000123")
    assert parse_data_file_name("part-00000-0f1e.snappy.parquet") is None
    assert parse_data_file_name(name.replace(".parquet", ".csv")) is None


def test_a_layout_round_trips_through_the_table_configuration():
    layout = BucketLayout(16).with_counts({"city=paris": 64})

    stored = layout.to_configuration()
    again = BucketLayout.from_configuration(stored)

    assert again == layout
    assert (again.count_for("city=paris"), again.count_for("city=rome")) == (64, 16)
    assert stored["runner.index.buckets.created"] == "16"
    grown = again.with_counts({}, default=32)  # every partition to 32: paris keeps nothing
    assert (grown.default, dict(grown.partitions), grown.created) == (32, {}, 16)


def test_new_files_checkpoint_takes_each_file_once(tmp_path):
    (tmp_path / "_hidden").mkdir()
    (tmp_path / "_hidden" / "x.json").write_text("{}")
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text("{}")
        os.utime(tmp_path / name, ns=(1_000, 1_000))

    first = list_new_files(str(tmp_path), None)
    assert [os.path.basename(p) for p in first.paths] == ["a.json", "b.json"]
    checkpoint = first.until
    assert checkpoint is not None
    assert FileCheckpoint.from_json(checkpoint.to_json(), "here") == checkpoint

    again = list_new_files(str(tmp_path), checkpoint)
    assert again.paths == [] and again.until == checkpoint

    (tmp_path / "c.json").write_text("{}")  # a later file: only it is new
    later = list_new_files(str(tmp_path), checkpoint)
    assert [os.path.basename(p) for p in later.paths] == ["c.json"]


def test_a_tasks_open_files_keep_their_buffered_rows_under_the_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet_file, "TASK_BUFFER_BYTES", 40_000)
    schema = pa.schema([("_record_key", pa.string()), ("n", pa.int64())])
    files = OpenFiles(
        pafs.LocalFileSystem(), str(tmp_path), schema, lambda g: f"{g[1]}.parquet", key_filters=True
    )
    for round_ in range(10):
        for bucket in range(4):
            n = range(round_ * 1000, round_ * 1000 + 1000)
            files.write(("", bucket), pa.table({"_record_key": [str(i) for i in n], "n": n}))
            assert sum(f.pending_bytes for _, f in files.open.values()) <= 40_000
    closed = list(files.close_all())
    assert [(g, rel) for g, rel, _ in closed] == [(("", b), f"{b}.parquet") for b in range(4)]
    assert not files.open
    every_key = key_hashes(pa.array([str(i) for i in range(10_000)]))
    for (_, bucket), _, out in closed:
        written = pq.ParquetFile(tmp_path / f"{bucket}.parquet")
        assert written.metadata.num_rows == 10_000
        assert written.metadata.num_row_groups > 1  # written out before the task's end
        # statistics and the key filter cover every row group, the last one included
        stats = json.loads(out.stats.to_json())
        assert stats["numRecords"] == 10_000 and stats["nullCount"]["n"] == 0
        assert (stats["minValues"]["n"], stats["maxValues"]["n"]) == (0, 9_999)
        found = footer_filter(written.metadata.metadata)
        assert found is not None and found.might_hold(every_key).all()
