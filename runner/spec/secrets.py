"""`${env:NAME}` references in a spec: resolved where they are needed, never shown resolved.

The spec model keeps the references as written, so anything that renders the spec
(`runner render`) shows `${env:NAME}`, never the value. Code that needs the value (a JDBC
connection, storage credentials) calls `resolve` right before using it. Paths are the
exception: the loader resolves them, since a path is made absolute against the spec's
directory. Every value `resolve` hands out is registered, and `scrub` puts its reference
back into any text on its way out (logs, errors, summaries); `scrub` also hides a password
written inside a URL (`?password=...`, `user:password@host`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from runner.errors import UserError

ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
# Anything that looks like a reference but is not one: `${env:}`, `${env:1X}`, `${ENV:X}`.
_LOOKS_LIKE_REF = re.compile(r"\$\{\s*env\s*:[^}]*\}", re.IGNORECASE)
# A password inside a URL: a parameter (`?password=`, `&pwd=`, JDBC's `;passwd=`), any case,
# or the userinfo of `scheme://user:password@host`. Group 1 leads up to the password, group 2
# is the password: a reference that ends where the URL does, or whatever comes up to the next
# parameter, space or quote.
_URL_PASSWORDS = (
    re.compile(
        r"(?i)([?&;]\s*(?:password|passwd|pwd)\s*=\s*)"
        r"(\$\{env:[A-Za-z_][A-Za-z0-9_]*\}(?=[&;\s'\"),:]|$)|[^&;\s'\"]*)"
    ),
    re.compile(r"(://[^/@\s:;?&'\"]*:)([^\s/;?&='\"]+)(?=@)"),
)
HIDDEN = "***"  # what `scrub` shows instead of a password written in a URL


# Values resolved in this process, by value: `scrub` puts their references back into any
# text on its way out (logs, errors), should a library echo a resolved setting.
_RESOLVED: dict[str, str] = {}
# Shorter values would turn up by chance in unrelated text; scrubbing them would garble it.
_SCRUB_MIN_LENGTH = 4


class MissingEnvError(UserError):
    """A `${env:NAME}` reference names a variable the environment does not have."""


def env_names(value: Any) -> list[str]:
    """Every variable name referenced anywhere in value (strings, lists, mappings), in order."""
    names: list[str] = []
    for text in _strings(value):
        for name in ENV_REF.findall(text):
            if name not in names:
                names.append(name)
    return names


def malformed_refs(text: str) -> list[str]:
    """References that look like `${env:...}` but are not valid ones, for spec validation."""
    return [m.group(0) for m in _LOOKS_LIKE_REF.finditer(text) if not ENV_REF.fullmatch(m.group(0))]


def resolve(value: Any, environ: Mapping[str, str] | None = None, where: str = "the spec") -> Any:
    """value with every `${env:NAME}` replaced by the variable's value.

    Raises MissingEnvError naming every unset variable (never any value).
    """
    env = os.environ if environ is None else environ
    missing = [name for name in env_names(value) if name not in env]
    if missing:
        listed = ", ".join(missing)
        raise MissingEnvError(
            f"{where} references environment variable(s) {listed}, which are not set; "
            "export them before the run (on Kubernetes: a Secret mounted with envFrom)"
        )
    for name in env_names(value):
        if len(env[name]) >= _SCRUB_MIN_LENGTH:
            _RESOLVED[env[name]] = name
    return _map_strings(value, lambda text: ENV_REF.sub(lambda m: env[m.group(1)], text))


def scrub(text: str) -> str:
    """text with every value `resolve` handed out replaced by its `${env:NAME}` reference,
    and every password written in a URL replaced by ***."""
    for secret in sorted(_RESOLVED, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, f"${{env:{_RESOLVED[secret]}}}")
    for pattern in _URL_PASSWORDS:
        text = pattern.sub(_hide_password, text)
    return text


def scrub_values(value: Any) -> Any:
    """value (strings, lists, mappings) with every string scrubbed; numbers stay numbers,
    so that JSON made of it stays valid."""
    return _map_strings(value, scrub)


def only_references(value: str) -> bool:
    """value holds nothing but `${env:NAME}` references: the form a secret takes in a spec."""
    return not ENV_REF.sub("", value).strip()


def has_url_password(text: str) -> bool:
    """text holds a URL with a password written out (not as `${env:NAME}`)."""
    return any(
        not only_references(m.group(2))
        for pattern in _URL_PASSWORDS
        for m in pattern.finditer(text)
    )


def _hide_password(match: re.Match[str]) -> str:
    password = match.group(2)
    return match.group(1) + (password if only_references(password) else HIDDEN)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, Mapping):
        return {k: _map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(_map_strings(v, fn) for v in value)
    return value
