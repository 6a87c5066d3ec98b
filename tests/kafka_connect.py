"""A Kafka Connect worker in standalone mode on 127.0.0.1, with Debezium's PostgreSQL connector
on its class path: the process, its jars and its REST API. tests/debezium.py makes it a pytest
fixture (its docstring says how the whole rig works).

`connect_jars()` finds the jars, or says why it cannot: Kafka Connect 4.3.0 (connect-runtime,
connect-json: the Kafka Debezium 3.6.1.Final is built against) with
io.debezium:debezium-connector-postgres:3.6.1.Final and slf4j-reload4j (the same log binding
as the broker's), from Maven Central through Maven, copied once with their runtime dependencies
into `~/.cache/runner/jars/kafka-connect-4.3.0-debezium-3.6.1.Final/` ($RUNNER_JAR_CACHE or
$XDG_CACHE_HOME move it), the way tests/kafka_server.py caches the broker's.

`running_worker(jars, bootstrap)` starts the worker in a throwaway directory (its REST API on a
free port, its source offsets in a file there, flushed every 100 ms) and yields a
`ConnectWorker`; on leaving it stops the worker and deletes the directory. The worker logs to
`connect.log` there; a worker that does not start raises `WorkerFailed` with its tail.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runner.jvm.maven import cache_root
from tests.kafka_server import JvmService, cached_jars, terminate
from tests.s3 import free_port

CONNECT_VERSION = "4.3.0"  # debezium-build-parent 3.6.1.Final's version.kafka
DEBEZIUM_VERSION = "3.6.1.Final"
ARTIFACTS = (
    f"org.apache.kafka:connect-runtime:{CONNECT_VERSION}",
    f"org.apache.kafka:connect-json:{CONNECT_VERSION}",
    f"io.debezium:debezium-connector-postgres:{DEBEZIUM_VERSION}",
    "org.slf4j:slf4j-reload4j:1.7.36",  # connect-runtime leaves the binding to the application
)
START_TIMEOUT_S = 120
JVM_OPTIONS = ("-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
WORKER = """\
bootstrap.servers={bootstrap}
listeners=http://127.0.0.1:{port}
rest.advertised.host.name=127.0.0.1
rest.advertised.port={port}
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
offset.storage.file.filename={offsets}
# Committed offsets follow the records within 100 ms: a test waits on them (tests/debezium.py).
offset.flush.interval.ms=100
# The connectors are on the class path, found through their service files: no scan of it.
plugin.discovery=service_load
"""


class WorkerFailed(RuntimeError):
    """The worker did not start, or a REST call failed; the message says why."""


# ---------------------------------------------------------------- the jars


def jar_dir() -> Path:
    return cache_root() / f"kafka-connect-{CONNECT_VERSION}-debezium-{DEBEZIUM_VERSION}"


@functools.cache
def connect_jars() -> tuple[Path | None, str | None]:
    """(jar directory, None) or (None, why the worker cannot run). Maven runs at most once."""
    what = f"Kafka Connect {CONNECT_VERSION} with Debezium {DEBEZIUM_VERSION}'s jars"
    return cached_jars(jar_dir(), ARTIFACTS, "Kafka Connect", what)


# ---------------------------------------------------------------- the worker


class ConnectWorker(JvmService):
    """One standalone worker in its own temp dir; `request` calls its REST API."""

    jvm_options = JVM_OPTIONS

    def __init__(self, jars: Path, bootstrap: str) -> None:
        super().__init__(jars, "runner-connect-", "connect.log", "worker.properties")
        self.bootstrap = bootstrap

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the worker and wait until its REST API answers."""
        for attempt in range(3):
            self.log.unlink(missing_ok=True)  # so that the check below reads this attempt's
            self.port = free_port()
            offsets = self.base / "offsets"
            self.properties.write_text(
                WORKER.format(bootstrap=self.bootstrap, port=self.port, offsets=offsets)
            )
            self.launch("org.apache.kafka.connect.cli.ConnectStandalone")
            if self._wait_until_answering():
                return
            if not self.port_taken() or attempt == 2:  # else try another port
                break
        code = self.process and self.process.returncode
        raise WorkerFailed(f"the Kafka Connect worker exited {code} while starting\n{self.tail()}")

    def _wait_until_answering(self) -> bool:
        """True once the REST API answers, False if the worker exited."""
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            with contextlib.suppress(OSError, WorkerFailed):
                self.request("GET", "/connector-plugins")
                return True
            time.sleep(0.2)
        raise WorkerFailed(
            f"the Kafka Connect worker did not answer on {self.url} within {START_TIMEOUT_S} s"
            f"\n{self.tail()}"
        )

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """A REST call: its decoded JSON answer (None when empty); WorkerFailed on an error."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as res:
                text = res.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise WorkerFailed(f"{method} {path}: HTTP {exc.code}: {detail}") from exc
        return json.loads(text) if text.strip() else None

    def stop(self) -> None:
        """SIGTERM (the tasks stop and commit their offsets; SIGKILL after 30 s)."""
        terminate(self.process)


@contextlib.contextmanager
def running_worker(jars: Path, bootstrap: str) -> Iterator[ConnectWorker]:
    """A worker started from `jars` (connect_jars()) against the broker at `bootstrap`, with no
    connectors; stopped, and its directory deleted, on leaving."""
    worker = ConnectWorker(jars, bootstrap)
    try:
        worker.start()
        yield worker
    finally:
        try:
            worker.stop()
        finally:
            shutil.rmtree(worker.base, ignore_errors=True)
