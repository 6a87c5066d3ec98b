"""The rules a spec must follow beyond its JSON Schema: settings that depend on each other.

Each area has its own step (sources, keys and index, merge settings, change feed, quarantine,
environment references); each reports through `Problems`, which places a problem where its
field is written. Nothing here imports pyspark or sqlglot at import time.
"""

from __future__ import annotations

import re
from typing import Any

from runner.errors import SpecProblem
from runner.hudi.merge_names import from_properties
from runner.spec.columns import named_columns
from runner.spec.debezium import OPEN_KEY, debezium_sources
from runner.spec.derived import FILE_FORMATS, TEXT_FORMATS, merge_settings, model_default
from runner.spec.keygen_settings import field_list, resolve_key_generator
from runner.spec.located import Located, Path_, Problems, strings_with_paths
from runner.spec.model import FIELD_MERGE_MODES, MergeMode, ScdSpec, Target
from runner.spec.routing import routing_problems
from runner.spec.secrets import env_names, malformed_refs
from runner.spec.transform import transform_problem

_PARSE_MODE_OPTIONS = ("mode", "columnnameofcorruptrecord")


def semantic_problems(doc: Located, file: str) -> list[SpecProblem]:
    """Every semantic problem of a spec that passed the JSON Schema."""
    data = doc.data
    target = data["target"]
    problem = Problems(doc, file)
    _check_sources(data, problem)
    _check_keys(target, problem)
    operation = target.get("operation", model_default(Target, "operation"))
    merge_mode = _check_merge(target, operation, problem)
    if "delete_marker" in target and operation != "upsert":
        problem(("target", "delete_marker"), f"applies to operation upsert, not {operation}")
    _check_change_feed(target, operation, merge_mode, problem)
    _check_debezium_target(data, operation, problem)
    for at, message in routing_problems(data):
        problem(at, message)
    if target.get("filter_dupes") and operation != "insert":
        problem(("target", "filter_dupes"), f"applies to operation insert, not {operation}")
    if target.get("bulk_insert_sort", "none") != "none" and operation != "bulk_insert":
        where = ("target", "bulk_insert_sort")
        problem(where, f"applies to operation bulk_insert, not {operation}")
    _check_deletes_handed_on(data, operation, problem)
    _check_quarantine(data, problem)
    _check_rename_drop(target, problem)
    _check_catalog(target.get("catalog"), problem)
    for path, text in strings_with_paths(data, ()):
        for bad in malformed_refs(text):
            problem(
                path,
                f"{bad} is not a valid environment reference; write ${{env:NAME}} with NAME "
                "made of letters, digits and underscores",
            )
    return problem.found


def transform_problems(doc: Located, file: str) -> list[SpecProblem]:
    """transform.sql that is not one query, read without a JVM (runner/spec/transform.py)."""
    not_a_query = (
        transform_problem(doc.data["transform"]["sql"]) if "transform" in doc.data else None
    )
    if not not_a_query:
        return []
    line, col = doc.mark(("transform", "sql"))
    return [SpecProblem(file, line, col, "transform.sql", not_a_query)]


def _check_sources(data: dict[str, Any], problem: Problems) -> None:
    """Source names given once, settings that fit each source's format, and a transform
    where there are several sources."""
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


def _check_deletes_handed_on(data: dict[str, Any], operation: str, problem: Problems) -> None:
    """A chained source hands on its table's deletes, which only an upsert (or delete, or
    change feed) target applies: an insert would store them as rows."""
    if operation not in ("insert", "bulk_insert"):
        return
    for i, src in enumerate(data["sources"]):
        incremental = src.get("incremental")
        from_table = src["format"] == "delta" and isinstance(incremental, dict)
        handed_on = from_table and "since" in incremental
        if handed_on and incremental.get("deletes", "propagate") == "propagate":
            problem(
                ("sources", i, "incremental"),
                f"hands on the deletes of its table, which operation {operation} cannot "
                "apply; use operation upsert, or set `deletes: ignore` to read inserted "
                "and updated rows only",
            )


def _source_problem(src: dict[str, Any]) -> tuple[Path_, str] | None:
    """A source's settings that do not fit its format, as (field path, message)."""
    fmt, incremental = src["format"], src.get("incremental")
    if fmt != "jdbc" and "jdbc" in src:
        return ("jdbc",), f"applies to format jdbc, not {fmt}"
    if "on_bad_file" in src and fmt not in FILE_FORMATS:
        return ("on_bad_file",), f"applies to file formats ({', '.join(FILE_FORMATS)}), not {fmt}"
    if "on_bad_record" in src and fmt not in (*TEXT_FORMATS, "kafka"):
        return ("on_bad_record",), (
            f"applies to csv and json, whose records can fail to parse; {fmt} records are typed"
        )
    for option in src.get("options", {}):
        if fmt in TEXT_FORMATS and option.lower() in _PARSE_MODE_OPTIONS:
            return ("options", option), (
                "the runner decides what happens to records that do not parse: use "
                "on_bad_record (fail, quarantine or drop) instead of this Spark option"
            )
    if fmt != "kafka" and "kafka" in src:
        return ("kafka",), f"applies to format kafka, not {fmt}"
    if fmt == "kafka":
        return _kafka_problem(src)
    if fmt == "jdbc":
        if "path" in src:
            return ("path",), "a jdbc source has no path; give jdbc.table or jdbc.query"
        if ("table" in src["jdbc"]) == ("query" in src["jdbc"]):
            return ("jdbc",), "give exactly one of table and query"
    if incremental is None:
        return None
    wanted = {"new_files": FILE_FORMATS, "since": ("delta",), "column": ("jdbc",)}
    kind = (
        "new_files"
        if incremental == "new_files"
        else ("since" if "since" in incremental else "column")
    )
    if fmt not in wanted[kind]:
        fitting = {"delta": "{since: last}", "jdbc": "{column: NAME}"}.get(fmt, "new_files")
        return ("incremental",), f"does not apply to format {fmt}; it takes {fitting}"
    return None


def _kafka_problem(src: dict[str, Any]) -> tuple[Path_, str] | None:
    """A Kafka source's settings that do not go together."""
    kafka, incremental = src["kafka"], src.get("incremental")
    value_format = kafka.get("value_format", "json")
    if "path" in src:
        return ("path",), "a kafka source has no path; give kafka.topics or kafka.topic_pattern"
    if ("topics" in kafka) == ("topic_pattern" in kafka):
        return ("kafka",), "give exactly one of topics and topic_pattern"
    if value_format == "debezium":
        return _debezium_problem(src)
    if value_format == "json" and "schema" not in src:
        return ("schema",), (
            "a kafka source with value_format json needs the schema of its values (Spark "
            'DDL, e.g. "order_id bigint, amount double"): records are not sampled to infer one'
        )
    if value_format != "json" and "schema" in src:
        return ("schema",), (
            f"value_format {value_format} takes no schema: "
            + (
                "the Avro schema gives the columns"
                if value_format == "avro"
                else "raw values are the binary column `value`, for the transform to decode"
            )
        )
    registry, schema_file = "schema_registry_url" in kafka, "avro_schema" in kafka
    if value_format == "avro" and registry == schema_file:
        return ("kafka",), (
            "value_format avro takes exactly one of avro_schema (the writer schema's file) and "
            "schema_registry_url (values in Confluent's wire format)"
        )
    if value_format != "avro" and (registry or schema_file):
        field = "schema_registry_url" if registry else "avro_schema"
        return ("kafka", field), f"applies to value_format avro, not {value_format}"
    if value_format == "raw" and "on_bad_record" in src:
        return ("on_bad_record",), "raw values are not parsed, so no record can fail to parse"
    if incremental is not None and (
        not isinstance(incremental, dict) or set(incremental) != {"since"}
    ):
        return ("incremental",), "a kafka source takes {since: last}: the offsets last read"
    return None


def _debezium_problem(src: dict[str, Any]) -> tuple[Path_, str] | None:
    """A Debezium source's settings that do not go together."""
    kafka, incremental = src["kafka"], src.get("incremental")
    if "avro_schema" in kafka:
        return ("kafka", "avro_schema"), (
            "value_format debezium reads Avro through schema_registry_url (the envelope's "
            "schema changes with the table); drop avro_schema"
        )
    if incremental is not None and (
        not isinstance(incremental, dict) or set(incremental) != {"since"}
    ):
        return ("incremental",), "a kafka source takes {since: last}: the offsets last read"
    return None


def _check_debezium_target(data: dict[str, Any], operation: str, problem: Problems) -> None:
    """A target fed by Debezium events applies them as a change feed, keyed by the message
    key unless it names its own record key."""
    if not debezium_sources(data):
        return
    target = data["target"]
    if operation != "upsert":
        problem(
            ("target", "operation"),
            f"a Debezium source's events are applied as a change feed, with upsert, not "
            f"{operation}: drop target.operation",
        )
    if (
        field_list(target.get("record_key")) == field_list(OPEN_KEY)
        and "hash_fields" in (target["index"])
    ):
        problem(
            ("target", "index", "hash_fields"),
            "names record key fields, and target.record_key is left to the message key: "
            "name the record key too (target.record_key), or drop hash_fields",
        )


def _check_keys(target: dict[str, Any], problem: Problems) -> None:
    """The key generator (runner/spec/keygen_settings.py), and the index's hash fields,
    which must be record key fields."""
    keygen = resolve_key_generator(
        target, lambda path, message: problem(("target", *path), message)
    )
    record_key = keygen.record_key if keygen else field_list(target.get("record_key"))
    index = target["index"]
    if "hash_fields" not in index or record_key == field_list(OPEN_KEY):
        return  # an open key (Debezium's message key): _check_debezium_target says it
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


def _check_merge(target: dict[str, Any], operation: str, problem: Problems) -> MergeMode:
    """merge_mode, precombine_field and merger, given in the spec's fields or by Hudi's
    names in target.properties; returns the merge mode they come to."""
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
    merge_mode, precombine_field = merge_settings(target, from_props)
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
    return merge_mode


# The target's fields a table stores by name (runner.* settings: the key generator's fields,
# index.hash_fields, cdc.sequence_by; COMPLEX record keys and hive partition paths hold
# them too): a rename of such a column cannot follow them.
_STORED_BY_NAME = ("record key field", "partition field", "index hash field", "cdc.sequence_by")


def _check_rename_drop(target: dict[str, Any], problem: Problems) -> None:
    """target.rename and target.drop: under schema_evolution full, never a column the target
    names (it would be renamed or dropped away from the spec), never two ways at once."""
    renames, drops = target.get("rename", {}), target.get("drop", [])
    if not renames and not drops:
        return
    if target.get("schema_evolution") != "full":
        where = ("target", "rename" if renames else "drop")
        problem(
            where,
            "renames and drops need target.schema_evolution: full (the table's "
            "files are rewritten once in the new schema)",
        )
    named = {name.split(".")[0]: role for role, name, _ in named_columns(target)}
    stored = {
        name.split(".")[0]: role
        for role, name, _ in named_columns(target)
        if role in _STORED_BY_NAME
    }
    for old, new in renames.items():
        kept = new if new in stored else old
        if kept in stored:
            problem(
                ("target", "rename", old),
                f"rename {old} -> {new}: {kept} is the {stored[kept]}, which the table keeps "
                f"by name (in its settings, record keys and partition paths), so a rename "
                f"cannot follow it and the run would stop; remove this entry and name {old} "
                f"in the spec (if the input now has {new}: a transform with "
                f"`SELECT {new} AS {old}, ...`)",
            )
        elif old in named:
            problem(
                ("target", "rename", old),
                f"{old} is the {named[old]}: renaming it away "
                f"would leave the spec naming a column the table no longer has; name {new} "
                "in the spec instead, as the input will",
            )
        elif old == new or new in renames or list(renames.values()).count(new) > 1:
            problem(
                ("target", "rename", old),
                f"rename {old} -> {new}: each new name must be "
                "given once, differ from its old one and not be renamed again",
            )
        elif new in drops:
            problem(("target", "rename", old), f"{new} is also in target.drop")
    for i, name in enumerate(drops):
        if name in named:
            problem(("target", "drop", i), f"{name} is the {named[name]}: it cannot be dropped")
        elif name in renames:
            problem(("target", "drop", i), f"{name} is also renamed in target.rename")


_CATALOG_FIELDS = {"glue": ("region", "endpoint_url"), "hive": ("uri",)}
_CATALOG_NAME = "lowercase letters, digits and _ (Athena and the Hive Metastore keep no others)"
_CATALOG_FORMS = {
    "database": (re.compile(r"[a-z0-9_]{1,255}"), _CATALOG_NAME),
    "table": (re.compile(r"[a-z0-9_]{1,255}"), _CATALOG_NAME),
    "region": (re.compile(r"[a-z]{2}(-[a-z]+)+-[0-9]+"), "an AWS region such as eu-west-1"),
    "endpoint_url": (re.compile(r"https?://[^\s/]+(/\S*)?"), "an http:// or https:// URL"),
    "uri": (re.compile(r"thrift://[^\s/:]+:[0-9]{1,5}"), "thrift://host:port (thrift://hms:9083)"),
}


def _check_catalog(catalog: dict[str, Any] | None, problem: Problems) -> None:
    """A catalog's settings belong to its type (glue: region, endpoint_url; hive: uri) and
    have their forms (a value holding an ${env:NAME} reference is checked where it is used)."""
    if catalog is None:
        return
    kind = catalog["type"]
    for other, fields in _CATALOG_FIELDS.items():
        for name in fields:
            if other != kind and name in catalog:
                problem(
                    ("target", "catalog", name),
                    f"applies to a catalog of type {other}, not {kind}; remove it",
                )
    for name, (form, what) in _CATALOG_FORMS.items():
        value = catalog.get(name)
        if value is not None and not env_names(value) and not form.fullmatch(value):
            problem(("target", "catalog", name), f"{value!r}: use {what}")


def _check_quarantine(data: dict[str, Any], problem: Problems) -> None:
    """Expectations (names given once) and every use of target.quarantine."""
    target = data["target"]
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
    if target.get("on_schema_mismatch") == "quarantine" and "quarantine" not in target:
        problem(
            ("target", "on_schema_mismatch"),
            "quarantine needs target.quarantine.path, the table the records go to; "
            "add it, or use fail or refuse",
        )
    if "quarantine" in target and target["quarantine"]["path"] == target["path"]:
        problem(
            ("target", "quarantine", "path"),
            "the quarantine table must not be the target table; give it its own path",
        )


def _check_change_feed(
    target: dict[str, Any],
    operation: str,
    merge_mode: str,
    problem: Problems,
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
    history = [scd.get(name, model_default(ScdSpec, name)) for name in names]
    feed = {cdc["sequence_by"], cdc.get("operation_column")}
    for name, value in zip(names, history, strict=True):
        if value in feed or history.count(value) > 1:
            problem(
                ("target", "scd", name),
                f"'{value}' is already used by another cdc or scd column; give each its own name",
            )
