"""The columns transform.sql and the expectations read, checked without Spark where the
input's columns are known (runner/commands/spec_facts.py gathers them).

sqlglot's Spark dialect resolves the query's columns against the sources' schemas (stars,
aliases, CTEs, joins, subqueries, lambdas, LATERAL VIEW). Spark resolves names without
regard to case, and so does this check. A name is called unknown only where sqlglot resolves
the query and the name is neither a source's column nor an alias the query gives; anything
sqlglot cannot resolve is left to Spark, which reports it at run time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, SqlglotError
from sqlglot.optimizer.qualify import qualify

from runner.spec.transform_schema import sql_columns


@dataclass(frozen=True)
class QueryColumns:
    result: tuple[str, ...]  # the query's result columns, as sqlglot names them
    unknown: tuple[tuple[str, int], ...]  # (name as written, its offset in the query) of each


def query_columns(sql: str, tables: Mapping[str, pa.Schema]) -> QueryColumns | None:
    """The result columns of transform.sql over `tables` (by source name) and the column
    names it reads that none of them has; None where sqlglot does not resolve the query, or
    where it reads a table that is not one of them (Spark's catalog may hold it)."""
    schema: dict[str, object] = {}
    for name, table in tables.items():
        columns = sql_columns(table)
        if columns is None:
            return None
        schema[name] = columns
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    try:
        written = sqlglot.parse_one(sql, read="spark")
        if not _reads_only(written, {name.lower() for name in tables}):
            return None
        query = qualify(
            written.copy(),
            schema=schema,
            dialect="spark",
            validate_qualify_columns=False,
            quote_identifiers=False,
        )
    except OptimizeError as exc:
        # a qualified name (t.x) that t lacks is the one resolution error worth naming
        text = str(exc)
        if not text.startswith("Unknown column: "):
            return None
        name = text.removeprefix("Unknown column: ").strip()
        return QueryColumns((), _as_written(written, {name.lower()}) or ((name, -1),))
    except SqlglotError:
        return None
    if not isinstance(query, exp.Query):
        return None
    known = {c.lower() for table in tables.values() for c in table.names}
    known |= {a.lower() for a in _aliases(written)}
    unresolved = {
        column.name.lower()
        for column in query.find_all(exp.Column)
        if not column.table and column.name.lower() not in known
    }
    return QueryColumns(_result_names(query), _as_written(written, unresolved))


def _reads_only(query: exp.Expr, tables: set[str]) -> bool:
    """The query reads no table but `tables` and its own CTEs."""
    own = {cte.alias.lower() for cte in query.find_all(exp.CTE)}
    return all(t.name.lower() in tables | own for t in query.find_all(exp.Table))


def _result_names(query: exp.Query) -> tuple[str, ...]:
    """The result's column names; none where Spark names them otherwise than sqlglot does
    (a column without an alias, a struct's star, a PIVOT)."""
    names = tuple(query.named_selects)
    if query.find(exp.Pivot) or any(n == "*" or n.startswith("_col_") for n in names):
        return ()
    return names


def expression_columns(sql: str) -> list[tuple[str, int]] | None:
    """The top-level column names a boolean expression (an expectation) reads (`s` for
    `s.a.b`), each with its first offset in the text; None where sqlglot does not read it
    as an expression over columns alone."""
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    try:
        parsed = sqlglot.parse_one(sql, read="spark")
    except SqlglotError:
        return None
    if parsed.find(exp.Select, exp.Subquery) is not None:
        return None
    names: dict[str, int] = {}
    for column in parsed.find_all(exp.Column):
        first = _first_part(column)
        names.setdefault(first.name, int(first.meta.get("start", -1)))
    return list(names.items())


def _aliases(query: exp.Expr) -> set[str]:
    """Every name the query itself gives: column aliases, and LATERAL VIEW's or a table
    alias's column names."""
    names = {alias.alias for alias in query.find_all(exp.Alias)}
    for table_alias in query.find_all(exp.TableAlias):
        names |= {column.name for column in table_alias.columns}
    return names


def _as_written(written: exp.Expr, names: set[str]) -> tuple[tuple[str, int], ...]:
    """The unresolved names as the query spells them, each with its first offset."""
    found: dict[str, tuple[str, int]] = {}
    for column in written.find_all(exp.Column):
        low = column.name.lower()
        if low in names and low not in found:
            found[low] = (column.name, _offset(column))
    return tuple(sorted(found.values(), key=lambda item: item[1]))


def _offset(column: exp.Column) -> int:
    """Where a column reference starts in the text; -1 where sqlglot did not say."""
    return int(_first_part(column).meta.get("start", -1))


def _first_part(column: exp.Column) -> exp.Expr:
    """The first name of a dotted reference (`s` of `s.a.b`: a struct column, in an
    expectation; a table, in a query)."""
    for part in ("catalog", "db", "table"):
        found = column.args.get(part)
        if isinstance(found, exp.Expr) and found.name:
            return found
    name: exp.Expr = column.this
    return name
