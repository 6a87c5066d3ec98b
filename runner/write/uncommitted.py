"""After a failed write: the files of a run that never committed are removed.

They are invisible to every reader anyway (only the Delta log makes a file part of the
table); removing them keeps the table directory clean. Every data file and change data file
(`_change_data/...`) a run writes, from any task attempt, ends with _<instant>.parquet, and
its deletion vector files lie under _deletion_vectors/<instant>/, so the run's instant finds
them all.

Whether the commit went through is asked of the log: a live file of the instant, or a
version since the run began whose commitInfo names the instant (a commit that only removes
files and writes change data files leaves no live file of its own).
"""

from __future__ import annotations

import datetime as dt
import time

import pyarrow.fs as pafs
import structlog
from pyspark.sql import SparkSession

from runner.delta.deletion_vectors import DV_DIR
from runner.delta.log_replay import read_commit
from runner.delta.snapshot import open_table
from runner.storage.location import TableLocation

log = structlog.get_logger(__name__)

# How far before the run's instant a commit's own timestamp may lie (clocks set back).
CLOCK_SLACK_MS = 10 * 60 * 1000


def remove_uncommitted(spark: SparkSession | None, table: TableLocation, instant: str) -> None:
    """Wait for the failed job's other tasks (if a Spark job wrote), then remove every file
    of `instant`, unless the commit went through (a failure after it must not touch
    committed files)."""
    if spark is not None:
        _wait_for_running_tasks(spark)
    if _committed(table, instant):
        log.warning("failed_after_commit", instant=instant)
        return
    _remove_files_of(table, instant)


def remove_files(table: TableLocation, paths: list[str]) -> None:
    """Remove files of this run that will never be committed (table-relative paths)."""
    fs, root = table.filesystem()
    for path in paths:
        try:
            fs.delete_file(f"{root}/{path}")
        except OSError:
            log.warning("uncommitted_file_left", path=path)


def _committed(table: TableLocation, instant: str) -> bool:
    snapshot = open_table(table)
    if snapshot is None:
        return False
    suffix, dv_dir = f"_{instant}.parquet", f"{DV_DIR}/{instant}/"
    return any(
        f.path.endswith(suffix)
        or (f.deletion_vector and (f.deletion_vector.relative_path or "").startswith(dv_dir))
        for f in snapshot.files()
    ) or _named_by_a_commit(table, snapshot.version, instant)


def _named_by_a_commit(table: TableLocation, latest: int, instant: str) -> bool:
    """A version from `latest` back to the first one committed before the run began names
    `instant` in its commitInfo (every writer of the runner records it there). A version
    the log no longer holds counts as such: its files are left for `runner clean`."""
    began = dt.datetime.strptime(instant, "%Y%m%d%H%M%S%f").replace(tzinfo=dt.UTC)
    before_ms = int(began.timestamp() * 1000) - CLOCK_SLACK_MS
    for version in range(latest, -1, -1):
        entry = read_commit(table, version)
        if entry is None:
            return True
        info = entry.commit_info
        named = info.get("runner")
        if isinstance(named, dict) and named.get("instant") == instant:
            return True
        stamp = info.get("timestamp")
        if isinstance(stamp, int) and stamp < before_ms:
            return False
    return False


def _wait_for_running_tasks(spark: SparkSession, timeout_s: float = 60.0) -> None:
    """A failed job's other tasks may still be writing files: let them end before cleaning."""
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sum(e.numRunningTasks() for e in tracker.getExecutorInfos()) == 0:
            return
        time.sleep(0.2)
    log.warning("tasks_still_running", waited_s=timeout_s)


def _remove_files_of(table: TableLocation, instant: str) -> None:
    """Best effort: a failed run's files are invisible anyway; don't leave them around.

    Every data file and change data file of a run, from any task attempt, ends with
    _<instant>.parquet; its deletion vector files lie in _deletion_vectors/<instant>/.
    """
    fs, root = table.filesystem()
    try:
        listing = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except OSError:
        return
    removed = 0
    emptied: set[str] = set()
    for info in listing:
        ours = info.path.endswith(f"_{instant}.parquet") or f"/{DV_DIR}/{instant}/" in info.path
        if info.type == pafs.FileType.File and ours:
            try:
                fs.delete_file(info.path)
                removed += 1
                emptied.add(info.path.rsplit("/", 1)[0])
            except OSError:
                log.warning("uncommitted_file_left", path=info.path)
    if fs.type_name == "local":
        _remove_empty_directories(fs, root, emptied)
    log.info("uncommitted_files_removed", count=removed)


def _remove_empty_directories(fs: pafs.FileSystem, root: str, emptied: set[str]) -> None:
    """The partition directories the run made for its files (its change data files' under
    `_change_data/` too), and the table directory a new table's first run made, once
    nothing is left in them."""
    candidates = set()
    for directory in emptied:
        while len(directory) >= len(root.rstrip("/")):
            candidates.add(directory)
            directory = directory.rsplit("/", 1)[0]
    for directory in sorted(candidates, key=len, reverse=True):  # deepest first
        try:
            if not fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True)):
                fs.delete_dir(directory)
        except OSError:
            continue
