"""Load a spec file: YAML with positions, JSON Schema, semantic checks, then the typed model.

Every problem is reported as FILE:LINE:COL: dotted.path: message, all at once, so a user
fixes a spec in one pass. Nothing here imports pyspark: `runner validate` starts no JVM.

The steps, each in its own module: runner/spec/located.py (YAML with positions),
schema_check.py (the JSON Schema), semantic.py (settings that depend on each other),
password_checks.py, columns.py (fields that are not columns of a declared schema), paths.py
(path fields and their `${env:NAME}`), build.py (the frozen model).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runner.errors import InvalidSpecError, SpecProblem
from runner.spec.build import build
from runner.spec.columns import column_problems
from runner.spec.debezium import finished, imply_settings
from runner.spec.located import Located, dotted, locate, value_at
from runner.spec.model import PipelineSpec
from runner.spec.nearest import did_you_mean
from runner.spec.password_checks import password_problems
from runner.spec.paths import unset_path_variables, with_paths_resolved
from runner.spec.schema_check import invalid_parts, schema_problems
from runner.spec.semantic import semantic_problems, transform_problems


@dataclass(frozen=True)
class SpecRead:
    """A spec file as checked: its model (None when it has a problem), every problem, and
    what checks beyond the file need (runner/commands/spec_facts.py): the document with its
    positions, and the model of its valid parts when they make a valid spec on their own."""

    spec: PipelineSpec | None
    problems: list[SpecProblem]
    doc: Located | None = None
    checkable: PipelineSpec | None = None


def check_spec_file(
    path: str | Path,
    resolve_paths: bool = True,
    parse_transform: bool = True,
    record_key: Sequence[str] | None = None,
) -> tuple[PipelineSpec | None, list[SpecProblem]]:
    """Validate one spec file; returns the model (None when invalid) and every problem.

    With resolve_paths, the `${env:NAME}` references of path fields are resolved from the
    environment (an unset one is a problem); without, paths keep them as written. Without
    parse_transform, transform.sql is not read here: a run has Spark's parser refuse
    anything but a query before it runs (runner/sources/plan.py), which spares it importing
    sqlglot (about 0.3 s of every run's start). `record_key` fills the key a target fed by
    Debezium events leaves open (runner/spec/debezium.py).
    """
    read = read_spec_file(path, resolve_paths, parse_transform, record_key)
    return read.spec, read.problems


def read_spec_file(
    path: str | Path,
    resolve_paths: bool = True,
    parse_transform: bool = True,
    record_key: Sequence[str] | None = None,
) -> SpecRead:
    """check_spec_file's checks, keeping the document and the model of its valid parts.

    A spec that breaks the JSON Schema is checked on without the parts that break it (an
    unknown key, a wrong value: invalid_parts), so one pass reports the semantic problems
    too; a rule's problem at (or around) a value left out is left unsaid, as that value's
    own problem says it."""
    file = Path(path)
    shown = str(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        hint = did_you_mean(shown) if isinstance(exc, FileNotFoundError) else ""
        message = f"cannot read the file: {exc.strerror}{hint}"
        return SpecRead(None, [SpecProblem(shown, 1, 1, "", message)])
    doc, problems = locate(text, shown)
    if doc is None:
        return SpecRead(None, problems)
    if not isinstance(doc.data, dict):
        message = "the spec must be a mapping of keys to values"
        return SpecRead(None, [SpecProblem(shown, 1, 1, "", message)])
    broken = schema_problems(doc, shown)
    problems += broken
    valid, left_out = _valid_part(doc) if broken else (doc, [])
    checkable = None
    if valid is not None:
        open_key = imply_settings(valid.data, record_key)
        rules = _rule_problems(valid, shown, resolve_paths, parse_transform)
        rules = [p for p in rules if not any(_near(p.field, f) for f in left_out)]
        problems += rules
        if not rules:
            data = with_paths_resolved(valid.data) if resolve_paths else valid.data
            checkable = finished(build(data, file.resolve()), open_key)
    if problems:
        return SpecRead(None, sorted(problems, key=lambda p: (p.line, p.column)), doc, checkable)
    return SpecRead(checkable, [], doc, checkable)


def _valid_part(doc: Located) -> tuple[Located | None, list[str]]:
    """The document without the parts that break the JSON Schema, when what is left is a
    valid spec, and the fields of the wrong values left out."""
    parts = invalid_parts(doc.data)
    if parts is None:
        return None, []
    unknown, wrong = parts
    data = copy.deepcopy(doc.data)
    for at in (*unknown, *wrong):
        parent = value_at(data, at[:-1])
        if isinstance(parent, dict):
            parent.pop(at[-1], None)
    if invalid_parts(data) != ([], []):
        return None, []
    return Located(data, doc.value_marks, doc.key_marks, doc.lines), [dotted(at) for at in wrong]


def _near(field: str, left_out: str) -> bool:
    """`field` is the field left out, one inside it, or one that holds it."""
    inner, outer = (field, left_out) if len(field) >= len(left_out) else (left_out, field)
    return inner == outer or inner.startswith((f"{outer}.", f"{outer}["))


def _rule_problems(
    doc: Located, file: str, resolve_paths: bool, parse_transform: bool
) -> list[SpecProblem]:
    """The checks after the JSON Schema, which may rely on the shape it guarantees."""
    problems = semantic_problems(doc, file)
    if parse_transform:
        problems += transform_problems(doc, file)
    problems += password_problems(doc, file)
    problems += column_problems(doc, file)
    if resolve_paths:
        problems += unset_path_variables(doc, file)
    return problems


def load_spec(
    path: str | Path,
    resolve_paths: bool = True,
    parse_transform: bool = True,
    record_key: Sequence[str] | None = None,
) -> PipelineSpec:
    """Load and validate a spec file, or raise InvalidSpecError listing every problem."""
    spec, problems = check_spec_file(path, resolve_paths, parse_transform, record_key)
    if problems:
        raise InvalidSpecError(problems)
    assert spec is not None
    return spec
