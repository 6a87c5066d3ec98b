"""Real `runner` processes killed with SIGKILL at each point of a run and of an expansion.

RUNNER_FAULT=<point>:hold makes the process stop at that point and say so in a marker file;
the test then kills its whole process group (driver, JVM, Python workers) with SIGKILL. The
table must stay at a version every reader can use, the next run must complete, and
`runner clean` must remove the files the killed runs left behind.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
from deltalake import DeltaTable

from tests.helpers import live_paths, log_actions
from tests.kill import RUNNER, kill_at

ROOT = Path(__file__).resolve().parents[2]
DATA = ["trip_id", "city", "ts", "fare", "distance_km", "driver"]


def _content(table: Path) -> pd.DataFrame:
    frame = DeltaTable(str(table)).to_pyarrow_table().to_pandas()
    return frame[DATA].sort_values("trip_id").reset_index(drop=True)


def _runner(work: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RUNNER, *args], cwd=work, capture_output=True, text=True, timeout=300)


def _orphans(table: Path) -> set[str]:
    on_disk = {str(p.relative_to(table)) for p in table.rglob("*.parquet")}
    return on_disk - live_paths(table)


@pytest.mark.e2e
@pytest.mark.slow
def test_sigkill_at_every_point_leaves_a_usable_table(tmp_path, monkeypatch):
    shutil.copytree(
        ROOT / "pipelines", tmp_path / "pipelines", ignore=shutil.ignore_patterns("warehouse")
    )
    # file groups of 1 KiB: the corrections' rewrite of a bucket splits it into groups
    _edit_specs(tmp_path, lambda target: target["index"].update(file_group_bytes=1024))
    # a class-data archive of its own: the first run writes it, the killed ones map it
    cds = tmp_path / "cds"
    monkeypatch.setenv("RUNNER_CDS_CACHE", str(cds))
    monkeypatch.delenv("RUNNER_JAVA_CDS", raising=False)
    first = _runner(tmp_path, "pipelines/quickstart.yaml")
    assert first.returncode == 0, first.stderr
    assert "java_class_archive_written" in first.stderr
    # the driver's archive and Spark's launcher's alone: no lock or partial dump left
    archives = sorted(cds.iterdir())
    launcher, archive = archives
    assert launcher.name.startswith("launcher-") and archive.name.startswith("spark-")
    assert {a.suffix for a in archives} == {".jsa"} and archive.stat().st_size > 10 * 2**20
    table = tmp_path / "pipelines" / "warehouse" / "trips"
    before = _content(table)
    corrections = "pipelines/quickstart_corrections.yaml"

    for point in ("keyed", "after_bucket_file", "after_group_split", "before_commit"):
        kill_at(tmp_path, point, corrections)
        assert DeltaTable(str(table)).version() == 1, point
        pd.testing.assert_frame_equal(_content(table), before)
        assert _runner(tmp_path, "inspect", str(table)).returncode == 0

    # killed during an expansion, or a split of one bucket, before its commit: the old
    # layout, unchanged
    quickstart = "pipelines/quickstart.yaml"
    kill_at(tmp_path, "after_bucket_file", "expand", quickstart, "--buckets", "32")
    bucket = _a_bucket(table)
    kill_at(tmp_path, "after_bucket_file", "expand", quickstart, "--bucket", bucket)
    assert DeltaTable(str(table)).version() == 1
    pd.testing.assert_frame_equal(_content(table), before)
    configuration = DeltaTable(str(table)).metadata().configuration
    assert configuration["runner.index.buckets"] == "16"
    assert "runner.index.buckets.splits" not in configuration

    # killed right after its commit: the new version is whole
    kill_at(tmp_path, "after_commit", corrections)
    assert DeltaTable(str(table)).version() == 2
    after = _content(table)
    assert len(after) == len(before)  # 1 insert, 1 delete
    assert not after.equals(before)

    # the next run completes, and the clean removes exactly what no version references
    rerun = _runner(tmp_path, corrections)
    assert rerun.returncode == 0, rerun.stderr
    pd.testing.assert_frame_equal(_content(table), after)
    referenced = _files_of_versions(table)
    killed_runs_files = _orphans(table) - referenced
    assert killed_runs_files, "the killed runs left files behind (invisible to readers)"
    planned = _runner(
        tmp_path, "clean", "pipelines/quickstart.yaml", "--min-age-hours", "0", "--dry-run"
    )
    assert planned.returncode == 0, planned.stderr
    assert "would remove" in planned.stdout
    assert _orphans(table) - referenced == killed_runs_files, "a dry run removes nothing"
    cleaned = _runner(tmp_path, "clean", "pipelines/quickstart.yaml", "--min-age-hours", "0")
    assert cleaned.returncode == 0, cleaned.stderr
    assert not _orphans(table) & killed_runs_files
    assert _orphans(table) <= referenced  # what older versions' readers need stays
    pd.testing.assert_frame_equal(_content(table), after)

    # the run history: each killed writer recorded by the next process, never as committed
    shown = _runner(tmp_path, "history", "pipelines/quickstart.yaml", "--json", "-n", "50")
    assert shown.returncode == 0, shown.stderr
    records = [json.loads(line) for line in shown.stdout.splitlines()][::-1]
    assert [(r["pipeline"], r["kind"], r["outcome"], r["version"]) for r in records] == [
        ("trips", "run", "committed", 1),
        *[("trips-corrections", "run", "interrupted", None)] * 4,
        *[("trips", "expansion", "interrupted", None)] * 2,
        ("trips-corrections", "run", "interrupted", 2),  # killed after its commit
        ("trips-corrections", "run", "nothing_to_do", None),
        ("trips", "clean", "done", None),
    ]
    assert "killed after its commit" in records[7]["error_message"]
    assert sorted(cds.iterdir()) == archives  # mapped by the later runs, never written again
    failed = _runner(tmp_path, "history", "pipelines/quickstart.yaml", "--failed")
    assert failed.stdout.count("interrupted") == 7, failed.stdout


def _edit_specs(work: Path, edit) -> None:
    """Apply `edit` to the target of both quickstart specs under work/pipelines."""
    for name in ("quickstart.yaml", "quickstart_corrections.yaml"):
        spec = work / "pipelines" / name
        data = yaml.safe_load(spec.read_text())
        edit(data["target"])
        spec.write_text(yaml.safe_dump(data))


def _a_bucket(table: Path) -> str:
    """PARTITION/BUCKET of the table's largest bucket, as `runner expand --bucket` takes it."""
    sizes: dict[str, int] = {}
    import pyarrow as pa

    for add in pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist():
        partition, name = add["path"].rsplit("/", 1)
        key = f"{partition}/{int(name[:8])}"
        sizes[key] = sizes.get(key, 0) + add["size_bytes"]
    return max(sizes, key=sizes.__getitem__)


def _files_of_versions(table: Path) -> set[str]:
    """Every file some version of the table references (all are within retain_commits)."""
    latest = DeltaTable(str(table)).version()
    return {p for v in range(latest + 1) for p in live_paths(table, version=v)}


@pytest.mark.e2e
@pytest.mark.slow
def test_sigkill_during_a_merge_on_read_upsert_leaves_the_table_as_it_was(tmp_path):
    """Killed after its deletion vectors are written, before its commit, or with its log
    entry written but not published: the table stays as it was, the next run completes,
    and clean removes the killed runs' data and deletion vector files."""
    shutil.copytree(
        ROOT / "pipelines", tmp_path / "pipelines", ignore=shutil.ignore_patterns("warehouse")
    )
    _edit_specs(tmp_path, lambda target: target.update(table_type="MERGE_ON_READ"))
    assert _runner(tmp_path, "pipelines/quickstart.yaml").returncode == 0
    table = tmp_path / "pipelines" / "warehouse" / "trips"
    before = _scanned(table)
    version = DeltaTable(str(table)).version()
    corrections = "pipelines/quickstart_corrections.yaml"
    for point in ("after_deletion_vector", "before_commit", "log_entry_written"):
        kill_at(tmp_path, point, corrections)
        assert DeltaTable(str(table)).version() == version, point
        pd.testing.assert_frame_equal(_scanned(table), before)
    left = set(table.rglob("deletion_vector_*.bin"))
    assert left, "the killed runs left deletion vector files behind (invisible to readers)"

    rerun = _runner(tmp_path, corrections)
    assert rerun.returncode == 0, rerun.stderr
    assert "got deletion vectors" in rerun.stdout
    after = _scanned(table)
    assert len(after) == len(before) and not after.equals(before)
    cleaned = _runner(tmp_path, "clean", "pipelines/quickstart.yaml", "--min-age-hours", "0")
    assert cleaned.returncode == 0, cleaned.stderr
    live_dvs = set(table.rglob("deletion_vector_*.bin"))
    assert live_dvs and not live_dvs & left  # the killed runs' went, the live ones stay
    pd.testing.assert_frame_equal(_scanned(table), after)


def _scanned(table: Path) -> pd.DataFrame:
    """The rows through delta-rs' scan(), which honours deletion vectors."""
    import pyarrow as pa

    frame = pa.table(DeltaTable(str(table)).scan().read_all()).to_pandas()
    return frame[DATA].sort_values("trip_id").reset_index(drop=True)


@pytest.mark.e2e
@pytest.mark.slow
def test_sigkill_after_change_data_files_leaves_none_referenced(tmp_path):
    """A table with a change data feed, killed after a bucket's change data file is
    written and before the commit: no version names it, the next run records the
    corrections' changes once, and clean removes the killed run's change data."""
    shutil.copytree(
        ROOT / "pipelines", tmp_path / "pipelines", ignore=shutil.ignore_patterns("warehouse")
    )
    for name in ("quickstart.yaml", "quickstart_corrections.yaml"):
        spec = tmp_path / "pipelines" / name
        data = yaml.safe_load(spec.read_text())
        data["target"]["change_data_feed"] = True
        spec.write_text(yaml.safe_dump(data))
    assert _runner(tmp_path, "pipelines/quickstart.yaml").returncode == 0
    table = tmp_path / "pipelines" / "warehouse" / "trips"
    corrections = "pipelines/quickstart_corrections.yaml"
    for point in ("after_change_file", "before_commit"):
        kill_at(tmp_path, point, corrections)
        assert DeltaTable(str(table)).version() == 1, point
    left = set((table / "_change_data").rglob("*.parquet"))
    assert left, "the killed runs left change data files behind"

    rerun = _runner(tmp_path, corrections)
    assert rerun.returncode == 0, rerun.stderr
    import pyarrow as pa

    changes = pa.table(DeltaTable(str(table)).load_cdf(starting_version=2).read_all())
    kinds = sorted(str(k) for k in changes.column("_change_type").to_pylist())
    assert kinds == ["delete", "insert"] + ["update_postimage"] * 3 + ["update_preimage"] * 3
    cleaned = _runner(tmp_path, "clean", "pipelines/quickstart.yaml", "--min-age-hours", "0")
    assert cleaned.returncode == 0, cleaned.stderr
    kept = set((table / "_change_data").rglob("*.parquet"))
    assert kept and not kept & left  # the killed runs' went, the committed ones stay
    assert pa.table(DeltaTable(str(table)).load_cdf(starting_version=2).read_all()).num_rows == 8

    # the corrections were a bad batch: a restore killed at each of its points leaves the
    # table as it was; then `runner restore` as a user runs it sets version 1 back
    v1 = _content_at(table, 1)
    now = _content(table)
    for point in ("after_change_file", "before_commit", "log_entry_written"):
        kill_at(tmp_path, point, "restore", "pipelines/quickstart.yaml", "--to", "1")
        assert DeltaTable(str(table)).version() == 2, point
        pd.testing.assert_frame_equal(_content(table), now)
    refused = _runner(tmp_path, "restore", "pipelines/quickstart.yaml", "--to", "9")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].startswith("error: --to 9:")
    planned = _runner(tmp_path, "restore", "pipelines/quickstart.yaml", "--to", "1", "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert "would restore version 1 (now version 2)" in planned.stdout
    assert DeltaTable(str(table)).version() == 2
    done = _runner(tmp_path, "restore", "pipelines/quickstart.yaml", "--to", "1")
    assert done.returncode == 0, done.stderr
    assert "restored version 1 as version 3" in done.stdout
    assert "change feed  5 change data file(s)" in done.stdout
    pd.testing.assert_frame_equal(_content(table), v1)
    # its undo in the feed: what version 2 inserted is deleted and the other way round
    undo = pa.table(DeltaTable(str(table)).load_cdf(starting_version=3).read_all())
    assert sorted(str(k) for k in undo.column("_change_type").to_pylist()) == kinds
    referenced = {a["cdc"]["path"] for a in log_actions(table, 3) if "cdc" in a}
    on_disk = {str(p.relative_to(table)) for p in (table / "_change_data").rglob("*.parquet")}
    committed = {str(p.relative_to(table)) for p in kept}
    # the killed restores' (none referenced): 1 before the kill after the first, 5 each
    assert len(on_disk - referenced - committed) == 1 + 5 + 5
    shown = _runner(tmp_path, "history", "pipelines/quickstart.yaml", "--json", "-n", "50")
    records = [json.loads(line) for line in shown.stdout.splitlines()][::-1]
    assert [(r["kind"], r["outcome"]) for r in records if r["kind"] == "restore"] == [
        *[("restore", "interrupted")] * 3,
        ("restore", "failed"),  # refused: --to 9
        ("restore", "committed"),
    ]


def _content_at(table: Path, version: int) -> pd.DataFrame:
    frame = DeltaTable(str(table), version=version).to_pyarrow_table().to_pandas()
    return frame[DATA].sort_values("trip_id").reset_index(drop=True)
