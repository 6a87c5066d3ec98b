"""`runner plan`, `runner expand` (a whole table, then one bucket alone) and `runner inspect`
as a user runs them, on the quickstart."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.cli_in_process import run_cli
from tests.reference import bucket_of

ROOT = Path(__file__).resolve().parents[2]
RUNNER = [sys.executable, "-m", "runner"]


def _runner(work: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RUNNER, *args], cwd=work, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.e2e
def test_plan_expand_inspect_then_the_next_run(tmp_path):
    shutil.copytree(
        ROOT / "pipelines", tmp_path / "pipelines", ignore=shutil.ignore_patterns("warehouse")
    )
    assert _runner(tmp_path, "pipelines/quickstart.yaml").returncode == 0
    table = tmp_path / "pipelines" / "warehouse" / "trips"

    # plan: from the Delta log only, no JVM, nothing changed
    planned = _runner(tmp_path, "plan", "pipelines/quickstart.yaml", "--buckets", "32", "--json")
    assert planned.returncode == 0, planned.stderr
    assert "spark_starting" not in planned.stderr
    plan = json.loads(planned.stdout)["plan"]
    assert plan["buckets_before"]["default"] == 16 and plan["buckets_after"]["default"] == 32
    assert plan["files_read"] == len(DeltaTable(str(table)).file_uris())
    assert len(plan["partitions"]) == 5 and not plan["shuffle"]
    assert DeltaTable(str(table)).version() == 1
    # the table itself, for the spec: its stored settings (in this process: no JVM)
    by_table = run_cli("plan", str(table), "--buckets", "32", "--json")
    assert by_table.returncode == 0, by_table.stderr
    assert json.loads(by_table.stdout)["plan"] == plan
    by_spec = run_cli("inspect", str(tmp_path / "pipelines" / "quickstart.yaml"))
    assert by_spec.returncode == 0 and by_spec.stdout == run_cli("inspect", str(table)).stdout

    refused = _runner(tmp_path, "expand", "pipelines/quickstart.yaml", "--buckets", "24")
    assert refused.returncode == 2
    assert "use --policy overwrite" in refused.stderr
    assert "spark_starting" not in refused.stderr

    done = _runner(tmp_path, "expand", "pipelines/quickstart.yaml", "--buckets", "32")
    assert done.returncode == 0, done.stderr
    assert "committed version 2" in done.stdout
    assert "shuffle      none: each old bucket's file is split where it is read" in done.stdout
    # the plan's estimate is near what was written: 80 small files split into 146, each new
    # file its own footer (the estimate said 268 KiB, the bytes read, for 482 KiB written)
    written = pa.table(DeltaTable(str(table)).get_add_actions())["size_bytes"].to_pylist()
    assert abs(plan["files_written_estimate"] - len(written)) <= 0.05 * len(written)
    assert abs(plan["bytes_written_estimate"] - sum(written)) <= 0.1 * sum(written)
    # the summary's time is the history's: both from the command's start, Spark's included
    (time_line,) = [line for line in done.stdout.splitlines() if line.startswith("  time ")]
    shown = re.fullmatch(r"  time +([\d.]+)s \(([\d.]+)s of it Spark's start\)", time_line)
    assert shown, time_line
    records = run_cli("history", str(tmp_path / "pipelines/quickstart.yaml"), "--json", "-n", "1")
    (record,) = [json.loads(line) for line in records.stdout.splitlines()]
    assert record["kind"] == "expansion"
    assert abs(float(shown[1]) - record["seconds"]) < 0.5 and float(shown[2]) < float(shown[1])

    inspected = _runner(tmp_path, "inspect", str(table), "--json", "--plot", "buckets.png")
    assert inspected.returncode == 0, inspected.stderr
    report = json.loads(inspected.stdout)
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pandas()
    assert report["version"] == 2 and report["rows"] == len(rows)
    by_bucket = rows.groupby(["_partition_path", "_bucket"]).size()
    for part in report["partitions"]:
        assert part["buckets"] == len(part["bucket_detail"]) == 32
        for b in part["bucket_detail"]:
            assert b["rows"] == by_bucket.get((part["partition"], b["bucket"]), 0)
    png = (tmp_path / "buckets.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000

    # the largest bucket splits alone: 32 -> 64 for it only (the plan starts no JVM)
    part = max(report["partitions"], key=lambda p: p["rows"])
    hot = max(part["bucket_detail"], key=lambda b: b["rows"])["bucket"]
    name = f"{part['partition']}/{hot}"
    planned = _runner(tmp_path, "plan", "pipelines/quickstart.yaml", "--bucket", name, "--json")
    assert planned.returncode == 0 and "spark_starting" not in planned.stderr, planned.stderr
    (split,) = json.loads(planned.stdout)["plan"]["splits"]
    assert (split["modulus_before"], split["buckets_after"]) == (32, [hot, hot + 32])
    unknown = _runner(tmp_path, "expand", "pipelines/quickstart.yaml", "--bucket", "city=x/1")
    assert unknown.returncode == 2 and "holds no data" in unknown.stderr
    done = _runner(tmp_path, "expand", str(table), "--bucket", name)  # the table, no spec
    assert done.returncode == 0, done.stderr
    assert "committed version 3" in done.stdout and "1 split alone" in done.stdout
    inspected = _runner(tmp_path, "inspect", str(table))
    assert f"{hot} (modulus 64, depth 1), {hot + 32} (modulus 64, depth 1)" in inspected.stdout

    # the spec still says 16 (the count the table was created with): the next run writes
    # into the 32-bucket layout, with the split bucket's rows at modulus 64
    corrections = _runner(tmp_path, "pipelines/quickstart_corrections.yaml")
    assert corrections.returncode == 0, corrections.stderr
    assert "committed version 4" in corrections.stdout
    after = DeltaTable(str(table)).to_pyarrow_table().to_pandas()
    assert (after["_commit_time"] > rows["_commit_time"].max()).any(), "the run wrote rows"
    for trip_id, pp, bucket in zip(
        after["trip_id"], after["_partition_path"], after["_bucket"], strict=True
    ):
        split_here = pp == part["partition"] and bucket_of((str(trip_id),), 32) == hot
        assert bucket == bucket_of((str(trip_id),), 64 if split_here else 32)
