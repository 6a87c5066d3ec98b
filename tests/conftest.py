"""Shared fixtures. One SparkSession for the whole run (starting one costs ~7 s)."""

from __future__ import annotations

import pytest

from tests.postgres import jdbc_jar, postgres  # noqa: F401  (one server per test session)

# The folder says what a test needs: tests/spark the shared session, tests/e2e the CLI.
FOLDER_MARKERS = {"spark": "spark", "e2e": "e2e"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = item.path.parent.name
        if folder in FOLDER_MARKERS:
            item.add_marker(FOLDER_MARKERS[folder])


@pytest.fixture(scope="session")
def spark():
    from runner.session import java_problem, spark_session
    from runner.spec.model import SparkSettings

    problem = java_problem()
    if problem:
        pytest.skip(f"Spark cannot start: {problem}")
    jar = jdbc_jar()  # the PostgreSQL driver, installed when missing; starts no server
    session = spark_session(
        SparkSettings(
            master="local[2]",
            conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"},
        ),
        app_name="tests",
        console_progress=False,
        jars=[jar] if jar else [],
    )
    yield session
    session.stop()
