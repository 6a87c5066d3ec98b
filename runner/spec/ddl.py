"""The top-level column names of a Spark DDL schema string, read without Spark.

"trip_id long, loc struct<lat:double,lon:double>, amt decimal(10,2), `odd, name` string"
names trip_id, loc, amt and `odd, name`. `runner validate` checks the fields a spec names
against them; Spark parses the types, and reports a schema it cannot read, at run time.
"""

from __future__ import annotations

import re

_OPEN, _CLOSE = "<([", ">)]"
_IDENTIFIER = re.compile(r"[A-Za-z0-9_]+")


def ddl_columns(ddl: str) -> tuple[str, ...] | None:
    """The column names, in order; None when the text does not split into `name type`
    columns this reader knows (the check that needs them is then left to Spark)."""
    pieces = top_level_pieces(ddl)
    if pieces is None:
        return None
    names = []
    for piece in pieces:
        name = _column_name(piece.strip())
        if name is None:
            return None
        names.append(name)
    return tuple(names)


def top_level_pieces(ddl: str) -> list[str] | None:
    """ddl split at the commas outside brackets, quotes and backticks."""
    pieces, start, depth, quote = [], 0, 0, ""
    i = 0
    while i < len(ddl):
        char = ddl[i]
        if quote:
            if char == "\\" and quote != "`":
                i += 1  # an escaped character of a string literal
            elif char == quote:
                quote = ""
        elif char in "`'\"":
            quote = char
        elif char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth -= 1
            if depth < 0:
                return None
        elif char == "," and depth == 0:
            pieces.append(ddl[start:i])
            start = i + 1
        i += 1
    if quote or depth:
        return None
    return [*pieces, ddl[start:]]


def _column_name(piece: str) -> str | None:
    """The name of `name type [NOT NULL] [COMMENT '...']`; a backticked name may hold any
    character (a doubled backtick is one backtick)."""
    found = name_and_type(piece)
    return found[0] if found else None


def name_and_type(piece: str) -> tuple[str, str] | None:
    """`name type [NOT NULL] [COMMENT '...']` (or `name: type`) split into the name and the
    rest."""
    if piece.startswith("`"):
        name, i = "", 1
        while i < len(piece):
            if piece[i] == "`":
                if piece[i + 1 : i + 2] != "`":
                    break
                i += 1
            name += piece[i]
            i += 1
        else:
            return None
        rest = piece[i + 1 :]
    else:
        match = _IDENTIFIER.match(piece)
        if match is None:
            return None
        name, rest = match.group(0), piece[match.end() :]
    if not (rest[:1].isspace() or rest[:1] == ":"):
        return None
    kind = rest.lstrip().lstrip(":").strip()
    return (name, kind) if kind else None
