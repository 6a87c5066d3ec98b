"""Spark's Python worker daemon (`pyspark.daemon`), without its one piece of terminal noise.

When a job fails (a full disk, a bad record), Spark cancels its other tasks; a worker that
was being forked for one of them finds its socket closed before the task began, and the
daemon prints that EOFError's (or connection reset's) traceback on the driver's terminal,
beside the run's one-line error. Nothing was lost or done: the worker had not started.
This module is the daemon with that case ended quietly; every other error is printed as
before. `runner.jvm.session` names it in `spark.python.daemon.module` for local runs (under
spark-submit the cluster's settings stand).
"""

from __future__ import annotations

import socket

from pyspark import daemon

_fork_worker = daemon.worker


def _worker(sock: socket.socket, authenticated: bool) -> int:
    try:
        return int(_fork_worker(sock, authenticated))
    except (EOFError, ConnectionError):  # the JVM closed the socket before the task began
        return 1


if __name__ == "__main__":
    daemon.worker = _worker  # the daemon's manager looks it up here for each fork
    daemon.manager()
