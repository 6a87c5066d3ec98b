"""`runner init`: a spec made from a sample of the data, its guesses marked, valid as
written, without a JVM."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from runner.spec import load_spec
from tests.cli_in_process import run_cli


def _init(tmp_path: Path, *args: str) -> tuple[int, str]:
    done = run_cli("init", *args)
    return done.returncode, done.stdout + done.stderr


def test_a_csv_directory_gives_a_valid_spec_with_its_columns_and_marked_guesses(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "orders").mkdir()
    (tmp_path / "orders" / "part-1.csv").write_text(
        "order_id,customer_id,amount,updated_at,city\n1,7,12.5,2024-01-02 03:04:05,ams\n"
    )
    code, out = _init(tmp_path, "orders")
    assert code == 0 and "wrote orders.yaml" in out
    text = (tmp_path / "orders.yaml").read_text()
    assert "record_key: order_id   # check:" in text
    assert "precombine_field: updated_at   # check:" in text
    spec = load_spec(tmp_path / "orders.yaml")
    source = spec.sources[0]
    assert (source.format, source.options["header"]) == ("csv", "true")
    assert source.schema == (
        "order_id bigint, customer_id bigint, amount double, updated_at timestamp, city string"
    )
    assert source.path == str(tmp_path / "orders")
    assert spec.target.record_key == ("order_id",) and spec.target.index.buckets == 4
    code, out = _init(tmp_path, "orders")
    assert code == 2 and "orders.yaml exists; give another --out, or --force" in out


def test_parquet_types_and_a_given_key(tmp_path):
    table = pa.table(
        {
            "region": ["eu"],
            "sku": ["a-1"],
            "price": pa.array([Decimal("1.50")], pa.decimal128(10, 2)),
            "seen": pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us")),
            "tags": pa.array([["x"]], pa.list_(pa.string())),
            "dims": pa.array([{"w": 1.0, "h": 2.0}]),
        }
    )
    pq.write_table(table, tmp_path / "items.parquet")
    out = tmp_path / "specs" / "items.yaml"
    out.parent.mkdir()
    code, _ = _init(
        tmp_path, str(tmp_path / "items.parquet"), "--out", str(out), "--key", "region,sku"
    )
    assert code == 0
    data = yaml.safe_load(out.read_text())
    assert data["sources"][0]["path"] == "../items.parquet"  # relative to the spec file
    assert data["sources"][0]["schema"] == (
        "region string, sku string, price decimal(10,2), seen timestamp_ntz, "
        "tags array<string>, dims struct<w: double, h: double>"
    )
    assert data["target"]["record_key"] == "region,sku"
    assert data["target"]["precombine_field"] == "seen"
    assert load_spec(out).target.record_key == ("region", "sku")


def test_json_lines_and_what_init_refuses(tmp_path):
    lines = [json.dumps({"id": i, "name": f"n{i}", "ts": i * 10}) for i in range(3)]
    (tmp_path / "people.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "people.yaml"
    code, _ = _init(tmp_path, str(tmp_path / "people.jsonl"), "--out", str(out))
    spec = load_spec(out)
    assert code == 0 and spec.target.record_key == ("id",)
    assert (spec.sources[0].format, spec.target.precombine_field) == ("json", "ts")
    code, output = _init(
        tmp_path, str(tmp_path / "people.jsonl"), "--key", "nope", "--out", "x.yaml"
    )
    assert code == 2 and "--key nope is not a column of" in output and "id, name, ts" in output
    (tmp_path / "notes.txt").write_text("hello\n")
    code, output = _init(tmp_path, str(tmp_path / "notes.txt"))
    assert code == 2 and "cannot tell its format from its name; give --format" in output
