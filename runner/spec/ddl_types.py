"""The Arrow types of a Spark DDL schema string, read without Spark: what
`runner validate --against` compares with a table's schema (runner/commands/schema_against.py).
"""

from __future__ import annotations

import re

import pyarrow as pa

from runner.spec.ddl import name_and_type, top_level_pieces

# Spark's simple type names, as Spark hands their values to Arrow (timestamps in UTC).
_SIMPLE_TYPES = {
    "boolean": pa.bool_(),
    **dict.fromkeys(("tinyint", "byte"), pa.int8()),
    **dict.fromkeys(("smallint", "short"), pa.int16()),
    **dict.fromkeys(("int", "integer"), pa.int32()),
    **dict.fromkeys(("bigint", "long"), pa.int64()),
    **dict.fromkeys(("float", "real"), pa.float32()),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    **dict.fromkeys(("timestamp", "timestamp_ltz"), pa.timestamp("us", tz="UTC")),
    "timestamp_ntz": pa.timestamp("us"),
}
_DECIMAL = re.compile(r"(?:decimal|dec|numeric)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?")
_CHARS = re.compile(r"(?:var)?char\s*\(\s*\d+\s*\)")
_SUFFIX = re.compile(r"\s+(?:not\s+null|comment\s+'(?:[^'\\]|\\.)*')\s*$", re.IGNORECASE)


def ddl_arrow_schema(ddl: str) -> pa.Schema | None:
    """The Arrow schema Spark gives a batch read with this DDL schema; None when the text
    holds a type this reader does not know (Spark may still read it)."""
    fields = []
    for piece in top_level_pieces(ddl) or [""]:
        found = name_and_type(piece.strip())
        kind = arrow_type(found[1]) if found else None
        if found is None or kind is None:
            return None
        fields.append(pa.field(found[0], kind))
    return pa.schema(fields)


def arrow_type(text: str) -> pa.DataType | None:
    while _SUFFIX.search(text):
        text = _SUFFIX.sub("", text)
    text = text.strip()
    low = text.lower()
    if low in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[low]
    if match := _DECIMAL.fullmatch(low):
        return pa.decimal128(int(match.group(1) or 10), int(match.group(2) or 0))
    if _CHARS.fullmatch(low):
        return pa.string()
    inner = text[text.find("<") + 1 : -1] if low.endswith(">") else ""
    if low.startswith("array<"):
        element = arrow_type(inner)
        return pa.list_(element) if element is not None else None
    pieces = top_level_pieces(inner) or []
    if low.startswith("map<") and len(pieces) == 2:
        key, value = arrow_type(pieces[0]), arrow_type(pieces[1])
        return pa.map_(key, value) if key is not None and value is not None else None
    if low.startswith("struct<"):
        named = [name_and_type(p.strip()) for p in pieces if p.strip()]
        kinds = [(n[0], arrow_type(n[1])) for n in named if n is not None]
        if len(kinds) != len(pieces) or any(k is None for _, k in kinds):
            return None
        return pa.struct([pa.field(name, kind) for name, kind in kinds])
    return None


def arrow_field_type(schema: pa.Schema, name: str) -> pa.DataType | None:
    """The type of a (possibly dotted) field, None where the schema lacks it."""
    fields: pa.Schema | pa.StructType = schema
    kind: pa.DataType | None = None
    for part in name.split("."):
        index = fields.get_field_index(part)
        if index < 0:
            return None
        kind = fields.field(index).type
        if pa.types.is_struct(kind):
            fields = kind
    return kind
