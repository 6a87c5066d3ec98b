"""Input the runner cannot read: corrupt or vanished files, text records that do not parse.

Each case checks what a user sees (the file, the line, the reason), that a failed run leaves
the table as it was, and that the skip and record actions keep every other row.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable

from runner.commands.run import run_pipeline
from runner.errors import BadRecordsError, UnreadableFileError
from runner.sources.bad_input import reading
from runner.spec import load_spec
from tests.helpers import file_bytes, read_table

pytestmark = pytest.mark.spark

SCHEMA = "id long, city string, v long"
GOOD = [{"id": 1, "city": "a", "v": 10}, {"id": 2, "city": "b", "v": 20}]


def _spec(tmp_path: Path, source: dict, **target) -> Path:
    spec = {
        "name": "bad",
        "sources": [{"name": "src", "path": "in", **source}],
        "target": {
            "path": "table",
            "operation": "upsert",
            "record_key": "id",
            "precombine_field": "v",
            "key_generator": {"type": "SIMPLE", "partition_fields": "city"},
            "index": {"buckets": 4},
            **target,
        },
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    (tmp_path / "in").mkdir(exist_ok=True)
    return path


def _json_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


def _rows(table: Path) -> list[dict]:
    frame = read_table(table)[["id", "city", "v"]].sort_values("id")
    return frame.to_dict("records")


def test_malformed_json_records_fail_the_run_naming_file_and_line(spark, tmp_path):
    spec = _spec(tmp_path, {"format": "json", "schema": SCHEMA})
    _json_lines(tmp_path / "in" / "a.json", [json.dumps(r) for r in GOOD])
    run_pipeline(load_spec(spec), spark=spark)
    before = file_bytes(tmp_path / "table")
    _json_lines(
        tmp_path / "in" / "a.json",
        [json.dumps(GOOD[0]), '{"id": 3, "city": "c", "v": "ten"}', "{not json"],
    )

    with pytest.raises(BadRecordsError) as failed:
        run_pipeline(load_spec(spec), spark=spark)

    message = str(failed.value)
    assert "2 record(s) are rejected; nothing was written" in message
    assert "malformed_record 2" in message
    assert f"{tmp_path}/in/a.json:2: " in message and '"v": "ten"' in message
    assert f"{tmp_path}/in/a.json:3: " in message and "{not json" in message
    assert "on_bad_record" in message
    assert file_bytes(tmp_path / "table") == before


def test_malformed_csv_records_are_dropped_and_counted_even_in_columns_a_pass_skips(
    spark, tmp_path
):
    # the bad value sits in `v`, a column the bucket-count pass does not need for a
    # commit_time upsert: the write must still agree with the counts
    spec = _spec(
        tmp_path,
        {"format": "csv", "schema": SCHEMA, "on_bad_record": "drop"},
        merge_mode="commit_time",
    )
    (tmp_path / "in" / "a.csv").write_text("1,a,10\n2,b,not-a-number\n3,c,30\n4,d\n")

    summary = run_pipeline(load_spec(spec), spark=spark)

    assert summary.rows_read == 4 and summary.rows_dropped == 2
    assert summary.rejected_by_rule == {"malformed_record": 2}
    assert summary.inserted == 2
    assert _rows(tmp_path / "table") == [
        {"id": 1, "city": "a", "v": 10},
        {"id": 3, "city": "c", "v": 30},
    ]


def test_malformed_records_go_to_quarantine_as_they_were_read(spark, tmp_path):
    spec = _spec(
        tmp_path,
        {"format": "json", "schema": SCHEMA, "on_bad_record": "quarantine"},
        quarantine={"path": "quarantine", "max_fraction": 0.5},
    )
    bad_line = '{"id": 9, "city": "z", "v": [1]}'
    _json_lines(tmp_path / "in" / "a.json", [*(json.dumps(r) for r in GOOD), bad_line])

    summary = run_pipeline(load_spec(spec), spark=spark)

    assert summary.rows_quarantined == 1 and summary.inserted == 2
    quarantined = DeltaTable(str(tmp_path / "quarantine")).to_pandas()
    assert quarantined["_rule"].tolist() == ["malformed_record"]
    assert quarantined["_record"].tolist() == [bad_line]
    assert "a.json" in quarantined["_reason"][0]
    assert _rows(tmp_path / "table") == GOOD


def test_records_of_an_inferred_json_schema_that_do_not_parse_are_caught(spark, tmp_path):
    spec = _spec(tmp_path, {"format": "json", "on_bad_record": "drop"})
    _json_lines(tmp_path / "in" / "a.json", [*(json.dumps(r) for r in GOOD), "oops"])

    summary = run_pipeline(load_spec(spec), spark=spark)

    assert summary.rows_dropped == 1 and summary.inserted == 2
    assert _rows(tmp_path / "table") == GOOD


def _parquet(path: Path, rows: list[dict]) -> None:
    pq.write_table(pa.Table.from_pylist(rows), path)


def test_a_corrupt_parquet_file_stops_the_run_with_its_name_and_reason(spark, tmp_path):
    spec = _spec(tmp_path, {"format": "parquet"})
    _parquet(tmp_path / "in" / "good.parquet", GOOD)
    run_pipeline(load_spec(spec), spark=spark)
    before = file_bytes(tmp_path / "table")
    (tmp_path / "in" / "x.parquet").write_bytes(b"this is not parquet at all")

    with pytest.raises(UnreadableFileError) as failed:
        run_pipeline(load_spec(spec), spark=spark)

    assert failed.value.exit_code == 2
    message = str(failed.value)
    assert message.startswith(f"source 'src' cannot read {tmp_path}/in/x.parquet: ")
    assert "is not a Parquet file" in message and "on_bad_file: skip" in message
    assert "\tat org.apache" not in message
    assert file_bytes(tmp_path / "table") == before


def test_skipped_files_are_named_quarantined_and_passed_by_the_checkpoint(spark, tmp_path):
    spec = _spec(
        tmp_path,
        {"format": "parquet", "incremental": "new_files", "on_bad_file": "skip"},
        quarantine={"path": "quarantine"},
    )
    _parquet(tmp_path / "in" / "a.parquet", GOOD[:1])
    (tmp_path / "in" / "b.parquet").write_bytes(b"garbage")
    whole = pa.Table.from_pylist(GOOD[1:])
    pq.write_table(whole, tmp_path / "c.parquet")
    data = (tmp_path / "c.parquet").read_bytes()
    (tmp_path / "in" / "c.parquet").write_bytes(data[: len(data) // 2])  # truncated

    summary = run_pipeline(load_spec(spec), spark=spark)

    skipped = {Path(f["path"]).name: f["reason"] for f in summary.files_skipped}
    assert set(skipped) == {"b.parquet", "c.parquet"}
    assert all("not a Parquet file" in reason for reason in skipped.values())
    assert "skipped      2 unreadable file(s)" in summary.render()
    assert summary.version is not None and _rows(tmp_path / "table") == GOOD[:1]
    quarantined = DeltaTable(str(tmp_path / "quarantine")).to_pandas()
    assert quarantined["_rule"].tolist() == ["unreadable_file"] * 2
    files = sorted(json.loads(r)["file"] for r in quarantined["_record"])
    assert files == [f"{tmp_path}/in/b.parquet", f"{tmp_path}/in/c.parquet"]

    # they are not read again: the checkpoint passed them
    again = run_pipeline(load_spec(spec), spark=spark)
    assert again.nothing_new and again.files_skipped == []


def test_a_file_gone_between_listing_and_reading_is_named(spark, tmp_path):
    spec = load_spec(_spec(tmp_path, {"format": "json", "schema": "id long"}))
    _json_lines(tmp_path / "in" / "a.json", ['{"id": 1}'])
    frame = spark.read.schema("id long").json(str(tmp_path / "in"))
    (tmp_path / "in" / "a.json").unlink()

    with pytest.raises(UnreadableFileError) as failed, reading(spec.sources):
        frame.count()

    assert failed.value.path == f"{tmp_path}/in/a.json"
    assert failed.value.source == "src" and not failed.value.skippable
    assert "does not exist" in failed.value.reason


def test_rows_from_good_files_are_kept_whole(spark, tmp_path):
    """A source with no bad record is read exactly as before: the checks change nothing."""
    spec = _spec(tmp_path, {"format": "csv", "schema": SCHEMA, "options": {"header": True}})
    pd.DataFrame(GOOD).to_csv(tmp_path / "in" / "a.csv", index=False)

    summary = run_pipeline(load_spec(spec), spark=spark)

    assert summary.rows_read == 2 and summary.rejected_by_rule == {}
    assert _rows(tmp_path / "table") == GOOD
