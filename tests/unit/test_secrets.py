"""`${env:NAME}` references: resolved only where used, missing ones named, values redacted."""

from __future__ import annotations

import pytest

from runner.spec.secrets import MissingEnvError, env_names, resolve, scrub


def test_resolve_replaces_every_reference_inside_nested_values():
    options = {"url": "jdbc:postgresql://${env:PGHOST}/db", "users": ["${env:PGUSER}", "x"]}
    env = {"PGHOST": "127.0.0.1", "PGUSER": "ingest"}
    assert resolve(options, env) == {
        "url": "jdbc:postgresql://127.0.0.1/db",
        "users": ["ingest", "x"],
    }
    assert options["url"].endswith("${env:PGHOST}/db"), "the input is not changed"


def test_missing_variables_are_named_and_no_value_is_printed():
    env = {"PGUSER": "ingest-user-value"}
    with pytest.raises(MissingEnvError) as err:
        resolve({"user": "${env:PGUSER}", "password": "${env:PGPASSWORD}"}, env, "sources[0]")
    assert "PGPASSWORD" in str(err.value) and "sources[0]" in str(err.value)
    assert "ingest-user-value" not in str(err.value) and "PGUSER" not in str(err.value)
    assert err.value.exit_code == 2


def test_names_and_redaction():
    options = {"password": "${env:PW}", "user": "${env:PW}"}
    assert env_names(options) == ["PW"]
    resolve(options, {"PW": "s3cr3t"})
    assert scrub("login failed for s3cr3t") == "login failed for ${env:PW}"
