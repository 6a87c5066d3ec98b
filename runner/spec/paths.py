"""The spec's path fields: which they are, their `${env:NAME}` references, made absolute.

Relative paths resolve against the spec file's directory, so a spec runs the same from any
working directory (and in the container, where specs are mounted). A path's `${env:NAME}` is
resolved when the spec is loaded; an unset or empty variable is a problem of the spec.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runner.errors import SpecProblem
from runner.spec.located import Located, Path_, dotted, value_at
from runner.spec.secrets import env_names, resolve


def path_fields(data: dict[str, Any]) -> Iterator[Path_]:
    """The fields that hold a path, made absolute against the spec's directory on loading."""
    for i, src in enumerate(data["sources"]):
        if "path" in src:
            yield ("sources", i, "path")
        if "jar" in src.get("jdbc", {}):
            yield ("sources", i, "jdbc", "jar")
    yield ("target", "path")
    if "quarantine" in data["target"]:
        yield ("target", "quarantine", "path")


def unset_path_variables(doc: Located, file: str) -> list[SpecProblem]:
    """A path field's `${env:NAME}` whose variable is unset or empty: the path cannot be
    made whole."""
    problems = []
    for at in path_fields(doc.data):
        for name in env_names(value_at(doc.data, at)):
            value = os.environ.get(name)
            if value:
                continue
            state = "is not set; export" if value is None else "is empty; give a value to"
            line, col = doc.mark(at)
            problems.append(
                SpecProblem(
                    file,
                    line,
                    col,
                    dotted(at),
                    f"environment variable {name} {state} it (a path is resolved when the "
                    f"spec is loaded; on Kubernetes: key {name} of the Secret "
                    "kubernetes.secret)",
                )
            )
    return problems


def with_paths_resolved(data: dict[str, Any]) -> dict[str, Any]:
    """data with the `${env:NAME}` references of its path fields replaced by their values
    (registered, so that every output shows the reference again: secrets.scrub)."""
    resolved = copy.deepcopy(data)
    for at in path_fields(resolved):
        parent = value_at(resolved, at[:-1])
        parent[at[-1]] = resolve(parent[at[-1]], where=dotted(at))
    return resolved


def absolute(path: str, base: Path) -> str:
    """A path of the spec made absolute against its directory `base`."""
    # ${env:NAME} references are resolved before (with_paths_resolved); a path that still
    # starts with one is kept as written, for `runner render` (the pods resolve it).
    if "://" in path or path.startswith("${env:"):
        return path
    return str((base / os.path.expanduser(path)).resolve())
