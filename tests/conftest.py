"""Shared fixtures. One SparkSession for the whole run (starting one costs ~7 s)."""

from __future__ import annotations

import pytest

from tests.postgres import jdbc_jar, postgres  # noqa: F401  (one server per test session)


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
