"""The schema of transform.sql's result, told without Spark where Spark leaves no choice.

`runner validate --against` (runner/commands/schema_against.py) knows the sources' schemas;
sqlglot resolves the query's columns against them (stars, aliases, CTEs, joins). A result
column is trusted only where its type follows from the query alone: a source column (or a
struct's field) passed on, an explicit CAST, a string or boolean literal. Any other
expression (arithmetic, functions, numeric literals) has the type Spark's analyzer picks,
which this check does not guess: the column is named, and the comparison left to a dry run.
Names are resolved case-sensitively; a query that relies on Spark's case-insensitivity is
left to Spark too.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import NormalizationStrategy
from sqlglot.dialects.spark import Spark
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from runner.spec.ddl_types import arrow_type


class _CaseKept(Spark):
    """Spark's SQL with names kept as written: the result's column names are the table's."""

    NORMALIZATION_STRATEGY = NormalizationStrategy.CASE_SENSITIVE


_PASSED_ON = (exp.Column, exp.Dot, exp.Cast, exp.TryCast, exp.Boolean)


def transform_schema(sql: str, tables: Mapping[str, pa.Schema]) -> pa.Schema | str:
    """The result's schema, or why it is Spark's to decide."""
    schema: dict[str, object] = {}
    for name, table in tables.items():
        columns = sql_columns(table)
        if columns is None:
            return f"source '{name}' has a column type this check does not read"
        schema[name] = columns
    try:
        written = sqlglot.parse_one(sql, dialect=_CaseKept)
        unnamed = _unnamed(written)
        if unnamed:
            return unnamed
        query = qualify(written.copy(), schema=schema, dialect=_CaseKept, quote_identifiers=False)
        typed = annotate_types(query, schema=schema, dialect=_CaseKept)
    except SqlglotError as exc:
        first = str(exc).splitlines()[0]
        return f"transform.sql does not resolve here ({first})"
    # every SELECT of the query (CTEs and subqueries too) only passes values on or casts
    # them: a column computed in a subquery has the type Spark picks, wherever it ends up
    for select in typed.find_all(exp.Select):
        found = _untrusted(select)
        if found:
            return found
    return _result(typed)


def _unnamed(query: exp.Expr) -> str | None:
    """A computed column without an alias, which Spark names by its text (`CAST(n AS
    INT)`, not `n`)."""
    for select in query.find_all(exp.Select):
        for projection in select.expressions:
            if not isinstance(projection, (exp.Alias, exp.Column, exp.Dot, exp.Star)):
                text = projection.sql(dialect="spark")
                return f"transform.sql's column `{text}` has no alias: Spark names it by its text"
    return None


def _untrusted(select: exp.Select) -> str | None:
    for projection in select.selects:
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        text = _unqualified(inner).sql(dialect="spark")
        trusted = isinstance(inner, _PASSED_ON) or (
            isinstance(inner, exp.Literal) and inner.is_string
        )
        if not trusted:
            name = projection.alias_or_name
            return f"column {name} of transform.sql is `{text}`, whose type Spark's analyzer picks"
    return None


def _result(query: exp.Expr) -> pa.Schema | str:
    if isinstance(query, exp.SetOperation):  # UNION, INTERSECT, EXCEPT
        left, right = _result(query.left), _result(query.right)
        if isinstance(left, str) or isinstance(right, str):
            return left if isinstance(left, str) else right
        if left.types != right.types:
            return "the sides of a set operation have different types, which Spark coerces"
        return left
    if not isinstance(query, exp.Query):
        return "transform.sql is not a plain query"
    fields = []
    for projection in query.selects:
        inner = projection.this if isinstance(projection, exp.Alias) else projection
        name = projection.alias_or_name
        text = _unqualified(inner).sql(dialect="spark")
        kind = arrow_type(projection.type.sql(dialect="spark")) if projection.type else None
        if kind is None:
            return f"column {name} of transform.sql (`{text}`) has a type this check does not read"
        fields.append(pa.field(name, kind))
    return pa.schema(fields)


def _unqualified(expression: exp.Expr) -> exp.Expr:
    """The expression as the user wrote it, without the table names qualify() added."""

    def bare(node: exp.Expr) -> exp.Expr:
        return exp.column(node.name) if isinstance(node, exp.Column) else node

    return expression.copy().transform(bare)


def sql_columns(table: pa.Schema) -> dict[str, str] | None:
    columns = {f.name: _sql_type(f.type) for f in table}
    if any(kind is None for kind in columns.values()):
        return None
    return {name: kind for name, kind in columns.items() if kind is not None}


_SQL_TYPES = {
    pa.bool_(): "BOOLEAN",
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
    pa.string(): "STRING",
    pa.binary(): "BINARY",
    pa.date32(): "DATE",
}


def _sql_type(kind: pa.DataType) -> str | None:
    """Spark's SQL name of an Arrow type as Spark gives it (runner/spec/ddl_types.py)."""
    if kind in _SQL_TYPES:
        return _SQL_TYPES[kind]
    if pa.types.is_timestamp(kind):
        return "TIMESTAMP" if kind.tz else "TIMESTAMP_NTZ"
    if pa.types.is_decimal(kind):
        return f"DECIMAL({kind.precision}, {kind.scale})"
    if pa.types.is_list(kind):
        element = _sql_type(kind.value_type)
        return f"ARRAY<{element}>" if element else None
    if pa.types.is_map(kind):
        key, value = _sql_type(kind.key_type), _sql_type(kind.item_type)
        return f"MAP<{key}, {value}>" if key and value else None
    if pa.types.is_struct(kind):
        fields = [(f.name, _sql_type(f.type)) for f in kind]
        if any(t is None for _, t in fields):
            return None
        return "STRUCT<" + ", ".join(f"`{n}`: {t}" for n, t in fields) + ">"
    return None
