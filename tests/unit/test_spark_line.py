"""The Spark line the runner runs on: pyproject.toml pins it, the connector table knows it,
and a run on another pyspark stops before Spark starts, saying what to install."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pyspark
import pytest
from click.testing import CliRunner

from runner.cli import cli
from runner.jvm import spark_connectors
from runner.jvm.session import PYSPARK_VERSION

ROOT = Path(__file__).resolve().parents[2]


def test_the_pinned_pyspark_is_the_one_the_runner_checks_and_has_connectors_for():
    pins = re.findall(r'"pyspark==([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    constraints = re.findall(
        r"^pyspark==(\S+)$", (ROOT / "docker/constraints.txt").read_text(), re.M
    )
    assert pins == constraints == [PYSPARK_VERSION]
    assert spark_connectors.kafka().coordinates[0].endswith(f":{PYSPARK_VERSION}")


@pytest.mark.parametrize("other", ["4.0.1", "4.1.1", "4.3.0"])
def test_a_run_on_another_spark_line_stops_before_spark_starts(other, tmp_path, monkeypatch):
    shutil.copytree(ROOT / "pipelines" / "data", tmp_path / "data")
    shutil.copy(ROOT / "pipelines" / "quickstart_corrections.yaml", tmp_path / "p.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(pyspark, "__version__", other)
    result = CliRunner().invoke(cli, ["run", "p.yaml"])
    assert result.exit_code == 1, result.output
    said = str(result.exception)
    assert said.startswith(f"pyspark is {other}, and the runner runs on Spark 4.2 only")
    assert f"`pip install pyspark=={PYSPARK_VERSION}`" in said
    assert not (tmp_path / "warehouse" / "trips").exists()  # no table; the run history says why
