"""moto's S3 API on 127.0.0.1, for the tests that put tables on S3."""

from __future__ import annotations

import functools
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from runner.errors import EnvironmentProblem
from runner.jvm import s3_connector

KEY, SECRET = "testing-key", "testing-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_answering(url: str, process: subprocess.Popen, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{what} exited with {process.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"{what} did not answer on {url} within {timeout_s}s")


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto server on a free port of 127.0.0.1; its endpoint URL."""
    pytest.importorskip("moto", reason="needs moto[server] (the dev extra)")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_answering(endpoint, server, "moto_server", timeout_s=30)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)


def s3_environment(endpoint: str) -> dict[str, str]:
    """The AWS_* variables that point the runner, delta-rs and boto3 at `endpoint`."""
    return {
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }


@functools.cache
def _connector() -> tuple[tuple[str, ...], str | None]:
    """(jars, None) or ((), why not): Spark's S3 connector, fetched once into the jar cache
    (runner fetch-jars does the same). Runs Maven at most once per test session."""
    try:
        return tuple(s3_connector.fetch()), None
    except EnvironmentProblem as exc:
        return (), str(exc)


def connector_jars() -> list[str]:
    """The connector's jars for the shared session ([] when they cannot be had)."""
    return list(_connector()[0])


@pytest.fixture
def needs_s3_connector(spark):
    """The shared session, able to read S3 (file sources, expansion); skips saying why not."""
    problem = _connector()[1]
    if problem:
        pytest.skip(f"Spark's S3 connector unavailable: {problem}")
    return spark
