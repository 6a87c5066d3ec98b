"""The URLs the runner calls: references resolved after the URL is split, credentials taken
out of it (runner/spec/urls.py)."""

from __future__ import annotations

import base64

import pytest

from runner.spec.secrets import MissingEnvError, scrub
from runner.spec.urls import url_endpoint

ENV = {"PW": "p@ss/w:rd#1", "HOST": "pgw.internal", "USER": "ops"}


@pytest.mark.parametrize(
    ("url", "expected", "user", "password"),
    [
        ("http://ops:${env:PW}@${env:HOST}:9091", "http://pgw.internal:9091", "ops", ENV["PW"]),
        ("http://${env:USER}:${env:PW}@h:1/x?y=1", "http://h:1/x?y=1", "ops", ENV["PW"]),
        ("https://a%40b:c%3Ad@h/", "https://h/", "a@b", "c:d"),
        ("http://token@h", "http://h", "token", None),
        ("jdbc:mysql://u:${env:PW}@h:3306/db", "jdbc:mysql://h:3306/db", "u", ENV["PW"]),
        ("jdbc:postgresql://h/db?user=u&password=${env:PW}", None, None, None),
        ("http://h/a@b", "http://h/a@b", None, None),
    ],
)
def test_credentials_come_out_of_the_url(url, expected, user, password):
    endpoint = url_endpoint(url, "here", ENV)
    if expected is None:
        expected = url.replace("${env:PW}", ENV["PW"])
    assert (endpoint.url, endpoint.user, endpoint.password) == (expected, user, password)
    if password:  # taken out of the URL, and out of the repr
        assert ENV["PW"] not in repr(endpoint)


def test_the_header_and_the_messages():
    endpoint = url_endpoint("http://ops:${env:PW}@h:9091", "metrics.pushgateway", ENV)
    pair = base64.b64decode(endpoint.authorization.removeprefix("Basic ")).decode()
    assert pair == f"ops:{ENV['PW']}"
    assert scrub(f"push to {endpoint.url} failed: {ENV['PW']}") == (
        "push to http://h:9091 failed: ${env:PW}"
    )
    assert url_endpoint("http://h", "here", ENV).authorization is None


def test_an_unset_variable_is_named_with_the_setting():
    with pytest.raises(MissingEnvError, match=r"metrics\.pushgateway references .* PGW_PW"):
        url_endpoint("http://ops:${env:PGW_PW}@h", "metrics.pushgateway", {})
