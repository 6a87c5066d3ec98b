"""Passwords written out in a spec: in a password field or inside a URL.

A spec is kept in git and in a ConfigMap, and its values show in logs and errors, so a
password belongs in an environment variable, referenced as `${env:NAME}`.
"""

from __future__ import annotations

from typing import Any

from runner.errors import SpecProblem
from runner.spec.located import Located, Path_, dotted, strings_with_paths
from runner.spec.secrets import has_url_password, only_references

_PASSWORD_KEYS = ("password", "passwd", "pwd")


def _secret_setting(name: str) -> bool:
    """A setting whose value is a password: `password`, or a Kafka client's
    `ssl.key.password` or `sasl.jaas.config` (a JAAS line holds the password)."""
    name = name.lower()
    return name.rsplit(".", 1)[-1] in _PASSWORD_KEYS or name == "sasl.jaas.config"


def password_problems(doc: Located, file: str) -> list[SpecProblem]:
    """Passwords written out in the spec, in a password field or inside a URL: a spec is
    kept in git and in a ConfigMap, and its values show in logs and errors."""
    data = doc.data
    found: list[tuple[Path_, str]] = []
    for i, src in enumerate(data["sources"]):
        secrets: list[tuple[Path_, Any]] = [
            (("jdbc", "password"), src.get("jdbc", {}).get("password"))
        ]
        secrets += [(("options", k), v) for k, v in src.get("options", {}).items()]
        kafka_options = src.get("kafka", {}).get("options", {})
        secrets += [(("kafka", "options", k), v) for k, v in kafka_options.items()]
        for field, value in secrets:
            if not _secret_setting(str(field[-1])) or value is None:
                continue
            if not isinstance(value, str) or not only_references(value):
                found.append(
                    (
                        ("sources", i, *field),
                        "a password must not be written in the spec; export it as an "
                        "environment variable and write ${env:NAME} here (on Kubernetes: "
                        "key NAME of the Secret kubernetes.secret)",
                    )
                )
    for where, text in strings_with_paths(data, ()):
        if has_url_password(text):
            found.append(
                (
                    where,
                    "the URL holds a password written out; export it as an environment "
                    "variable and write ${env:NAME} in its place (for JDBC, better: drop it "
                    "from the url and set jdbc.password: ${env:NAME})",
                )
            )
    problems = []
    for at, message in found:
        line, col = doc.mark(at)
        problems.append(SpecProblem(file, line, col, dotted(at), message))
    return problems
