"""`${env:NAME}` values are used where needed and never shown: not in output, logs, the run
summary, the table's log, nor in an error that a library built from the resolved value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.helpers import read_table, write_batch

RUNNER = [sys.executable, "-m", "runner"]
SECRET = "s3cr3t-Value-7f1c"


def _spec(directory: Path, source_path: str) -> Path:
    spec = {
        "name": "secret",
        "spark": {"conf": {"spark.runner.test.token": "${env:RUNNER_TEST_TOKEN}"}},
        "sources": [
            {
                "name": "src",
                "format": "parquet",
                "path": source_path,
                "options": {"token": "${env:RUNNER_TEST_TOKEN}"},
            }
        ],
        "target": {
            "path": "table",
            "operation": "insert",
            "record_key": "id",
            "index": {"buckets": 2},
        },
    }
    path = directory / "secret.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _run(directory: Path, spec: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RUNNER, "--log-format", "json", "run", str(spec), "--summary-json", "summary.json"],
        cwd=directory,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _everything_written(directory: Path) -> str:
    texts = []
    for path in directory.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".yaml"):
            texts.append(path.read_text())
    return "\n".join(texts)


@pytest.mark.e2e
def test_a_secret_never_appears_in_output_logs_summary_or_table(tmp_path):
    write_batch(tmp_path, pd.DataFrame({"id": ["a", "b"], "v": [1, 2]}))

    missing = _run(tmp_path, _spec(tmp_path, "in"))
    assert missing.returncode != 0
    assert "RUNNER_TEST_TOKEN, which are not set" in missing.stderr

    done = _run(tmp_path, _spec(tmp_path, "in"), RUNNER_TEST_TOKEN=SECRET)
    assert done.returncode == 0, done.stderr
    assert len(read_table(tmp_path / "table")) == 2
    assert SECRET not in done.stdout + done.stderr
    assert SECRET not in _everything_written(tmp_path)  # summary.json, _delta_log

    # Spark's error names the path it could not find, built from the secret: shown redacted.
    failed = _run(
        tmp_path, _spec(tmp_path, "in/${env:RUNNER_TEST_TOKEN}"), RUNNER_TEST_TOKEN=SECRET
    )
    assert failed.returncode != 0
    assert SECRET not in failed.stdout + failed.stderr
    assert "in/${env:RUNNER_TEST_TOKEN}" in failed.stderr
