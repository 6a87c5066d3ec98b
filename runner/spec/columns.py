"""Fields the target names that are not columns of the input, found before Spark starts.

Only where the columns are known without Spark: no transform, one file source, and that
source declares its schema (runner/spec/ddl.py reads its top-level names); partition
directories of a local path count as columns, as Spark's partition discovery adds them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runner.errors import SpecProblem
from runner.hudi.merge_names import from_properties
from runner.spec.ddl import ddl_columns
from runner.spec.derived import FILE_FORMATS, merge_settings, model_default
from runner.spec.keygen_settings import field_list, resolve_key_generator
from runner.spec.located import Located, Path_, dotted, strings_with_paths, value_at
from runner.spec.model import Target
from runner.spec.schema_check import nearest


def column_problems(doc: Located, file: str) -> list[SpecProblem]:
    """Fields the target names that are not columns of the batch, when its columns are
    known before Spark starts: no transform, so one source, and that source declares its
    schema. A nested field a.b is checked by its column a; names match case included, as
    the run's checks (runner/fields.py) match them."""
    data = doc.data
    sources = data["sources"]
    if "transform" in data or len(sources) != 1:
        return []
    source = sources[0]
    if source["format"] not in FILE_FORMATS or "schema" not in source:
        return []
    declared = ddl_columns(source["schema"])
    discovered = partition_directories(source.get("path", ""), Path(file).parent)
    if declared is None or discovered is None:  # Spark tells at run time
        return []
    columns = (*declared, *(c for c in discovered if c not in declared))
    problems: dict[tuple[Path_, str], SpecProblem] = {}  # a name given twice, said once
    for role, name, roots in named_columns(data["target"]):
        column = name.split(".")[0]
        if column in columns:
            continue
        at = _where_named(data, roots, name)
        line, col = doc.mark(at)
        message = (
            f"{role} '{name}' is not a column of source '{source['name']}'"
            f"{_column_hint(column, columns)}; its schema declares {', '.join(columns)}: "
            "fix the name, or the schema in sources[0].schema"
        )
        problems.setdefault((at, name), SpecProblem(file, line, col, dotted(at), message))
    return list(problems.values())


def partition_directories(path: str, base: Path) -> list[str] | None:
    """The columns Spark's partition discovery adds to a file source (`dt=.../hr=...`
    directories beside a declared schema), looked for down the first directories of a local
    path; None where they cannot be known without the store (a URI, a `${env:NAME}`)."""
    if "://" in path or "${" in path:
        return None
    directory, found = base / os.path.expanduser(path), []
    for _ in range(4):  # partition directories nest a few levels deep at most
        try:
            names = sorted(e.name for e in os.scandir(directory) if e.is_dir())
        except OSError:
            break
        keyed = [n for n in names if "=" in n and not n.startswith(("_", "."))]
        if not keyed:
            break
        found.append(keyed[0].split("=", 1)[0])
        directory = directory / keyed[0]
    return found


def named_columns(target: dict[str, Any]) -> Iterator[tuple[str, str, tuple[Path_, ...]]]:
    """(role, field name, where the spec may give it) for every input field the target
    reads; the run checks the same ones (runner/pipeline/key_columns.py and batch.py)."""
    t: Path_ = ("target",)
    keygen = resolve_key_generator(target, lambda path, message: None)
    if keygen is not None:
        props: Path_ = (*t, "key_generator", "properties")
        for name in keygen.record_key:
            yield "record key field", name, ((*t, "record_key"), props)
        for name in keygen.partition_fields:
            yield "partition field", name, ((*t, "key_generator", "partition_fields"), props)
    for name in field_list(target["index"].get("hash_fields")):
        yield "index hash field", name, ((*t, "index", "hash_fields"),)
    operation = target.get("operation", model_default(Target, "operation"))
    _, precombine = merge_settings(target, from_properties(target.get("properties", {})))
    if precombine and operation != "delete" and "cdc" not in target:
        yield "precombine field", precombine, ((*t, "precombine_field"), (*t, "properties"))
    if "delete_marker" in target:
        yield "delete marker", target["delete_marker"], ((*t, "delete_marker"),)
    for key in ("sequence_by", "operation_column"):
        if key in target.get("cdc", {}):
            yield f"cdc.{key}", target["cdc"][key], ((*t, "cdc", key),)


def _where_named(data: dict[str, Any], roots: tuple[Path_, ...], name: str) -> Path_:
    """The first string under roots that lists name (as `name` or CUSTOM's `name:TYPE`)."""
    for root in roots:
        for at, text in strings_with_paths(value_at(data, root), root):
            if name in (part.split(":")[0].strip() for part in text.split(",")):
                return at
    return roots[0]


def _column_hint(column: str, columns: tuple[str, ...]) -> str:
    same = [c for c in columns if c.lower() == column.lower()]
    if same:
        return f" (did you mean '{same[0]}'? names differ only in case)"
    return nearest(column, list(columns))
