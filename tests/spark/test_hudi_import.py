"""`runner import-hudi` end to end: a HoodieStreamer job in Hudi's own style becomes a spec
that validates, runs, and keys records as Hudi's ComplexKeyGenerator would."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from runner.cli import cli
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.helpers import read_table

DATA = Path(__file__).resolve().parents[1] / "data" / "hudi"
STREAMER = "org.apache.hudi.utilities."


def _records() -> list[dict]:
    """Trips with a repeated key (the greater ts wins) and one row the SQL filters out."""
    return [
        {"trip_id": 1, "rider": "ann", "city": "ams", "day": "2026-01-01", "ts": 5, "fare": 9.5},
        {"trip_id": 1, "rider": "ann", "city": "ams", "day": "2026-01-01", "ts": 7, "fare": 11.0},
        {"trip_id": 1, "rider": "bob", "city": "ams", "day": "2026-01-01", "ts": 1, "fare": 3.0},
        {"trip_id": 2, "rider": "cy", "city": "sf", "day": "2026-01-02", "ts": 2, "fare": 20.0},
        {"trip_id": 3, "rider": "di", "city": "sf", "day": "2026-01-02", "ts": 2, "fare": -1.0},
    ]


def test_a_streamer_job_becomes_a_spec_that_runs_and_keys_as_hudi(spark, tmp_path):
    for name in ("trips.properties", "common.properties"):
        shutil.copy(DATA / name, tmp_path / name)
    (tmp_path / "landing").mkdir()
    lines = "".join(json.dumps(r) + "\n" for r in _records())
    (tmp_path / "landing" / "part-0.json").write_text(lines)
    out = tmp_path / "trips.yaml"
    args = [
        "import-hudi", str(tmp_path / "trips.properties"),
        "--target-base-path", "warehouse/trips", "--target-table", "trips",
        "--table-type", "MERGE_ON_READ", "--op", "UPSERT",
        "--source-class", f"{STREAMER}sources.JsonDFSSource",
        "--transformer-class", f"{STREAMER}transform.SqlQueryBasedTransformer",
        "--hoodie-conf", "hoodie.upsert.shuffle.parallelism=4",
        "--continuous", "--min-sync-interval-seconds", "60",
        "-o", str(out),
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "#   hoodie.streamer.source.dfs.root -> sources[0].path" in text
    assert "#   hoodie.datasource.hive_sync.database -> target.catalog.database" in text
    assert "runner run SPEC --continuous --min-interval 60s" in text

    spec = load_spec(out)
    assert (spec.target.table_type, spec.target.operation) == ("MERGE_ON_READ", "upsert")
    assert spec.target.index.buckets == 4 and spec.target.index.hash_fields == ("trip_id",)
    summary = run_pipeline(spec, spark=spark)
    assert summary.inserted == 3 and summary.sources["src"]["files"] == 1

    rows = read_table(tmp_path / "warehouse" / "trips")
    got = {
        (r["_record_key"], r["_partition_path"]): (r["ts"], r["fare"])
        for r in rows.to_dict("records")
    }
    # ComplexKeyGenerator: field:value pairs; hive-style partition path of both fields
    assert got == {
        ("trip_id:1,rider:ann", "city=ams/day=2026-01-01"): (7, 11.0),
        ("trip_id:1,rider:bob", "city=ams/day=2026-01-01"): (1, 3.0),
        ("trip_id:2,rider:cy", "city=sf/day=2026-01-02"): (2, 20.0),
    }


def test_a_csv_job_keeps_hudis_inferred_types_so_its_ordering_field_orders_numbers(spark, tmp_path):
    """CsvDFSSource infers column types without a schema provider; the imported spec does
    too, so `ts` orders as a number (10 above 9), as in Hudi, and the run is not refused."""
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "a.csv").write_text("id,city,ts\n1,a,9\n1,a,10\n2,b,100\n2,b,99\n")
    (tmp_path / "job.properties").write_text(
        "hoodie.datasource.write.recordkey.field=id\n"
        "hoodie.datasource.write.partitionpath.field=city\n"
        "hoodie.streamer.source.dfs.root=landing\n"
        "hoodie.streamer.csv.header=true\n"
    )
    out = tmp_path / "job.yaml"
    args = [
        "import-hudi", str(tmp_path / "job.properties"),
        "--target-base-path", "table", "--target-table", "t",
        "--source-class", f"{STREAMER}sources.CsvDFSSource", "--source-ordering-field", "ts",
        "-o", str(out),
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output

    run_pipeline(load_spec(out), spark=spark)

    rows = read_table(tmp_path / "table").sort_values("id")
    assert rows["ts"].tolist() == [max(9, 10), max(100, 99)]
