"""The local JVM's stderr, without the warning Java prints at every start of Spark 4.2.

Spark's launcher starts every driver JVM with `--add-modules=jdk.incubator.vector`
(org.apache.spark.launcher.JavaModuleOptions), and Java then prints `WARNING: Using
incubator modules: jdk.incubator.vector` on stderr, which no Java option turns off. The JVM
started inside `without_incubator_warning` writes its stderr into a pipe instead, and a
thread passes every other line on to this process's stderr as it comes.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

INCUBATOR_WARNING = b"WARNING: Using incubator modules:"


@contextlib.contextmanager
def without_incubator_warning() -> Iterator[None]:
    """Child processes started in the block (the driver JVM, and the Python workers it starts
    later) write their stderr through the filter; this process's own stderr is as it was
    after the block."""
    sys.stderr.flush()
    stderr = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    threading.Thread(
        target=_pass_on, args=(read_end, stderr), name="java-stderr", daemon=True
    ).start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(stderr, 2)


def _pass_on(read_end: int, stderr: int) -> None:
    """Copy what comes through the pipe to stderr as it comes, but the incubator warning's
    line, until every writer has closed it. A line is held back only while it may still
    become the warning, so a progress line drawn with `\\r` (no newline) shows at once."""
    pending = b""
    with contextlib.suppress(OSError):  # a closed stderr: nothing is left to show it on
        while chunk := os.read(read_end, 65536):
            *lines, pending = (pending + chunk).split(b"\n")
            out = b"".join(line + b"\n" for line in lines if not _warning(line))
            if pending and not INCUBATOR_WARNING.startswith(pending[: len(INCUBATOR_WARNING)]):
                out, pending = out + pending, b""
            if out:
                os.write(stderr, out)
        if pending and not _warning(pending):
            os.write(stderr, pending)
    os.close(read_end)
    os.close(stderr)


def _warning(line: bytes) -> bool:
    return line.startswith(INCUBATOR_WARNING)
