"""Load a spec file: YAML with positions, JSON Schema, semantic checks, then the typed model.

Every problem is reported as FILE:LINE:COL: dotted.path: message, all at once, so a user
fixes a spec in one pass. Nothing here imports pyspark: `runner validate` starts no JVM.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, cast

import jsonschema
import yaml

from runner.errors import InvalidSpecError, SpecProblem
from runner.hudi.merge_names import PropertySettings, from_properties
from runner.spec.ddl import ddl_columns
from runner.spec.keygen_settings import field_list, resolve_key_generator
from runner.spec.model import (
    FIELD_MERGE_MODES,
    CdcSpec,
    CleaningSpec,
    CompactionSpec,
    DriverMergeSpec,
    ExpansionSpec,
    Expectation,
    Incremental,
    IndexSpec,
    JdbcSpec,
    KubernetesSpec,
    MergeMode,
    MergerSpec,
    PipelineSpec,
    QuarantineSpec,
    ScdSpec,
    SharedVolume,
    Source,
    SparkSettings,
    Target,
)
from runner.spec.secrets import (
    env_names,
    has_url_password,
    malformed_refs,
    only_references,
    resolve,
)
from runner.spec.transform import transform_problem

Path_ = tuple[str | int, ...]


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


def dotted(path: Path_) -> str:
    """('target', 'index', 'hash_fields', 1) -> 'target.index.hash_fields[1]'."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


@dataclass
class _Located:
    """The parsed document with the YAML position of every value and every mapping key."""

    data: Any
    value_marks: dict[Path_, tuple[int, int]]
    key_marks: dict[Path_, tuple[int, int]]

    def mark(self, path: Path_, key: bool = False) -> tuple[int, int]:
        marks = self.key_marks if key else self.value_marks
        while path not in marks and path:
            path = path[:-1]
        return marks.get(path, (1, 1))


def _locate(text: str, file: str) -> tuple[_Located | None, list[SpecProblem]]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        reason = getattr(exc, "problem", None) or str(exc)
        return None, [SpecProblem(file, line, col, "", f"not valid YAML: {reason}")]
    if node is None:
        return None, [SpecProblem(file, 1, 1, "", "the spec is empty")]

    values: dict[Path_, tuple[int, int]] = {}
    keys: dict[Path_, tuple[int, int]] = {}
    problems: list[SpecProblem] = []

    def walk(n: yaml.Node, path: Path_) -> None:
        values[path] = (n.start_mark.line + 1, n.start_mark.column + 1)
        if isinstance(n, yaml.MappingNode):
            seen: set[str] = set()
            for k, v in n.value:
                name = str(k.value)
                kpath = (*path, name)
                if name in seen:
                    problems.append(
                        SpecProblem(
                            file,
                            k.start_mark.line + 1,
                            k.start_mark.column + 1,
                            dotted(kpath),
                            "duplicate key: YAML keeps only the last one; remove one of them",
                        )
                    )
                seen.add(name)
                keys[kpath] = (k.start_mark.line + 1, k.start_mark.column + 1)
                walk(v, kpath)
        elif isinstance(n, yaml.SequenceNode):
            for i, item in enumerate(n.value):
                walk(item, (*path, i))

    walk(node, ())
    data = yaml.safe_load(text)
    return _Located(data, values, keys), problems


def _describe(value: Any) -> str:
    kinds = {bool: "boolean", int: "integer", float: "number", str: "string"}
    kinds.update({list: "list", dict: "mapping", type(None): "null"})
    kind = kinds.get(type(value), type(value).__name__)
    if isinstance(value, (list, dict)):
        return kind
    return f"{kind} {json.dumps(value)}"


def _nearest(word: str, choices: list[str]) -> str:
    match = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""


def _schema_problems(doc: _Located, file: str) -> list[SpecProblem]:
    problems = []
    for err in _validator().iter_errors(doc.data):
        path: Path_ = tuple(err.absolute_path)
        kind = err.validator
        if kind == "additionalProperties":
            allowed = sorted(err.schema.get("properties", {}))
            for extra in sorted(set(err.instance) - set(allowed)):
                line, col = doc.mark((*path, extra), key=True)
                hint = _nearest(str(extra), allowed) or f"; valid keys: {', '.join(allowed)}"
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
                f"{_nearest(str(err.instance), options)}"
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


def _semantic_problems(doc: _Located, file: str) -> list[SpecProblem]:
    data = doc.data
    problems: list[SpecProblem] = []

    def problem(path: Path_, message: str) -> None:
        line, col = doc.mark(path)
        problems.append(SpecProblem(file, line, col, dotted(path), message))

    names: dict[str, int] = {}
    for i, src in enumerate(data["sources"]):
        if src["name"] in names:
            problem(
                ("sources", i, "name"),
                f"duplicate source name (also sources[{names[src['name']]}])",
            )
        names.setdefault(src["name"], i)
    for i, src in enumerate(data["sources"]):
        problem_of_source = _source_problem(src)
        if problem_of_source:
            field, message = problem_of_source
            problem(("sources", i, *field), message)
    if len(data["sources"]) > 1 and "transform" not in data:
        problem(("sources",), "several sources need a transform.sql that combines them")

    target = data["target"]
    keygen = resolve_key_generator(
        target, lambda path, message: problem(("target", *path), message)
    )
    record_key = keygen.record_key if keygen else field_list(target.get("record_key"))

    index = target["index"]
    if "hash_fields" in index:
        hash_fields = field_list(index["hash_fields"])
        listed = isinstance(index["hash_fields"], list)
        for i, name in enumerate(hash_fields):
            if name not in record_key:
                at: Path_ = ("target", "index", "hash_fields", *((i,) if listed else ()))
                problem(
                    at,
                    f"hash field '{name}' is not a record key field {list(record_key)}; "
                    "the bucket index hashes a subset of the record key",
                )

    operation = target.get("operation", _default(Target, "operation"))
    from_props = from_properties(target.get("properties", {}))
    for name, message in from_props.problems:
        problem(("target", "properties", name), message)
    for key in ("merge_mode", "precombine_field"):
        theirs = getattr(from_props, key)
        if key in target and theirs and theirs != target[key]:
            problem(
                ("target", key),
                f"{target[key]} disagrees with target.properties, which give {theirs}; "
                "set it one way",
            )
    merge_mode, precombine_field = _merge_settings(target, from_props)
    if operation == "upsert" and merge_mode == "event_time" and precombine_field is None:
        problem(
            ("target", "precombine_field"),
            "upsert with merge_mode event_time needs a precombine_field to order records; "
            "set one, or set merge_mode: commit_time (the latest write wins)",
        )
    if "precombine_string_order" in target and precombine_field is None:
        problem(
            ("target", "precombine_string_order"),
            "applies to a precombine_field (or cdc.sequence_by), and there is none",
        )
    if merge_mode in FIELD_MERGE_MODES and operation != "upsert":
        problem(
            ("target", "merge_mode"),
            f"{merge_mode} merges a record with the stored one, which only upsert does, "
            f"not {operation}",
        )
    if merge_mode == "custom" and "merger" not in target:
        problem(
            ("target", "merge_mode"),
            "custom needs target.merger.class, the package.module:ClassName of your merger",
        )
    if "merger" in target and merge_mode != "custom":
        problem(("target", "merger"), f"applies to merge_mode custom, not {merge_mode}")
    if "delete_marker" in target and operation != "upsert":
        problem(("target", "delete_marker"), f"applies to operation upsert, not {operation}")
    _check_change_feed(target, operation, merge_mode, problem)
    if target.get("filter_dupes") and operation != "insert":
        problem(("target", "filter_dupes"), f"applies to operation insert, not {operation}")
    rules: dict[str, int] = {}
    for i, rule in enumerate(data.get("expectations", [])):
        if rule["name"] in rules:
            problem(
                ("expectations", i, "name"),
                f"duplicate expectation name (also expectations[{rules[rule['name']]}])",
            )
        rules.setdefault(rule["name"], i)
        if rule.get("action") == "quarantine" and "quarantine" not in target:
            problem(
                ("expectations", i, "action"),
                "action quarantine needs target.quarantine.path, the table the rows go to; "
                "add it, or use action drop or fail",
            )
    for i, src in enumerate(data["sources"]):
        if src.get("on_bad_record") == "quarantine" and "quarantine" not in target:
            problem(
                ("sources", i, "on_bad_record"),
                "quarantine needs target.quarantine.path, the table the records go to; "
                "add it, or use drop or fail",
            )
    if "quarantine" in target and target["quarantine"]["path"] == target["path"]:
        problem(
            ("target", "quarantine", "path"),
            "the quarantine table must not be the target table; give it its own path",
        )
    for path, text in _strings_with_paths(data, ()):
        for bad in malformed_refs(text):
            problem(
                path,
                f"{bad} is not a valid environment reference; write ${{env:NAME}} with NAME "
                "made of letters, digits and underscores",
            )
    return problems


_FILE_FORMATS = ("parquet", "csv", "json", "orc")
_TEXT_FORMATS = ("csv", "json")
_PARSE_MODE_OPTIONS = ("mode", "columnnameofcorruptrecord")


def _source_problem(src: dict[str, Any]) -> tuple[Path_, str] | None:
    """A source's settings that do not fit its format, as (field path, message)."""
    fmt, incremental = src["format"], src.get("incremental")
    if fmt != "jdbc" and "jdbc" in src:
        return ("jdbc",), f"applies to format jdbc, not {fmt}"
    if "on_bad_file" in src and fmt not in _FILE_FORMATS:
        return ("on_bad_file",), f"applies to file formats ({', '.join(_FILE_FORMATS)}), not {fmt}"
    if "on_bad_record" in src and fmt not in _TEXT_FORMATS:
        return ("on_bad_record",), (
            f"applies to csv and json, whose records can fail to parse; {fmt} records are typed"
        )
    for option in src.get("options", {}):
        if fmt in _TEXT_FORMATS and option.lower() in _PARSE_MODE_OPTIONS:
            return ("options", option), (
                "the runner decides what happens to records that do not parse: use "
                "on_bad_record (fail, quarantine or drop) instead of this Spark option"
            )
    if fmt == "jdbc":
        if "path" in src:
            return ("path",), "a jdbc source has no path; give jdbc.table or jdbc.query"
        if ("table" in src["jdbc"]) == ("query" in src["jdbc"]):
            return ("jdbc",), "give exactly one of table and query"
    if incremental is None:
        return None
    wanted = {"new_files": _FILE_FORMATS, "since": ("delta",), "column": ("jdbc",)}
    kind = "new_files" if incremental == "new_files" else next(iter(incremental))
    if fmt not in wanted[kind]:
        fitting = {"delta": "{since: last}", "jdbc": "{column: NAME}"}.get(fmt, "new_files")
        return ("incremental",), f"does not apply to format {fmt}; it takes {fitting}"
    return None


def _strings_with_paths(value: Any, path: Path_) -> Iterator[tuple[Path_, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings_with_paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings_with_paths(item, (*path, i))


def _resolve(path: str, base: Path) -> str:
    # ${env:NAME} references are resolved before (_with_paths_resolved); a path that still
    # starts with one is kept as written, for `runner render` (the pods resolve it).
    if "://" in path or path.startswith("${env:"):
        return path
    return str((base / os.path.expanduser(path)).resolve())


def _build(data: dict[str, Any], file: Path) -> PipelineSpec:
    base = file.parent
    target = data["target"]
    keygen = resolve_key_generator(target, _unreachable)
    assert keygen is not None, "the semantic checks passed"
    if keygen.class_path:
        keygen = replace(keygen, search_path=str(base))
    index = target["index"]
    merge_mode, precombine_field = _merge_settings(
        target, from_properties(target.get("properties", {}))
    )
    spark = data.get("spark", {})
    return PipelineSpec(
        name=data["name"],
        description=data.get("description"),
        file=str(file),
        spark=SparkSettings(
            conf={k: _conf_str(v) for k, v in spark.get("conf", {}).items()},
            **_given(spark, "master"),
        ),
        sources=tuple(
            Source(
                name=s["name"],
                format=s["format"],
                path=_resolve(s["path"], base) if "path" in s else "",
                schema=s.get("schema"),
                options={k: _conf_str(v) for k, v in s.get("options", {}).items()},
                incremental=_incremental(s.get("incremental")),
                jdbc=_jdbc(s.get("jdbc"), base),
                **_given(s, "on_bad_file", "on_bad_record"),
            )
            for s in data["sources"]
        ),
        transform_sql=data.get("transform", {}).get("sql"),
        expectations=tuple(Expectation(**e) for e in data.get("expectations", [])),
        target=Target(
            path=_resolve(target["path"], base),
            precombine_field=precombine_field,
            **_given(target, "precombine_string_order"),
            merge_mode=merge_mode,
            merger=_merger(target.get("merger"), base),
            delete_marker=target.get("delete_marker"),
            cdc=_cdc(target.get("cdc")),
            scd=ScdSpec(**target.get("scd", {})),
            cleaning=CleaningSpec(**target.get("cleaning", {})),
            compaction=CompactionSpec(**target.get("compaction", {})),
            driver_merge=DriverMergeSpec(**target.get("driver_merge", {})),
            **_given(target, "operation", "table_type", "filter_dupes", "commit_retries"),
            quarantine=_quarantine(target.get("quarantine"), base),
            key_generator=keygen,
            index=IndexSpec(
                **_given(index, "type"),
                buckets=index["buckets"],
                hash_fields=field_list(index.get("hash_fields")) or keygen.record_key,
                expansion=ExpansionSpec(**index.get("expansion", {})),
            ),
        ),
        kubernetes=_kubernetes(data.get("kubernetes", {})),
    )


def _kubernetes(block: dict[str, Any]) -> KubernetesSpec:
    defaults = KubernetesSpec()
    plain = (
        *("namespace", "service_account", "secret", "restart_policy", "retries"),
        "retry_interval_seconds",
    )
    return KubernetesSpec(
        **{key: block[key] for key in plain if key in block},
        driver=replace(defaults.driver, **block.get("driver", {})),
        executor=replace(defaults.executor, **block.get("executor", {})),
        volume=SharedVolume(**block["volume"]) if "volume" in block else None,
        spark_conf={k: _conf_str(v) for k, v in block.get("spark_conf", {}).items()},
    )


def _incremental(value: Any) -> Incremental | None:
    if value is None:
        return None
    if value == "new_files":
        return Incremental("new_files")
    if "since" in value:
        return Incremental("since_last")
    return Incremental("column", column=value["column"])


def _jdbc(value: dict[str, Any] | None, base: Path) -> JdbcSpec | None:
    if value is None:
        return None
    jar = value.get("jar")
    return JdbcSpec(**{**value, "jar": _resolve(jar, base) if jar else None})


def _check_change_feed(
    target: dict[str, Any],
    operation: str,
    merge_mode: str,
    problem: Callable[[Path_, str], None],
) -> None:
    """target.cdc and target.scd: what they need and what they replace."""
    if "scd" in target and "cdc" not in target:
        problem(
            ("target", "scd"),
            "needs target.cdc: the history is built from a change feed's events "
            "(at least cdc.sequence_by, the column that orders them)",
        )
    if "cdc" not in target:
        return
    cdc = target["cdc"]
    if operation != "upsert":
        problem(("target", "operation"), f"target.cdc applies changes with upsert, not {operation}")
    if target.get("precombine_field") not in (None, cdc["sequence_by"]):
        problem(
            ("target", "precombine_field"),
            f"{target['precombine_field']} differs from cdc.sequence_by "
            f"({cdc['sequence_by']}), which orders a change feed's events; drop it",
        )
    if merge_mode != "event_time":
        problem(
            ("target", "merge_mode"),
            f"{merge_mode} does not apply to a change feed (events are applied in "
            "cdc.sequence_by order); drop it, or use cdc.ignore_null_updates for partial rows",
        )
    if "delete_marker" in target:
        problem(
            ("target", "delete_marker"),
            "a change feed's deletes come from cdc.operation_column and cdc.delete_values; "
            "drop delete_marker",
        )
    if target["index"].get("expansion", {}).get("max_bucket_bytes"):
        problem(
            ("target", "index", "expansion", "max_bucket_bytes"),
            "an automatic expansion does not carry a change feed's tombstones (deleted keys) "
            "yet; drop it and run `runner expand` when needed (it refuses while there are any)",
        )
    if "delete_values" in cdc and "operation_column" not in cdc:
        problem(("target", "cdc", "delete_values"), "needs cdc.operation_column to look in")
    scd = target.get("scd", {})
    names = ("start_column", "end_column", "current_column")
    history = [scd.get(name, _default(ScdSpec, name)) for name in names]
    feed = {cdc["sequence_by"], cdc.get("operation_column")}
    for name, value in zip(names, history, strict=True):
        if value in feed or history.count(value) > 1:
            problem(
                ("target", "scd", name),
                f"'{value}' is already used by another cdc or scd column; give each its own name",
            )


def _cdc(data: dict[str, Any] | None) -> CdcSpec | None:
    if data is None:
        return None
    values = data.get("delete_values")
    return CdcSpec(**{**data, **({"delete_values": tuple(values)} if values else {})})


def _merge_settings(
    target: dict[str, Any], from_props: PropertySettings
) -> tuple[MergeMode, str | None]:
    """merge_mode and precombine_field, set in the spec's fields or by Hudi's names in
    target.properties (`from_props`; the two must agree). A change feed's events are
    ordered by its cdc.sequence_by."""
    merge_mode = target.get("merge_mode") or from_props.merge_mode
    precombine_field = (
        target.get("precombine_field")
        or from_props.precombine_field
        or target.get("cdc", {}).get("sequence_by")
    )
    return cast(MergeMode, merge_mode or _default(Target, "merge_mode")), precombine_field


def _merger(data: dict[str, Any] | None, base: Path) -> MergerSpec | None:
    if data is None:
        return None
    properties = {k: _conf_str(v) for k, v in data.get("properties", {}).items()}
    return MergerSpec(data["class"], properties, search_path=str(base))


def _quarantine(data: dict[str, Any] | None, base: Path) -> QuarantineSpec | None:
    if data is None:
        return None
    return QuarantineSpec(path=_resolve(data["path"], base), **_given(data, "max_fraction"))


def _given(block: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The keys the spec sets; the model's defaults (runner.spec.model) fill in the rest."""
    return {key: block[key] for key in keys if key in block}


def _default(model: type, name: str) -> Any:
    """A field's default in the model, for the checks that run before the model is built."""
    return next(f.default for f in fields(model) if f.name == name)


def _unreachable(path: Path_, message: str) -> None:
    raise AssertionError(f"{dotted(path)}: {message} (missed by the semantic checks)")


def _conf_str(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _path_fields(data: dict[str, Any]) -> Iterator[Path_]:
    """The fields that hold a path, made absolute against the spec's directory on loading."""
    for i, src in enumerate(data["sources"]):
        if "path" in src:
            yield ("sources", i, "path")
        if "jar" in src.get("jdbc", {}):
            yield ("sources", i, "jdbc", "jar")
    yield ("target", "path")
    if "quarantine" in data["target"]:
        yield ("target", "quarantine", "path")


def _unset_path_variables(doc: _Located, file: str) -> list[SpecProblem]:
    """A path field's `${env:NAME}` whose variable is unset or empty: the path cannot be
    made whole."""
    problems = []
    for at in _path_fields(doc.data):
        for name in env_names(_value_at(doc.data, at)):
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


def _with_paths_resolved(data: dict[str, Any]) -> dict[str, Any]:
    """data with the `${env:NAME}` references of its path fields replaced by their values
    (registered, so that every output shows the reference again: secrets.scrub)."""
    resolved = copy.deepcopy(data)
    for at in _path_fields(resolved):
        parent = _value_at(resolved, at[:-1])
        parent[at[-1]] = resolve(parent[at[-1]], where=dotted(at))
    return resolved


def _value_at(data: Any, path: Path_) -> Any:
    for part in path:
        if isinstance(data, dict) and isinstance(part, str):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return None
    return data


_PASSWORD_KEYS = ("password", "passwd", "pwd")


def _password_problems(doc: _Located, file: str) -> list[SpecProblem]:
    """Passwords written out in the spec, in a password field or inside a URL: a spec is
    kept in git and in a ConfigMap, and its values show in logs and errors."""
    data = doc.data
    found: list[tuple[Path_, str]] = []
    for i, src in enumerate(data["sources"]):
        secrets = [(("jdbc", "password"), src.get("jdbc", {}).get("password"))]
        secrets += [(("options", k), v) for k, v in src.get("options", {}).items()]
        for field, value in secrets:
            if field[-1].lower() not in _PASSWORD_KEYS or value is None:
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
    for where, text in _strings_with_paths(data, ()):
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


def _column_problems(doc: _Located, file: str) -> list[SpecProblem]:
    """Fields the target names that are not columns of the batch, when its columns are
    known before Spark starts: no transform, so one source, and that source declares its
    schema. A nested field a.b is checked by its column a; names match case included, as
    the run's checks (runner/fields.py) match them."""
    data = doc.data
    sources = data["sources"]
    if "transform" in data or len(sources) != 1:
        return []
    source = sources[0]
    if source["format"] not in _FILE_FORMATS or "schema" not in source:
        return []
    declared = ddl_columns(source["schema"])
    discovered = _partition_directories(source.get("path", ""), Path(file).parent)
    if declared is None or discovered is None:  # Spark tells at run time
        return []
    columns = (*declared, *(c for c in discovered if c not in declared))
    problems: dict[tuple[Path_, str], SpecProblem] = {}  # a name given twice, said once
    for role, name, roots in _named_columns(data["target"]):
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


def _partition_directories(path: str, base: Path) -> list[str] | None:
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


def _named_columns(target: dict[str, Any]) -> Iterator[tuple[str, str, tuple[Path_, ...]]]:
    """(role, field name, where the spec may give it) for every input field the target
    reads; the run checks the same ones (ops/keys.py, commands/run.py, ops/change_feed.py)."""
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
    operation = target.get("operation", _default(Target, "operation"))
    _, precombine = _merge_settings(target, from_properties(target.get("properties", {})))
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
        for at, text in _strings_with_paths(_value_at(data, root), root):
            if name in (part.split(":")[0].strip() for part in text.split(",")):
                return at
    return roots[0]


def _column_hint(column: str, columns: tuple[str, ...]) -> str:
    same = [c for c in columns if c.lower() == column.lower()]
    if same:
        return f" (did you mean '{same[0]}'? names differ only in case)"
    return _nearest(column, list(columns))


def _transform_problems(doc: _Located, file: str) -> list[SpecProblem]:
    """transform.sql that is not one query, read without a JVM (runner/spec/transform.py)."""
    not_a_query = (
        transform_problem(doc.data["transform"]["sql"]) if "transform" in doc.data else None
    )
    if not not_a_query:
        return []
    line, col = doc.mark(("transform", "sql"))
    return [SpecProblem(file, line, col, "transform.sql", not_a_query)]


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
        return None, [SpecProblem(shown, 1, 1, "", f"cannot read the file: {exc.strerror}")]
    doc, problems = _locate(text, shown)
    if doc is None:
        return None, problems
    if not isinstance(doc.data, dict):
        return None, [SpecProblem(shown, 1, 1, "", "the spec must be a mapping of keys to values")]
    problems += _schema_problems(doc, shown)
    if not problems:
        problems += _semantic_problems(doc, shown)
        if parse_transform:
            problems += _transform_problems(doc, shown)
        problems += _password_problems(doc, shown)
        problems += _column_problems(doc, shown)
        if resolve_paths:
            problems += _unset_path_variables(doc, shown)
    if problems:
        return None, sorted(problems, key=lambda p: (p.line, p.column))
    data = _with_paths_resolved(doc.data) if resolve_paths else doc.data
    return _build(data, file.resolve()), []


def load_spec(
    path: str | Path, resolve_paths: bool = True, parse_transform: bool = True
) -> PipelineSpec:
    """Load and validate a spec file, or raise InvalidSpecError listing every problem."""
    spec, problems = check_spec_file(path, resolve_paths, parse_transform)
    if problems:
        raise InvalidSpecError(problems)
    assert spec is not None
    return spec
