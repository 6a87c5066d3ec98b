"""Which local runs start their JVM with the quick JIT only (runner/jvm/session.py jit_option):
those known, before Spark starts, to read a small input; no JVM is started here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runner.jvm.session import QUICK_JIT, jit_option
from runner.pipeline import inputs
from runner.pipeline.inputs import small_input
from runner.sources.checkpoint import starting_points
from runner.sources.listing import local_bytes
from runner.sources.plan import plan_sources
from runner.spec.loader import load_spec

QUICKSTART = Path(__file__).resolve().parents[2] / "pipelines"


@pytest.fixture
def corrections(tmp_path):
    """The bundled corrections pipeline (6 rows of JSON) in a directory of its own."""
    shutil.copytree(QUICKSTART / "data", tmp_path / "data")
    spec = tmp_path / "p.yaml"
    shutil.copy(QUICKSTART / "quickstart_corrections.yaml", spec)
    return spec


def _small(spec_path: Path, **target_yaml: str) -> bool:
    text = spec_path.read_text()
    for key, value in target_yaml.items():
        text = text.replace("target:\n", f"target:\n  {key}: {value}\n", 1)
    spec_path.write_text(text)
    spec = load_spec(spec_path)
    return small_input(spec.target, plan_sources(spec, starting_points(spec, None)))


def test_a_run_of_a_few_local_rows_is_small(corrections):
    assert _small(corrections)


def test_an_input_past_the_limit_is_not(corrections, monkeypatch):
    size = local_bytes([str(corrections.parent / "data" / "trip_corrections")], 2**30)
    assert size is not None and size > 0
    monkeypatch.setattr(inputs, "SMALL_INPUT_BYTES", size - 1)
    assert not _small(corrections)


def test_a_merge_in_a_spark_job_is_not(corrections):
    assert not _small(corrections, driver_merge="{max_rows: 0}")


def test_input_the_driver_cannot_measure_is_not_small(tmp_path):
    assert local_bytes(["s3://bucket/data"], 2**20) is None
    (tmp_path / "a").write_bytes(b"x" * 10)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "c").write_bytes(b"x" * 10)
    assert local_bytes([str(tmp_path)], 20) == 20
    assert local_bytes([str(tmp_path)], 19) is None
    assert local_bytes([str(tmp_path / "a")], 19) == 10


@pytest.mark.parametrize(
    ("setting", "small", "quick"),
    [("auto", True, True), ("auto", False, False), ("full", True, False), ("quick", False, True)],
)
def test_the_environment_overrides_the_choice(monkeypatch, setting, small, quick):
    monkeypatch.setenv("RUNNER_JAVA_JIT", setting)
    assert jit_option(small) == (QUICK_JIT if quick else "")
