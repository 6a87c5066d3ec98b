"""A real Prometheus Pushgateway on 127.0.0.1 for tests.

`pushgateway` (session fixture) starts Debian's /usr/bin/prometheus-pushgateway on a free
port, keeping its metrics in memory only (no persistence file), waits until it is ready and
yields its URL (http://127.0.0.1:PORT); it stops the process at the end of the session.
Tests share it, so each pushes under a pipeline name of its own (the grouping key).

What it needs: Debian's package `prometheus-pushgateway`, which `./dev test` installs (as
root with apt-get); the fixture installs nothing, and without it the tests skip and say so.
PUSHGATEWAY_BIN points at another binary.

Use it through tests/conftest.py (`from tests.pushgateway import pushgateway`), so that the
session has one server, not one per test module.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

BINARY = "/usr/bin/prometheus-pushgateway"
READY_SECONDS = 30


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="session")
def pushgateway() -> Iterator[str]:
    binary = os.environ.get("PUSHGATEWAY_BIN", BINARY)
    if not os.access(binary, os.X_OK):
        pytest.skip(
            f"no Prometheus Pushgateway at {binary}: `./dev test` installs it when run as root "
            "with apt-get; or `sudo apt-get install -y prometheus-pushgateway` (PUSHGATEWAY_BIN "
            "names another binary)"
        )
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_file = Path(tempfile.mkdtemp(prefix="runner-pushgateway-")) / "pushgateway.log"
    with open(log_file, "wb") as log:
        process = subprocess.Popen(
            [binary, f"--web.listen-address=127.0.0.1:{port}", "--persistence.file="],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + READY_SECONDS
        while not _ready(url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the Pushgateway did not start on {url} (exit code {process.poll()}):\n"
                    + log_file.read_text(errors="replace")[-2000:]
                )
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
