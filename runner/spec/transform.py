"""transform.sql is one query: its result is the batch, and nothing else may run.

Spark's `spark.sql()` runs a command (INSERT, CREATE, SET, ...) as soon as it is given one,
so a statement must be refused before Spark sees it. `runner validate` has no JVM: it
parses the text with sqlglot's Spark dialect and refuses a statement that is not a query,
and more than one statement. Where sqlglot cannot parse the text (Spark syntax it does not
know), only a text that starts like a statement is refused here; a run then asks Spark's
own parser (runner/sources/plan.py), which decides.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlglot import exp

QUERY_FORMS = (
    "SELECT, WITH ... SELECT, VALUES, TABLE t, FROM t SELECT, or a UNION, INTERSECT or "
    "EXCEPT of them"
)

# How Spark statements that are not queries start, as shown to the user (longest first
# wins). No query starts with any of their first words.
STATEMENT_KINDS = (
    "INSERT OVERWRITE LOCAL DIRECTORY",
    "INSERT OVERWRITE DIRECTORY",
    "INSERT OVERWRITE TABLE",
    "INSERT OVERWRITE",
    "INSERT INTO TABLE",
    "INSERT INTO",
    "INSERT",
    "CREATE OR REPLACE GLOBAL TEMPORARY VIEW",
    "CREATE OR REPLACE TEMPORARY VIEW",
    "CREATE OR REPLACE TEMP VIEW",
    "CREATE OR REPLACE VIEW",
    "CREATE OR REPLACE TABLE",
    "CREATE OR REPLACE TEMPORARY FUNCTION",
    "CREATE OR REPLACE FUNCTION",
    "CREATE GLOBAL TEMPORARY VIEW",
    "CREATE TEMPORARY VIEW",
    "CREATE TEMP VIEW",
    "CREATE VIEW",
    "CREATE EXTERNAL TABLE",
    "CREATE TEMPORARY TABLE",
    "CREATE TABLE",
    "CREATE TEMPORARY FUNCTION",
    "CREATE FUNCTION",
    "CREATE DATABASE",
    "CREATE SCHEMA",
    "CREATE NAMESPACE",
    "CREATE",
    "REPLACE TABLE",
    "DROP TEMPORARY FUNCTION",
    "DROP TEMPORARY VARIABLE",
    "DROP TABLE",
    "DROP VIEW",
    "DROP FUNCTION",
    "DROP DATABASE",
    "DROP SCHEMA",
    "DROP NAMESPACE",
    "DROP",
    "ALTER TABLE",
    "ALTER VIEW",
    "ALTER DATABASE",
    "ALTER SCHEMA",
    "ALTER NAMESPACE",
    "ALTER",
    "SET VARIABLE",
    "SET VAR",
    "SET",
    "RESET",
    "ADD JAR",
    "ADD JARS",
    "ADD FILE",
    "ADD FILES",
    "ADD ARCHIVE",
    "ADD ARCHIVES",
    "ADD",
    "LIST",
    "CACHE LAZY TABLE",
    "CACHE TABLE",
    "UNCACHE TABLE",
    "CLEAR CACHE",
    "REFRESH TABLE",
    "REFRESH FUNCTION",
    "REFRESH",
    "MSCK REPAIR TABLE",
    "REPAIR TABLE",
    "DELETE FROM",
    "DELETE",
    "UPDATE",
    "MERGE INTO",
    "MERGE",
    "TRUNCATE TABLE",
    "USE",
    "SHOW",
    "DESCRIBE",
    "DESC",
    "EXPLAIN",
    "ANALYZE TABLE",
    "ANALYZE TABLES",
    "LOAD DATA",
    "DECLARE",
    "EXECUTE IMMEDIATE",
    "CALL",
    "COMMENT ON",
    "GRANT",
    "REVOKE",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
)
_BY_WORDS = sorted((tuple(k.split()) for k in STATEMENT_KINDS), key=len, reverse=True)

# Whitespace, comments and opening parentheses before the first word.
_LEADING = re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/|\()*", re.DOTALL)
_WORDS = re.compile(r"[A-Za-z]+(?:\s+[A-Za-z]+)*")


def statement_kind(sql: str) -> str | None:
    """What kind of statement the text is when it is not a query, as the user would name
    it (INSERT OVERWRITE DIRECTORY, CREATE TABLE, SET, ...); None when it starts like a
    query, or when neither its first words nor sqlglot tell."""
    return _leading_kind(sql) or _parsed_kind(_statements(sql))


def transform_problem(sql: str) -> str | None:
    """Why transform.sql cannot be the batch's query, without a JVM; None when it is one
    query or when only Spark's parser can tell (a run asks it before running anything)."""
    statements = _statements(sql)
    if statements is None:  # syntax sqlglot does not know: refuse only a statement's start
        kind = _leading_kind(sql)
        return not_a_query(kind) if kind else None
    if not statements:
        return f"holds no statement, only comments or ';'; give one query ({QUERY_FORMS})"
    if len(statements) > 1:
        return (
            f"holds {len(statements)} statements separated by ';'; give one query "
            f"({QUERY_FORMS}), whose result is the batch"
        )
    kind = _leading_kind(sql) or _parsed_kind(statements)
    return not_a_query(kind) if kind else None


def not_a_query(kind: str) -> str:
    """The refusal of a statement that is not a query, to follow 'transform.sql'."""
    article = "an" if kind[0] in "AEIO" or kind.startswith(("UPDATE", "UNCACHE", "MSCK")) else "a"
    return (
        f"is {article} {kind} statement, not a query: the transform must be one query "
        f"({QUERY_FORMS}), whose result is the batch"
    )


def _leading_kind(sql: str) -> str | None:
    """The statement kind the text's first words name, if any."""
    start = _LEADING.match(sql)
    words = _WORDS.match(sql, start.end() if start else 0)
    leading = tuple(w.upper() for w in words.group().split()) if words else ()
    for kind in _BY_WORDS:
        if leading[: len(kind)] == kind:
            return " ".join(kind)
    return None


def _statements(sql: str) -> list[exp.Expr] | None:
    """The statements sqlglot's Spark dialect reads in the text (empty ones left out), or
    None when it cannot read it."""
    import sqlglot
    from sqlglot import exp

    # sqlglot warns of Spark syntax it keeps as a plain command: not the user's business
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    try:
        parsed = sqlglot.parse(sql, read="spark")
    except Exception:  # sqlglot failing says nothing about the text: Spark decides
        return None
    return [s for s in parsed if s is not None and not isinstance(s, exp.Semicolon)]


def _parsed_kind(statements: list[exp.Expr] | None) -> str | None:
    """The kind of the first statement as sqlglot reads it, when it is a statement that
    is not a query (a text whose first words do not say: WITH ... INSERT, FROM t INSERT)."""
    from sqlglot import exp

    if not statements:
        return None
    first = statements[0]
    if isinstance(first, (exp.Query, exp.Values)) or not isinstance(first, _statement_types()):
        return None
    if isinstance(first, exp.MultitableInserts):
        return "INSERT"
    if isinstance(first, exp.TruncateTable):
        return "TRUNCATE TABLE"
    if isinstance(first, exp.Command):
        return str(first.this).upper()
    return first.key.upper()


def _statement_types() -> tuple[type[exp.Expr], ...]:
    """sqlglot's expressions for statements that are not queries."""
    from sqlglot import exp

    return (
        exp.Insert,
        exp.MultitableInserts,
        exp.Create,
        exp.Drop,
        exp.Delete,
        exp.Update,
        exp.Merge,
        exp.Alter,
        exp.Set,
        exp.Command,
        exp.Cache,
        exp.Uncache,
        exp.Refresh,
        exp.TruncateTable,
        exp.Use,
        exp.Describe,
        exp.Analyze,
        exp.LoadData,
        exp.Declare,
        exp.Transaction,
        exp.Commit,
        exp.Rollback,
        exp.Grant,
        exp.Revoke,
        exp.Show,
        exp.Comment,
        exp.Execute,
    )
