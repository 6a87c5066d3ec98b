"""What `runner validate` checks beyond the spec file: the spec against what its sources tell
without a JVM, the mistakes a run would otherwise stop at after a Spark start.

A source's columns are known from its declared `schema:`, or, for a local path, from a Delta
source's log or a parquet source's footers (runner/sources/kinds/: `input_schema`); a source
on an object store is not read (validate needs no credentials). Where every source's columns
are known: a column transform.sql or an expectation reads that is not there
(runner/spec/sql_columns.py), and a string ordering column (the run's refusal,
runner/spec/text_order.py). For a chained local Delta source `{since: last}` handing on
deletes: whether the table keeps the change data feed a second run needs.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from runner.errors import SpecProblem, UserError
from runner.spec.columns import partition_directories
from runner.spec.ddl_types import arrow_field_type, ddl_arrow_schema
from runner.spec.loader import SpecRead
from runner.spec.located import Path_, Problems
from runner.spec.model import PipelineSpec, Source, Target
from runner.spec.schema_check import nearest
from runner.spec.sql_columns import expression_columns, query_columns
from runner.spec.text_order import text_order_fix, text_order_refusal
from runner.spec.transform_schema import transform_schema
from runner.storage.location import is_local, locate
from runner.storage.meta_columns import (
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    RESERVED_PREFIX,
)

# what a change data feed's read adds to a source's columns
_FEED_FIELDS = (
    pa.field(CHANGE_TYPE, pa.string()),
    pa.field(COMMIT_VERSION, pa.int64()),
    pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC")),
)


def fact_problems(read: SpecRead, file: str) -> list[SpecProblem]:
    """The problems of the spec's valid parts against its sources, placed in `file`."""
    spec, doc = read.checkable, read.doc
    if spec is None or doc is None:
        return []
    problem = Problems(doc, file)
    _check_change_feeds(spec, problem)
    sources = _source_schemas(spec)
    if sources is not None:
        columns = _batch_columns(spec, sources, problem)
        if columns is not None:
            _check_expectations(spec, columns, problem)
        _check_text_order(spec, sources, problem)
    return problem.found


# a partition directory's column: Spark infers its type from the directory names
_GUESSED = {"runner.type": "inferred by Spark"}


def _source_schemas(spec: PipelineSpec) -> dict[str, pa.Schema] | None:
    """Each source's columns as Spark gives them, by name; None unless all are known."""
    schemas = {}
    for source in spec.sources:
        schema = _source_schema(source)
        if schema is None:
            return None
        schemas[source.name] = schema
    return schemas


def _source_schema(source: Source) -> pa.Schema | None:
    """A declared schema (with the `name=value` directories Spark's partition discovery
    adds under a local path), unless Spark decodes the columns (jdbc, kafka); else, for a
    local path, what its kind reads without a JVM (a Delta log, parquet footers)."""
    path = source.path or ""
    if source.jdbc is not None or source.kafka is not None:
        return None
    if not source.schema:
        return _read_schema(source) if path and is_local(path) else None
    schema = ddl_arrow_schema(source.schema)
    found = partition_directories(path, Path("/")) if is_local(path) else None
    if schema is None or found is None:
        return None
    schema = _with(schema, [pa.field(name, pa.string(), metadata=_GUESSED) for name in found])
    if source.incremental and source.incremental.mode == "since_last":
        schema = _with(schema, list(_FEED_FIELDS))
    return schema


def _read_schema(source: Source) -> pa.Schema | None:
    """The columns a local source's kind reads (the registry, and delta-rs, load only
    here: most specs declare their schema, and validate stays quick)."""
    from runner.sources.kinds import kind_of

    try:
        schema = kind_of(source).input_schema(source).schema
    except (UserError, OSError):  # not there yet, say: the run reports what it finds then
        return None
    if schema is not None and source.incremental and source.incremental.mode == "since_last":
        schema = _with(schema, list(_FEED_FIELDS))
    return schema


def _with(schema: pa.Schema, fields: list[pa.Field]) -> pa.Schema:
    names = set(schema.names)
    return pa.schema([*schema, *(f for f in fields if f.name not in names)])


def _batch_columns(
    spec: PipelineSpec, sources: dict[str, pa.Schema], problem: Problems
) -> list[str] | None:
    """The batch's column names (the transform's result, or the one source's), with a
    problem for each column transform.sql reads that no source has."""
    if not spec.transform_sql:
        return list(next(iter(sources.values())).names)
    found = query_columns(spec.transform_sql, sources)
    if found is None:
        return None
    known = [name for schema in sources.values() for name in schema.names]
    for name, offset in found.unknown:
        problem(
            ("transform", "sql"),
            f"column '{name}' is not a column of {_whose(sources)}{nearest(name, known)}; "
            f"{_listed(sources)}: fix the query, or the source's schema",
            offset,
        )
    return None if found.unknown else list(found.result) or None


def _whose(sources: dict[str, pa.Schema]) -> str:
    names = [f"'{name}'" for name in sources]
    return f"source {names[0]}" if len(names) == 1 else f"any of sources {', '.join(names)}"


def _listed(sources: dict[str, pa.Schema]) -> str:
    return "; ".join(
        f"source '{name}' has {', '.join(_shown(schema.names))}" for name, schema in sources.items()
    )


def _shown(names: list[str]) -> list[str]:
    return [n for n in names if not n.startswith(RESERVED_PREFIX)]


def _check_expectations(spec: PipelineSpec, columns: list[str], problem: Problems) -> None:
    """Each expectation reads only the batch's columns (its history columns too), as the
    run checks with Spark before any work; names match without regard to case."""
    target = spec.target
    scd = [target.scd.start_column, target.scd.end_column, target.scd.current_column]
    available = [*columns, *(scd if target.keeps_history else [])]
    lowered = {name.lower() for name in available}
    whose = "the transform's output columns" if spec.transform_sql else "the source's columns"
    for i, rule in enumerate(spec.expectations):
        read = expression_columns(rule.sql)
        for name, offset in read or []:
            if name.lower() in lowered:
                continue
            problem(
                ("expectations", i, "sql"),
                f"expectation '{rule.name}' reads column '{name}', which is not among {whose}"
                f"{nearest(name, available)}: {', '.join(_shown(available))}; fix its SQL",
                offset,
            )


def _check_text_order(spec: PipelineSpec, sources: dict[str, pa.Schema], problem: Problems) -> None:
    """A string precombine_field (or cdc.sequence_by), refused as a run refuses it."""
    target = spec.target
    column = target.precombine_field
    if column is None or target.operation == "delete" or target.precombine_string_order:
        return
    if any(b"runner.type" in (f.metadata or {}) for schema in sources.values() for f in schema):
        return  # a partition directory's type is Spark's to infer
    if spec.transform_sql:
        result = transform_schema(spec.transform_sql, sources)
        if isinstance(result, str):  # the column's type is Spark's to pick
            return
        batch = result
    else:
        batch = next(iter(sources.values()))
    kind = arrow_field_type(batch, column)
    if kind is None or not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return
    problem(
        _ordering_field(problem, target),
        f"{text_order_refusal(target, 'string')}. {text_order_fix(column)}",
    )


def _ordering_field(problem: Problems, target: Target) -> Path_:
    """Where the spec names the ordering column: cdc.sequence_by, precombine_field, or the
    Hudi property that gives it."""
    if target.cdc:
        return ("target", "cdc", "sequence_by")
    written = problem.doc.data["target"]
    if "precombine_field" in written:
        return ("target", "precombine_field")
    given = written.get("properties", {})
    name = next((k for k, v in given.items() if v == target.precombine_field), None)
    return ("target", "properties", name) if name else ("target", "precombine_field")


def _check_change_feeds(spec: PipelineSpec, problem: Problems) -> None:
    """A local Delta source `{since: last}` that hands on deletes reads its table's change
    data feed from the second run on: refused now, not then, when the table keeps none."""
    for i, source in enumerate(spec.sources):
        incremental = source.incremental
        if not (incremental and incremental.mode == "since_last"):
            continue
        path = source.path
        if incremental.deletes != "propagate" or not path or not is_local(path):
            continue
        from runner.delta.snapshot import open_table
        from runner.sources.delta import no_change_feed

        try:
            table = open_table(locate(path))
        except (UserError, OSError):
            continue
        if table is not None and not table.has_change_feed:
            where = f"source '{source.name}'"
            problem(("sources", i, "incremental"), no_change_feed(path, where))
