"""A real Prometheus Pushgateway on 127.0.0.1 for tests.

`pushgateway` (session fixture) starts Debian's /usr/bin/prometheus-pushgateway on a free
port, keeping its metrics in memory only (no persistence file), waits until it is ready and
yields its URL (http://127.0.0.1:PORT); it stops the process at the end of the session.
Tests share it, so each pushes under a pipeline name of its own (the grouping key).
`pushgateway_basic_auth` starts another behind HTTP basic auth (the Pushgateway's own
`--web.config.file` with `basic_auth_users`) and yields a `GuardedGateway`.

What it needs: Debian's package `prometheus-pushgateway`, which `./dev test` installs (as
root with apt-get); the fixture installs nothing, and without it the tests skip and say so.
PUSHGATEWAY_BIN points at another binary.

Use it through tests/conftest.py (`from tests.pushgateway import pushgateway`), so that the
session has one server, not one per test module.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

BINARY = "/usr/bin/prometheus-pushgateway"
READY_SECONDS = 30


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(url: str) -> int | None:
    """The HTTP status /-/ready answers (401 behind basic auth); None without an answer."""
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return None


# `basic_auth_users` of the web config takes bcrypt hashes. This one is of BASIC_AUTH_PASSWORD,
# made with Python's crypt: crypt(password, mksalt(METHOD_BLOWFISH, rounds=16)) (cost 4:
# fast to check, which is all a test needs).
BASIC_AUTH_USER = "ops"
BASIC_AUTH_PASSWORD = "s3cr3t-pgw-pass"
BASIC_AUTH_HASH = "$2b$04$UXb6rvwqZd78g96RHf9MNekIiVVEVRgjVJzskut8mCWWT/InMi2QK"


@dataclass(frozen=True)
class GuardedGateway:
    """A Pushgateway that answers only requests with HTTP basic auth (401 otherwise)."""

    url: str  # without credentials
    user: str
    password: str

    def get(self, path: str) -> str:
        """GET path with the credentials; the body as text."""
        pair = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        request = urllib.request.Request(
            self.url + path, headers={"Authorization": f"Basic {pair}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read().decode()


@pytest.fixture(scope="session")
def pushgateway() -> Iterator[str]:
    with _serving() as url:
        yield url


@pytest.fixture(scope="session")
def pushgateway_basic_auth(tmp_path_factory) -> Iterator[GuardedGateway]:
    """A second Pushgateway, behind basic auth (its own --web.config.file)."""
    config = tmp_path_factory.mktemp("pushgateway-auth") / "web.yml"
    config.write_text(f"basic_auth_users:\n  {BASIC_AUTH_USER}: {BASIC_AUTH_HASH}\n")
    with _serving(f"--web.config.file={config}", ready_status=401) as url:
        yield GuardedGateway(url, BASIC_AUTH_USER, BASIC_AUTH_PASSWORD)


@contextmanager
def _serving(*flags: str, ready_status: int = 200) -> Iterator[str]:
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
            [binary, f"--web.listen-address=127.0.0.1:{port}", "--persistence.file=", *flags],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + READY_SECONDS
        while _ready(url) != ready_status:
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
