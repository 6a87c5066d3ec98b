"""A local run's Spark settings and its launcher's options (runner/jvm/session.py); no JVM is
started here."""

from __future__ import annotations

import os
import sys

from runner.jvm.java_cds import ClassArchive, java_binary
from runner.jvm.session import LAUNCHER_OPTIONS, _launcher_options, _local_conf


def test_spark_ui_is_off_unless_the_spec_turns_it_on():
    assert _local_conf({}, "", [])["spark.ui.enabled"] == "false"
    assert _local_conf({"spark.ui.enabled": "true"}, "", [])["spark.ui.enabled"] == "true"


def test_spark_launcher_options_hold_for_the_start_only_and_yield_to_the_users(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("RUNNER_CDS_CACHE", str(tmp_path))
    monkeypatch.delenv("RUNNER_JAVA_CDS", raising=False)
    monkeypatch.delenv("SPARK_LAUNCHER_OPTS", raising=False)
    archive = ClassArchive.for_java(java_binary() or sys.executable, jvm="launcher")
    assert archive is not None and archive.writing is not None
    with _launcher_options(archive):
        options = os.environ["SPARK_LAUNCHER_OPTS"]
        assert options.startswith(LAUNCHER_OPTIONS) and str(archive.writing) in options
    assert "SPARK_LAUNCHER_OPTS" not in os.environ
    monkeypatch.setenv("SPARK_LAUNCHER_OPTS", "-Xmx64m")  # the user's own
    with _launcher_options(archive):
        assert os.environ["SPARK_LAUNCHER_OPTS"] == "-Xmx64m"
    assert os.environ["SPARK_LAUNCHER_OPTS"] == "-Xmx64m"
