"""A Spark standalone cluster on 127.0.0.1, started from pyspark's own distribution.

One master and two workers (1 core, 1 GiB each), every one a JVM of its own with its own
work directory, so executors run in other processes than the driver, in other working
directories, and start their own Python workers. Started once per test session (about 6 s)
and stopped at its end; a test that fails names the worker logs to read.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.s3 import free_port

WORKERS = 2
START_TIMEOUT_S = 90


@dataclass(frozen=True)
class Cluster:
    master: str  # spark://127.0.0.1:PORT
    logs: Path  # master.log, worker1.log, worker2.log
    work_dirs: tuple[Path, ...]  # each worker's; executors' stderr under app-*/N/

    def executor_dirs(self) -> dict[Path, list[Path]]:
        """Per worker, the executor directories (one per application that used it)."""
        return {w: sorted(w.glob("app-*/*")) for w in self.work_dirs}

    def where_to_look(self) -> str:
        """What a failing test prints: where the cluster's processes wrote their logs."""
        stderr = [str(p) for w in self.work_dirs for p in sorted(w.glob("app-*/*/stderr"))]
        return f"cluster logs: {self.logs}/*.log; executor logs: {', '.join(stderr) or 'none'}"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def cluster_environment() -> dict[str, str]:
    """What the cluster's JVMs and the drivers that use it run with: pyspark's own
    SPARK_HOME, 127.0.0.1 only, and this interpreter for every Python worker."""
    import sys

    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as answer:
            state = json.load(answer)
    except (OSError, ValueError):  # not up, or its UI still serving a page, not the JSON yet
        return 0
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    from runner.jvm.session import java_problem

    problem = java_problem()
    if problem:
        pytest.skip(f"Spark cannot start: {problem}")
    root = tmp_path_factory.mktemp("cluster")
    logs = root / "logs"
    logs.mkdir()
    env = cluster_environment()
    spark_class = str(spark_home() / "bin" / "spark-class")
    port, ui_port = free_port(), free_port()
    master = f"spark://127.0.0.1:{port}"
    processes: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> None:
        log = open(logs / f"{name}.log", "w")  # noqa: SIM115  (closed with the process)
        processes.append(
            subprocess.Popen([spark_class, *args], env=env, stdout=log, stderr=subprocess.STDOUT)
        )

    start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
          "--port", str(port), "--webui-port", str(ui_port))  # fmt: skip
    work_dirs = []
    for i in range(1, WORKERS + 1):
        work = root / f"worker{i}"
        work.mkdir()
        work_dirs.append(work)
        start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", master,
              "--host", "127.0.0.1", "--webui-port", str(free_port()),
              "--cores", "1", "--memory", "1g", "--work-dir", str(work))  # fmt: skip
    running = Cluster(master, logs, tuple(work_dirs))
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while _alive_workers(ui_port) < WORKERS:
            dead = [p.args[1] for p in processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                pytest.fail(
                    f"the standalone cluster did not come up ({', '.join(dead) or 'timeout'}); "
                    + running.where_to_look()
                )
            time.sleep(0.5)
        yield running
    finally:
        for p in processes:
            p.terminate()
        for p in processes:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
