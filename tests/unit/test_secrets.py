"""`${env:NAME}` references: resolved where needed, missing ones named, values redacted;
passwords written in URLs hidden."""

from __future__ import annotations

import pytest

from runner.spec.secrets import (
    MissingEnvError,
    env_names,
    has_url_password,
    only_references,
    resolve,
    scrub,
    scrub_values,
)


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


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "jdbc:postgresql://h/db?user=u&password=hunter2 refused",
            "jdbc:postgresql://h/db?user=u&password=*** refused",
        ),
        (
            "jdbc:postgresql://h/db?PassWord=hunter2&ssl=true",
            "jdbc:postgresql://h/db?PassWord=***&ssl=true",
        ),
        ("jdbc:sqlserver://h;user=u;pwd=hunter2;db=x", "jdbc:sqlserver://h;user=u;pwd=***;db=x"),
        ("url='jdbc:x://h/d?passwd=hunter2'", "url='jdbc:x://h/d?passwd=***'"),
        ("jdbc:mysql://u:hunter2@h:3306/db", "jdbc:mysql://u:***@h:3306/db"),
        ("jdbc:mysql://u:p@ss@h/db (see a@b)", "jdbc:mysql://u:***@h/db (see a@b)"),
        # references stay, and so do URLs without a password
        (
            "(jdbc jdbc:x://h/d?password=${env:PW}): no",
            "(jdbc jdbc:x://h/d?password=${env:PW}): no",
        ),
        ("jdbc:mysql://u:${env:PW}@h/db", "jdbc:mysql://u:${env:PW}@h/db"),
        (
            "http://host:8080/a@b and s3://bucket/k:v@x",
            "http://host:8080/a@b and s3://bucket/k:v@x",
        ),
        ("?password=&user=u", "?password=&user=u"),
    ],
)
def test_passwords_written_in_urls_are_hidden_in_any_output(text, shown):
    assert scrub(text) == shown
    assert has_url_password(text) == (shown != text)


def test_a_resolved_password_in_a_url_shows_as_its_reference():
    resolve("${env:PW_URL}", {"PW_URL": "jdbc:x://h/d?password=hunter2"})
    resolve("${env:SHORT}", {"SHORT": "pw"})  # too short to be registered for scrubbing
    assert scrub("no jdbc:x://h/d?password=hunter2") == "no ${env:PW_URL}"
    assert scrub("no jdbc:x://h/d?password=pw") == "no jdbc:x://h/d?password=***"


def test_summaries_keep_their_numbers_when_scrubbed():
    resolve("${env:PARTS}/${env:WH}", {"PARTS": "7345", "WH": "/lake/wh-7345"})
    summary = {
        "table": "/lake/wh-7345/t",
        "rows_read": 17345,
        "sources": {"s": ["/lake/wh-7345/in"]},
    }
    assert scrub_values(summary) == {
        "table": "${env:WH}/t",
        "rows_read": 17345,
        "sources": {"s": ["${env:WH}/in"]},
    }


def test_only_references():
    assert only_references("${env:A}") and only_references("${env:A}${env:B}")
    assert only_references("")  # no password at all
    assert not only_references("x${env:A}") and not only_references("hunter2")


def test_a_sql_server_url_with_its_password_referenced_is_not_taken_for_a_password():
    url = "jdbc:sqlserver://h:1433;databaseName=db;user=me@corp;password=${env:PW}"
    assert not has_url_password(url) and scrub(url) == url
    assert scrub("jdbc:postgresql://h/db?password= s3cret&x=1") == (
        "jdbc:postgresql://h/db?password= ***&x=1"
    )
