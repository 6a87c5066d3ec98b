"""Shared fixtures. One SparkSession for the whole run (starting one costs ~7 s)."""

from __future__ import annotations

import os

import pytest

from tests.debezium import debezium  # noqa: F401  (one pipeline per test session)
from tests.delta_spark import SPARK_CONF as DELTA_SPARK_CONF
from tests.delta_spark import delta_jars, needs_delta_spark  # noqa: F401
from tests.kafka import kafka_broker  # noqa: F401  (one broker per test session)
from tests.postgres import jdbc_jar, postgres  # noqa: F401  (one server per test session)
from tests.pushgateway import pushgateway, pushgateway_basic_auth  # noqa: F401  (one server each per session)
from tests.s3 import connector_jars, needs_s3_connector  # noqa: F401
from tests.schema_registry import schema_registry  # noqa: F401

# The folder says what a test needs: tests/spark the shared session, tests/e2e the CLI,
# tests/cluster a standalone Spark cluster (and the CLI).
FOLDER_MARKERS = {"spark": "spark", "e2e": "e2e", "cluster": "cluster"}


# Under `./dev test` pytest-xdist runs two workers: the tests that use the shared session
# all go to one of them (one session per run), while the other runs the CLI, cluster and
# image tests, which mostly wait on the processes they start.
SESSION_GROUP = "spark-session"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    grouped = config.pluginmanager.has_plugin("xdist")  # not under `-p no:xdist`
    for item in items:
        folder = item.path.parent.name
        if folder in FOLDER_MARKERS:
            item.add_marker(FOLDER_MARKERS[folder])
        if grouped and "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(SESSION_GROUP))


@pytest.fixture(autouse=True)
def resolved_values_forgotten(monkeypatch):
    """Each test starts with no resolved `${env:NAME}` value registered for scrubbing, as a
    new `runner` process does: a value another test resolved (a user name like "runner")
    would otherwise be taken out of this test's messages."""
    from runner.spec import secrets

    monkeypatch.setattr(secrets, "_RESOLVED", {})


def spark_connector_jars() -> list[str]:
    """Spark's Kafka and Avro connectors (runner/jvm/spark_connectors.py), fetched once into the
    jar cache; [] when they cannot be (the Kafka tests then skip with the broker)."""
    from runner.errors import EnvironmentProblem
    from runner.jvm.spark_connectors import avro, kafka

    try:
        return [*kafka().jars("tests", False), *avro().jars("tests", False)]
    except EnvironmentProblem:
        return []


@pytest.fixture(scope="session")
def spark():
    from runner.jvm.session import java_problem, spark_session
    from runner.spec.model import SparkSettings

    problem = java_problem()
    if problem:
        pytest.skip(f"Spark cannot start: {problem}")
    jar = jdbc_jar()  # the PostgreSQL driver, installed when missing; starts no server
    # delta-spark, the reference Delta reader (fetched once into a cache, [] when it cannot
    # be): its session extension is static, so it joins here or never (tests/delta_spark.py)
    delta = delta_jars()
    s3 = connector_jars()  # Spark's S3 connector: S3 sources, expansion of S3 tables
    kafka = spark_connector_jars()  # Spark's Kafka and Avro connectors: Kafka sources
    conf = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"}
    # the session uses Java's class-data archive that the first `runner` process of the
    # e2e tests writes, but never writes one: its exit would wait for the dump
    was = os.environ.get("RUNNER_JAVA_CDS")
    os.environ["RUNNER_JAVA_CDS"] = "use" if was != "0" else "0"
    try:
        session = spark_session(
            SparkSettings(master="local[2]", conf={**conf, **(DELTA_SPARK_CONF if delta else {})}),
            app_name="tests",
            jars=([jar] if jar else []) + delta + s3 + kafka,
        )
    finally:
        if was is None:
            del os.environ["RUNNER_JAVA_CDS"]
        else:
            os.environ["RUNNER_JAVA_CDS"] = was
    yield session
    session.stop()
