"""An Avro schema file (.avsc) as Spark DDL, without a JVM.

HoodieStreamer's FilebasedSchemaProvider reads a source's schema from an Avro schema file,
and Spark reads the records with the StructType its SchemaConverters makes of it. `runner
import-hudi` writes the same types as the source's `schema`, so a run reads the columns
with the types the job declared instead of inferring them (a column that is null in a whole
batch would be inferred as a string).

The types are Spark's: a record is a struct (the top-level record, the column list), a
union with null is its other type, enum and uuid are strings, bytes and fixed are binary,
the logical types date, timestamp-* (timestamp), local-timestamp-* (timestamp_ntz) and
decimal keep their meaning, time-millis and time-micros their int and long. A union of
several non-null types has no column type the runner builds, and stops the import.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import UserError

PRIMITIVES = {
    "null": "void",
    "boolean": "boolean",
    "int": "int",
    "long": "bigint",
    "float": "float",
    "double": "double",
    "bytes": "binary",
    "string": "string",
}
# (logicalType, the type it annotates) -> Spark type; any other pair is the plain type, as
# Avro ignores a logical type on a type it does not apply to
LOGICAL_TYPES = {
    ("date", "int"): "date",
    ("time-millis", "int"): "int",
    ("time-micros", "long"): "bigint",
    ("timestamp-millis", "long"): "timestamp",
    ("timestamp-micros", "long"): "timestamp",
    ("local-timestamp-millis", "long"): "timestamp_ntz",
    ("local-timestamp-micros", "long"): "timestamp_ntz",
    ("uuid", "string"): "string",
}
_COMPLEX = ("record", "enum", "fixed", "array", "map")
MAX_DECIMAL_PRECISION = 38  # Spark's DecimalType
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def read_avro_schema(path: Path, named_by: str) -> Any:
    """The parsed JSON of an Avro schema file; `named_by` is the setting that names it."""
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"cannot read {path} ({named_by}): {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{path}:{exc.lineno}:{exc.colno}: not an Avro schema (JSON): {exc.msg}"
        ) from exc


def avro_ddl(schema: Any, where: str = "the Avro schema") -> str:
    """The DDL column list of a top-level Avro record: `id bigint, name string`."""
    converter = _Converter(where)
    record = converter.resolve(_without_null(schema, where, "(top level)"), "")
    if not isinstance(record, Mapping) or record.get("type") != "record":
        raise UserError(
            f"{where}: the top-level type must be a record (the row), not {_type_name(schema)}"
        )
    return ", ".join(f"{quote(n)} {t}" for n, t in converter.fields(record, ""))


def quote(name: str) -> str:
    """A column name for DDL: backticks unless it is a plain identifier."""
    return name if _PLAIN_NAME.match(name) else "`" + name.replace("`", "``") + "`"


@dataclass
class _Converter:
    """Avro types to Spark types, remembering the named types (record, enum, fixed) seen so
    far, by full name, since later types may name them."""

    where: str
    named: dict[str, Any] = field(default_factory=dict)
    open_records: list[str] = field(default_factory=list)  # being converted: recursion

    def spark_type(self, avro: Any, path: str, namespace: str) -> str:
        avro = self.resolve(_without_null(avro, self.where, path), namespace)
        if isinstance(avro, str):
            return PRIMITIVES[avro]
        kind = avro["type"]
        if isinstance(kind, (Mapping, list)):  # {"type": {...}}: the inner schema
            return self.spark_type(kind, path, namespace)
        if kind == "record":
            fields = self.fields(avro, path)
            return "struct<" + ", ".join(f"{quote(n)}: {t}" for n, t in fields) + ">"
        if kind == "array":
            return f"array<{self.spark_type(avro.get('items'), path + '[]', namespace)}>"
        if kind == "map":
            return f"map<string, {self.spark_type(avro.get('values'), path + '{}', namespace)}>"
        if kind == "enum":
            return "string"
        logical = avro.get("logicalType")
        if logical == "decimal" and kind in ("bytes", "fixed"):
            return self._decimal(avro, path)
        if kind == "fixed":
            return "binary"
        return LOGICAL_TYPES.get((logical, kind), PRIMITIVES[kind])

    def fields(self, record: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
        """A record's fields as (name, Spark type); a record inside itself has no Spark type."""
        full = _full_name(record, "")
        if full in self.open_records:
            raise UserError(
                f"{self.where}: record {full} contains itself (at {path}); Spark has no "
                "recursive types: write sources[0].schema by hand"
            )
        self.open_records.append(full)
        namespace = full.rpartition(".")[0]
        out = []
        for item in record.get("fields", []):
            name = item.get("name") if isinstance(item, Mapping) else None
            if not isinstance(name, str) or "type" not in item:
                raise UserError(f"{self.where}: record {full}: a field needs a name and a type")
            out.append((name, self.spark_type(item["type"], _join(path, name), namespace)))
        self.open_records.pop()
        return out

    def resolve(self, avro: Any, namespace: str) -> Any:
        """The schema `avro` names (a primitive or a named type), or `avro` itself; a named
        type it defines is remembered."""
        if isinstance(avro, str):
            if avro in PRIMITIVES:
                return avro
            for name in (f"{namespace}.{avro}" if namespace else avro, avro):
                if name in self.named:
                    return self.named[name]
            raise UserError(
                f"{self.where}: unknown type {avro!r} (not a primitive or a named type)"
            )
        if not isinstance(avro, Mapping) or "type" not in avro:
            raise UserError(f"{self.where}: not an Avro type: {avro!r}")
        if avro["type"] in ("record", "enum", "fixed") and "name" in avro:
            # kept under its full name, which the types inside it take their namespace from
            full = _full_name(avro, namespace)
            self.named[full] = avro = {**avro, "name": full}
        if isinstance(avro["type"], str) and avro["type"] not in (*PRIMITIVES, *_COMPLEX):
            return self.resolve(avro["type"], namespace)  # {"type": "SomeRecord"}
        return avro

    def _decimal(self, avro: Mapping[str, Any], path: str) -> str:
        precision, scale = avro.get("precision"), avro.get("scale", 0)
        if not (
            isinstance(precision, int)
            and isinstance(scale, int)
            and 0 < precision <= MAX_DECIMAL_PRECISION
            and 0 <= scale <= precision
        ):
            raise UserError(
                f"{self.where}: field {path}: decimal(precision={precision}, scale={scale}) "
                f"is not a Spark decimal (precision 1 to {MAX_DECIMAL_PRECISION}, scale 0 to "
                "the precision)"
            )
        return f"decimal({precision},{scale})"


def _without_null(avro: Any, where: str, path: str) -> Any:
    """A union's one non-null type (a nullable column); null alone is Spark's void."""
    if not isinstance(avro, list):
        return avro
    types = [
        t for t in avro if t != "null" and not (isinstance(t, Mapping) and t.get("type") == "null")
    ]
    if len(types) > 1:
        names = ", ".join(_type_name(t) for t in types)
        raise UserError(
            f"{where}: field {path} is a union of several types ({names}); a column "
            "has one type: change the schema file, or give sources[0].schema by hand (and "
            "--set hoodie.streamer.schemaprovider.source.schema.file= to leave the file out)"
        )
    return types[0] if types else "null"


def _type_name(avro: Any) -> str:
    if isinstance(avro, Mapping):
        return str(avro.get("name") or avro.get("type"))
    return str(avro)


def _full_name(named: Mapping[str, Any], namespace: str) -> str:
    name = str(named["name"])
    if "." in name:
        return name
    space = named.get("namespace", namespace) or ""
    return f"{space}.{name}" if space else name


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
