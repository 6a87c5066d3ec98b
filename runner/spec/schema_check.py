"""The spec against the published JSON Schema, each error worded for the person fixing it.

jsonschema's own messages name Python reprs and schema keywords; here an unknown key gets
its nearest valid name, a wrong type says what was found, an enum lists its choices.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from runner.errors import SpecProblem
from runner.spec.located import Located, Path_, dotted


def schema_path() -> Path:
    """The published JSON Schema: packaged in the wheel, or schemas/ in a source checkout."""
    packaged = resources.files("runner").joinpath("pipeline.schema.json")
    if packaged.is_file():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "schemas" / "pipeline.schema.json"


@cache
def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(schema_path().read_text())
    return jsonschema.Draft202012Validator(schema)


def nearest(word: str, choices: list[str]) -> str:
    """' (did you mean 'x'?)' for the closest of `choices`, or ''."""
    match = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""


def schema_problems(doc: Located, file: str) -> list[SpecProblem]:
    problems = []
    for err in _validator().iter_errors(doc.data):
        path: Path_ = tuple(err.absolute_path)
        kind = err.validator
        if kind == "additionalProperties":
            allowed = sorted(err.schema.get("properties", {}))
            for extra in sorted(set(err.instance) - set(allowed)):
                line, col = doc.mark((*path, extra), key=True)
                hint = nearest(str(extra), allowed) or f"; valid keys: {', '.join(allowed)}"
                problems.append(
                    SpecProblem(file, line, col, dotted((*path, extra)), f"unknown key{hint}")
                )
            continue
        if kind == "required":
            for missing in err.validator_value:
                if missing not in err.instance:
                    line, col = doc.mark(path)
                    problems.append(
                        SpecProblem(
                            file, line, col, dotted((*path, missing)), "required key missing"
                        )
                    )
            continue
        line, col = doc.mark(path)
        if kind == "type":
            expected = err.validator_value
            expected = " or ".join(expected) if isinstance(expected, list) else expected
            message = f"expected {expected}, got {_describe(err.instance)}"
        elif kind == "enum":
            options = [str(o) for o in err.validator_value]
            message = (
                f"{json.dumps(err.instance)} is not one of: {', '.join(options)}"
                f"{nearest(str(err.instance), options)}"
            )
        elif kind == "minimum":
            message = f"must be at least {err.validator_value}, got {err.instance}"
        elif kind == "maximum":
            message = f"must be at most {err.validator_value}, got {err.instance}"
        elif kind in ("minItems", "minLength"):
            message = "must not be empty"
        elif kind == "pattern" and "x-hint" in err.schema:
            message = f"{json.dumps(err.instance)} is not valid here; {err.schema['x-hint']}"
        elif kind == "pattern":
            message = f"{json.dumps(err.instance)} must match the pattern {err.validator_value}"
        elif kind in ("oneOf", "anyOf") and "x-hint" in err.schema:
            message = f"{_describe(err.instance)} is not valid here; {err.schema['x-hint']}"
        else:
            message = err.message
        problems.append(SpecProblem(file, line, col, dotted(path), message))
    return problems


def _describe(value: Any) -> str:
    kinds = {bool: "boolean", int: "integer", float: "number", str: "string"}
    kinds.update({list: "list", dict: "mapping", type(None): "null"})
    kind = kinds.get(type(value), type(value).__name__)
    if isinstance(value, (list, dict)):
        return kind
    return f"{kind} {json.dumps(value)}"


# Keys whose value decides which other settings apply: a spec with one of these invalid is not
# checked on (every rule would be judged against a value the user did not mean).
_DECIDING = ("operation", "merge_mode", "table_type", "format", "type")


def invalid_parts(data: Any) -> tuple[list[Path_], list[Path_]] | None:
    """The parts of a spec that break the JSON Schema, as the fields to leave out so that
    the rest can still be checked: (unknown keys, values of a wrong type or out of range).
    None when leaving them out gives no valid spec: a required key missing, a list item
    wrong, a setting that decides which others apply wrong."""
    unknown: list[Path_] = []
    wrong: list[Path_] = []
    for err in _validator().iter_errors(data):
        path: Path_ = tuple(err.absolute_path)
        if err.validator == "additionalProperties":
            known = set(err.schema.get("properties", {}))
            unknown += [(*path, extra) for extra in sorted(set(err.instance) - known)]
        elif err.validator == "required" or not _leaves_out(path):
            return None
        else:
            wrong.append(path)
    return unknown, wrong


def _leaves_out(path: Path_) -> bool:
    """A wrong value at `path` can be left out: a mapping's key that decides nothing."""
    return bool(path) and isinstance(path[-1], str) and path[-1] not in _DECIDING
