"""`runner keys` as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_keys_prints_one_line_per_record_in_order(tmp_path):
    records = tmp_path / "r.jsonl"
    records.write_text(
        '{"trip_id": 7, "city": "chicago"}\n{"trip_id": null, "city": "x"}\n'
        '{"trip_id": 8, "city": null}\n'
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "keys",
            str(ROOT / "pipelines" / "quickstart.yaml"),
            "--records",
            str(records),
            "--schema",
            "trip_id long, city string",
            "--buckets",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert [o.get("record_key") for o in out] == ["7", None, "8"]
    assert out[0]["partition_path"] == "city=chicago"
    assert out[2]["partition_path"] == "city=__HIVE_DEFAULT_PARTITION__"
    assert "cannot be null or empty" in out[1]["error"]


def test_keys_with_a_bad_spec_exits_2(tmp_path):
    spec = (ROOT / "pipelines" / "quickstart.yaml").read_text().replace("SIMPLE", "SIMPEL")
    (tmp_path / "p.yaml").write_text(spec)
    (tmp_path / "r.jsonl").write_text("{}\n")
    done = subprocess.run(
        [sys.executable, "-m", "runner", "keys", "p.yaml", "--records", "r.jsonl"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "target.key_generator.type" in done.stderr and "did you mean 'SIMPLE'" in done.stderr
