"""Load a spec file: YAML with positions, JSON Schema, semantic checks, then the typed model.

Every problem is reported as FILE:LINE:COL: dotted.path: message, all at once, so a user
fixes a spec in one pass. Nothing here imports pyspark: `runner validate` starts no JVM.

The steps, each in its own module: runner/spec/located.py (YAML with positions),
schema_check.py (the JSON Schema), semantic.py (settings that depend on each other),
password_checks.py, columns.py (fields that are not columns of a declared schema), paths.py
(path fields and their `${env:NAME}`), build.py (the frozen model).
"""

from __future__ import annotations

from pathlib import Path

from runner.errors import InvalidSpecError, SpecProblem
from runner.spec.build import build
from runner.spec.columns import column_problems
from runner.spec.located import Located, locate
from runner.spec.model import PipelineSpec
from runner.spec.nearest import did_you_mean
from runner.spec.password_checks import password_problems
from runner.spec.paths import unset_path_variables, with_paths_resolved
from runner.spec.schema_check import schema_problems
from runner.spec.semantic import semantic_problems, transform_problems


def check_spec_file(
    path: str | Path, resolve_paths: bool = True, parse_transform: bool = True
) -> tuple[PipelineSpec | None, list[SpecProblem]]:
    """Validate one spec file; returns the model (None when invalid) and every problem.

    With resolve_paths, the `${env:NAME}` references of path fields are resolved from the
    environment (an unset one is a problem); without, paths keep them as written. Without
    parse_transform, transform.sql is not read here: a run has Spark's parser refuse
    anything but a query before it runs (runner/sources/plan.py), which spares it importing
    sqlglot (about 0.3 s of every run's start).
    """
    file = Path(path)
    shown = str(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        hint = did_you_mean(shown) if isinstance(exc, FileNotFoundError) else ""
        return None, [SpecProblem(shown, 1, 1, "", f"cannot read the file: {exc.strerror}{hint}")]
    doc, problems = locate(text, shown)
    if doc is None:
        return None, problems
    if not isinstance(doc.data, dict):
        return None, [SpecProblem(shown, 1, 1, "", "the spec must be a mapping of keys to values")]
    problems += schema_problems(doc, shown)
    if not problems:
        problems += _rule_problems(doc, shown, resolve_paths, parse_transform)
    if problems:
        return None, sorted(problems, key=lambda p: (p.line, p.column))
    data = with_paths_resolved(doc.data) if resolve_paths else doc.data
    return build(data, file.resolve()), []


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
    path: str | Path, resolve_paths: bool = True, parse_transform: bool = True
) -> PipelineSpec:
    """Load and validate a spec file, or raise InvalidSpecError listing every problem."""
    spec, problems = check_spec_file(path, resolve_paths, parse_transform)
    if problems:
        raise InvalidSpecError(problems)
    assert spec is not None
    return spec
