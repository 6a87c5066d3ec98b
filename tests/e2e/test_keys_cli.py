"""`runner keys` as a user runs it: in this process, on the shared session
(tests/cli_in_process.py); `runner read --key` in a process with no Java to start."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from tests.cli_in_process import no_spark, run_cli, shared_session
from tests.reference import bucket_of

ROOT = Path(__file__).resolve().parents[2]


def test_keys_prints_one_line_per_record_in_order(tmp_path, spark, monkeypatch):
    shared_session(monkeypatch, spark)
    records = tmp_path / "r.jsonl"
    records.write_text(
        '{"trip_id": 7, "city": "chicago"}\n{"trip_id": null, "city": "x"}\n'
        '{"trip_id": 8, "city": null}\n'
    )
    done = run_cli(
        "keys",
        str(ROOT / "pipelines" / "quickstart.yaml"),
        "--records",
        str(records),
        "--schema",
        "trip_id long, city string",
        "--buckets",
        "4",
    )
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert [o.get("record_key") for o in out] == ["7", None, "8"]
    assert out[0]["partition_path"] == "city=chicago"
    assert out[2]["partition_path"] == "city=__HIVE_DEFAULT_PARTITION__"
    assert "cannot be null or empty" in out[1]["error"]

    missing = run_cli(  # the record key field is not in the records: their columns listed
        "keys", str(ROOT / "pipelines" / "quickstart.yaml"), "--records", str(records),
        "--schema", "city string",
    )  # fmt: skip
    assert missing.returncode == 2
    assert missing.stderr.splitlines()[-1].endswith(
        "the record key field 'trip_id' is not among the input's columns: city"
    )


def test_keys_with_a_bad_spec_exits_2(tmp_path, monkeypatch):
    no_spark(monkeypatch)
    monkeypatch.chdir(tmp_path)
    spec = (ROOT / "pipelines" / "quickstart.yaml").read_text().replace("SIMPLE", "SIMPEL")
    (tmp_path / "p.yaml").write_text(spec)
    (tmp_path / "r.jsonl").write_text("{}\n")
    done = run_cli("keys", "p.yaml", "--records", "r.jsonl")
    assert done.returncode == 2
    assert "target.key_generator.type" in done.stderr and "did you mean 'SIMPLE'" in done.stderr


def test_keys_with_hudi_properties(tmp_path, spark, monkeypatch):
    """The docs' "Timestamp is GMT" example through -p, with Hudi's bucket count property."""
    records = tmp_path / "r.jsonl"
    records.write_text(
        '{"id": "a", "ts": 1578283932000}\n{"id": "b", "ts": null}\n{"id": null, "ts": 1}\n'
    )
    old = "hoodie.deltastreamer.keygen.timebased."
    props = {
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.partitionpath.field": "ts",
        "hoodie.datasource.write.keygenerator.class": (
            "org.apache.hudi.keygen.TimestampBasedKeyGenerator"
        ),
        f"{old}timestamp.type": "EPOCHMILLISECONDS",
        f"{old}output.dateformat": "yyyy-MM-dd hh",
        f"{old}timezone": "GMT+8:00",
        "hoodie.bucket.index.num.buckets": "4",
    }
    args = [a for k, v in props.items() for a in ("-p", f"{k}={v}")]
    shared_session(monkeypatch, spark)
    done = run_cli("keys", *args, "--records", str(records))
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(o.get("record_key"), o.get("partition_path")) for o in out] == [
        ("a", "2020-01-06 12"),
        ("b", "1970-01-01 08"),
        (None, None),
    ]
    assert all(0 <= o["bucket"] < 4 for o in out[:2])
    assert out[2] == {"error": 'recordKey value: "null" for field: "id" cannot be null or empty.'}


def test_keys_with_bad_properties_exits_2_before_starting_spark(tmp_path, monkeypatch):
    no_spark(monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.jsonl").write_text("{}\n")
    done = run_cli(
        "keys",
        "-p", "hoodie.datasource.write.recordkey.field=id",
        "-p", "hoodie.datasource.write.partitionpath.field=ts",
        "-p", "hoodie.datasource.write.keygenerator.type=TIMESTAMP",
        "-p", "hoodie.keygen.timebased.timestamp.type=EPOCHMILLISECONDS",
        "--records", "r.jsonl",
    )  # fmt: skip
    assert done.returncode == 2
    assert "-p: required" in done.stderr and "output.dateformat" in done.stderr, done.stderr


def test_read_key_returns_the_rows_of_a_key_with_no_jvm(tmp_path, spark, monkeypatch):
    """`runner read --key` fetches a key's row back from the files of its bucket whose key
    range holds it, in a process with no Java on the PATH at all."""
    shutil.copytree(
        ROOT / "pipelines", tmp_path / "pipelines", ignore=shutil.ignore_patterns("warehouse")
    )
    shared_session(monkeypatch, spark)
    ran = run_cli(str(tmp_path / "pipelines" / "quickstart.yaml"))
    assert ran.returncode == 0, ran.stderr
    runner = [sys.executable, "-m", "runner"]
    table = tmp_path / "pipelines" / "warehouse" / "trips"
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # no java on it: a JVM could not start
    done = subprocess.run(
        [*runner, "read", str(table), "--key", "2", "--key", "999999", "--key", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    stored = DeltaTable(str(table)).to_pandas()
    expected = stored[stored["trip_id"].isin([1, 2])].set_index("trip_id")
    assert [r["trip_id"] for r in rows] == [2, 1]  # in the order of the keys
    for r in rows:
        assert r["_record_key"] == str(r["trip_id"])
        assert r["fare"] == expected.loc[r["trip_id"], "fare"]
        assert r["_partition_path"] == expected.loc[r["trip_id"], "_partition_path"]
    assert '2 of 3 key(s) found; not found: "999999"' in done.stderr
    # opened: in each partition, the file of each key's bucket if its key range holds it
    actions = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()
    opened = sum(
        any(
            a["min._bucket"] == bucket_of((k,), 16)
            and a["min._record_key"] <= k <= a["max._record_key"]
            for k in ("1", "2", "999999")
        )
        for a in actions
    )
    assert f"from {opened} of {len(actions)} file(s) opened" in done.stderr
    assert "spark_starting" not in done.stderr and "Traceback" not in done.stderr
