"""The local JVM's output, passed on through this process.

The driver JVM started inside `relayed_java_output` (and the Python workers it starts later)
write their stdout and stderr into pipes, and threads of this process pass what comes on to
its own stdout and stderr, for two reasons:

- Spark's launcher starts every driver JVM with `--add-modules=jdk.incubator.vector`
  (org.apache.spark.launcher.JavaModuleOptions), and Java then prints `WARNING: Using
  incubator modules: jdk.incubator.vector` on stderr, which no Java option turns off: the
  stderr relay drops that line.
- A JVM that inherited this process's stdout and stderr holds them open until it has torn
  down (Spark's shutdown hooks delete its temporary directories with a `rm -rf` process
  each: 0.3-0.4 s after a run's end here), and a caller that reads the runner's output, a
  scheduler or a script running `runner SPEC`, waits for that. With the pipes, the caller
  is done when the runner is, and the JVM finishes its teardown on its own.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TextIO

INCUBATOR_WARNING = b"WARNING: Using incubator modules:"


@contextlib.contextmanager
def relayed_java_output() -> Iterator[None]:
    """Child processes started in the block write their stdout and stderr through this
    process; its own stdout and stderr are as they were after the block."""
    with _relayed(sys.stdout, 1, _copy), _relayed(sys.stderr, 2, _without_warning):
        yield


@contextlib.contextmanager
def _relayed(stream: TextIO, fd: int, pass_on: Callable[[int, int], None]) -> Iterator[None]:
    stream.flush()
    own = os.dup(fd)
    read_end, write_end = os.pipe()
    os.dup2(write_end, fd)
    os.close(write_end)
    threading.Thread(
        target=pass_on, args=(read_end, own), name=f"java-output-{fd}", daemon=True
    ).start()
    try:
        yield
    finally:
        stream.flush()
        os.dup2(own, fd)


def _copy(read_end: int, out: int) -> None:
    """Copy what comes through the pipe to `out` as it comes, until every writer has closed it."""
    with contextlib.suppress(OSError):  # a closed stdout: nothing is left to show it on
        while chunk := os.read(read_end, 65536):
            os.write(out, chunk)
    os.close(read_end)
    os.close(out)


def _without_warning(read_end: int, stderr: int) -> None:
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
