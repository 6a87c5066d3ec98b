"""Writers in flight: a heartbeat for each run, expansion and compaction, so that `runner
clean` never removes a file that a writer may still commit.

As Hudi does (`.hoodie/.heartbeat/<instant>`), a writer puts `_runner/in_flight/<instant>`
under the table before its first file and writes it again every HEARTBEAT_SECONDS until its
commit or its cleanup is over; every file it writes carries its instant. Clean takes an
instant's files as in flight while its heartbeat is fresher than EXPIRES_SECONDS and, on the
machine that wrote it, its process is still there (a killed run's files need not wait).

The heartbeat says which process wrote it (host and pid namespace, pid, and the process's
start time, so that a reused pid is not taken for the writer).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow.fs as pafs
import structlog

from runner.storage.location import S3_SCHEMES, TableLocation, scheme, writing

log = structlog.get_logger(__name__)

RUNNER_DIR = "_runner"
IN_FLIGHT_DIR = f"{RUNNER_DIR}/in_flight"
HEARTBEAT_SECONDS = 30.0
EXPIRES_SECONDS = 300.0  # ten missed heartbeats: the writer is gone


@dataclass(frozen=True)
class Heartbeat:
    instant: str
    host: str  # host name and pid namespace
    pid: int
    started: str  # the process's start time, as /proc gives it ("" where it cannot)
    age_seconds: float
    what: str = ""  # run, expansion or compaction ("" when unreadable)
    run_id: str = ""  # the writer's run id, for the run history
    pipeline: str = ""

    @property
    def alive(self) -> bool:
        """The writer may still commit: a fresh heartbeat, and where its process would be
        seen from here, that process."""
        if self.age_seconds > EXPIRES_SECONDS:
            return False
        if self.host != _process_space():
            return True
        return _process_started(self.pid) == self.started if self.started else _exists(self.pid)


@contextmanager
def in_flight(location: TableLocation, instant: str, what: str) -> Iterator[None]:
    """Hold a heartbeat for `instant` under the table while the block runs (a writer's
    files, its commit and its cleanup), then remove it."""
    fs, root = location.filesystem()
    path = f"{root}/{IN_FLIGHT_DIR}/{instant}"
    body = json.dumps(
        {
            "instant": instant,
            "what": what,
            # what the logs are bound to (runner/observe): the run history names a killed
            # writer by them
            "run_id": structlog.contextvars.get_contextvars().get("run_id", ""),
            "pipeline": structlog.contextvars.get_contextvars().get("pipeline", ""),
            "host": _process_space(),
            "pid": os.getpid(),
            "started": _process_started(os.getpid()),
        }
    ).encode()
    new_root = location.is_local and not os.path.exists(root)
    with writing(location.uri):  # a read-only or full store: one line, nothing written
        _beat(fs, path, body)
    stop = threading.Event()

    def keep_beating() -> None:
        while not stop.wait(HEARTBEAT_SECONDS):
            try:
                _beat(fs, path, body)
            except Exception as exc:  # the store said no: clean keeps the files until it expires
                log.warning("heartbeat_failed", instant=instant, error=str(exc))

    beater = threading.Thread(target=keep_beating, name=f"heartbeat-{instant}", daemon=True)
    beater.start()
    try:
        yield
    finally:
        stop.set()
        beater.join()
        try:
            _delete(location, instant)
        except Exception as exc:  # it expires by itself; clean removes it then (S3: boto3's errors)
            log.warning("heartbeat_left", instant=instant, error=str(exc))
        if location.is_local:  # a failed first run leaves no directory behind
            _remove_empty(root, [IN_FLIGHT_DIR, RUNNER_DIR, *([""] if new_root else [])])


def heartbeats(location: TableLocation) -> list[Heartbeat]:
    """The heartbeats under the table, fresh or not; unreadable ones count as fresh."""
    fs, root = location.filesystem()
    selector = pafs.FileSelector(f"{root}/{IN_FLIGHT_DIR}", allow_not_found=True)
    now_ns = time.time_ns()
    beats = []
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        age = (now_ns - info.mtime_ns) / 1e9 if info.mtime_ns is not None else 0.0
        try:
            with fs.open_input_stream(info.path) as stream:
                body = json.loads(stream.read())
            beats.append(
                Heartbeat(
                    body["instant"],
                    body["host"],
                    int(body["pid"]),
                    body["started"],
                    age,
                    body.get("what", ""),
                    body.get("run_id", ""),
                    body.get("pipeline", ""),
                )
            )
        except (OSError, ValueError, KeyError, TypeError):  # being written: take it as live
            beats.append(Heartbeat(info.base_name, "", 0, "", age))
    return beats


def remove_heartbeat(location: TableLocation, instant: str) -> None:
    """Remove an expired heartbeat (a writer that was killed); one that cannot be removed
    is left for the next clean, never a reason to fail this one."""
    try:
        _delete(location, instant)
    except FileNotFoundError:
        return
    except Exception as exc:
        log.warning("heartbeat_left", instant=instant, error=str(exc))


def _delete(location: TableLocation, instant: str) -> None:
    """Delete a heartbeat. On S3 with a plain DELETE: pyarrow's delete_file puts an empty
    `_runner/in_flight/` marker object in its place, which no other writer of the table
    leaves behind."""
    if scheme(location.uri) not in S3_SCHEMES:
        fs, root = location.filesystem()
        fs.delete_file(f"{root}/{IN_FLIGHT_DIR}/{instant}")
        return
    bucket, _, prefix = location.uri.split("://", 1)[1].partition("/")
    key = "/".join(p for p in (prefix.strip("/"), IN_FLIGHT_DIR, instant) if p)
    location.s3_client().delete_object(Bucket=bucket, Key=key)


def _beat(fs: pafs.FileSystem, path: str, body: bytes) -> None:
    """Write the heartbeat; its directory is made again where another writer that ended
    removed it (empty) meanwhile."""
    for attempt in range(3):
        try:
            with fs.open_output_stream(path) as out:
                out.write(body)
            return
        except FileNotFoundError:
            if attempt == 2:
                raise
            fs.create_dir(path.rsplit("/", 1)[0], recursive=True)


def _remove_empty(root: str, directories: list[str]) -> None:
    """Remove each directory (relative to root, in order) that is empty; another writer's
    heartbeat or a file in it keeps it."""
    for directory in directories:
        try:
            os.rmdir(f"{root}/{directory}".rstrip("/"))
        except OSError:
            return


def _process_space() -> str:
    """Where a pid means one process: the host name and the pid namespace (two containers
    on the host network share a host name, not their pids)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()} {namespace}".strip()


def _process_started(pid: int) -> str:
    """The start time of process `pid` in clock ticks since boot (/proc), "" if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # the command name, in parentheses, may hold spaces: count fields after it
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
