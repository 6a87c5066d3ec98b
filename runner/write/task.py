"""Who is writing: the Spark task (or driver thread) that runs a writer job, and the names it
gives what it writes.

Every file a task writes carries Hudi's write token, <partition>-<stage>-<attempt>, so a
retried task writes other files; every row it writes gets a `_commit_seqno` numbered within
the task. A writer job run on a driver thread (runner/write/driver_merge.py) is given its
token by `driver_task`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs


def task_token() -> tuple[int, str]:
    """The Spark task's partition and Hudi's write token, <partition>-<stage>-<attempt>,
    which names every file the task writes (a retried task writes other files). A job run
    on the driver (runner/write/driver_merge.py) gets its worker's from `driver_task`."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        given: tuple[int, str] | None = getattr(_driver_task, "token", None)
        return given or (0, "0-0-0")
    return ctx.partitionId(), f"{ctx.partitionId()}-{ctx.stageId()}-{ctx.attemptNumber()}"


_driver_task = threading.local()


@contextmanager
def driver_task(partition: int, token: str) -> Iterator[None]:
    """Run an executor job on this driver thread as task `partition` with write `token`."""
    _driver_task.token = (partition, token)
    try:
        yield
    finally:
        _driver_task.token = None


@dataclass
class SeqNo:
    """Hudi-style `_commit_seqno`: <instant>_<task partition>_<row counter>."""

    instant: str
    partition: int
    next: int = 0

    def take(self, n: int) -> pa.Array:
        start, self.next = self.next, self.next + n
        counter = pc.cast(pa.array(np.arange(start, start + n, dtype=np.int64)), pa.string())
        return pc.binary_join_element_wise(f"{self.instant}_{self.partition}_", counter, "")


@dataclass(frozen=True)
class WriteTask:
    """A task's bucket writes: the table's file system and root, the files' schema, the
    commit's instant, the task's write token and row numbering, and the driver's
    RUNNER_FAULT (crash tests)."""

    fs: pafs.FileSystem
    root: str
    file_schema: pa.Schema
    instant: str
    token: str
    seqno: SeqNo
    fault: str = ""
    key_filters: bool = False  # its data files carry them (runner/storage/key_filter.py)
