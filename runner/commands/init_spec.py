"""`runner init`: a spec to start from, made from a sample of the data it will read.

A file source's sample is its first file (a directory's first in name order): parquet gives
its schema; CSV and JSON lines are read in their first MiB by pyarrow, which infers the
types. The spec declares that schema (so `validate` knows the columns and no run samples
the files), and guesses what only the user knows, each guess marked `# check:` on its
line: the record key (a column named id, else the first ending in id), the ordering field
(a timestamp or date column, else one named like ts or updated_at), a bucket count for the
sample's size. The file is checked as `runner validate` checks it before it is written.
"""

from __future__ import annotations

import io
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from runner.errors import UserError
from runner.spec.loader import check_spec_file
from runner.summary import human_size

FORMATS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}
FORMATS[".ndjson"] = "json"
SAMPLE_BYTES = 1 << 20
BUCKET_BYTES = 256 << 20  # a bucket's data at which the guess adds one
_ORDERING_NAMES = re.compile(r"^(ts|timestamp|updated(_at|_on)?|modified(_at)?|.*_(at|ts|time))$")


@dataclass(frozen=True)
class Sample:
    """What a sample tells: the format, the columns and how much data there is."""

    format: str
    schema: pa.Schema
    total_bytes: int
    first_file: Path


def sample(path: Path, fmt: str | None) -> Sample:
    """The sample of a file or directory of files."""
    if not path.exists():
        raise UserError(f"{path}: no such file or directory")
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    files = [f for f in files if not f.name.startswith((".", "_"))]
    if not files:
        raise UserError(f"{path}: no file to sample")
    first = files[0]
    found = fmt or FORMATS.get(first.suffix.lower())
    if found is None:
        raise UserError(
            f"{first}: cannot tell its format from its name; give --format "
            f"({', '.join(sorted(set(FORMATS.values())))})"
        )
    return Sample(found, _schema(first, found), sum(f.stat().st_size for f in files), first)


def _schema(file: Path, fmt: str) -> pa.Schema:
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_schema(file)
        head = _head(file)
        if fmt == "csv":
            import pyarrow.csv as pcsv

            return _zoned(pcsv.read_csv(io.BytesIO(head)).schema)
        import pyarrow.json as pjson

        return _zoned(pjson.read_json(io.BytesIO(head)).schema)
    except (pa.ArrowInvalid, OSError) as exc:
        raise UserError(f"{file}: not readable as {fmt}: {exc}") from None


def _zoned(schema: pa.Schema) -> pa.Schema:
    """Text's date-times as Spark reads them by default: `timestamp`, in the session's zone
    (parquet's zoneless ones stay `timestamp_ntz`: Spark reads them only so)."""
    return pa.schema(
        f.with_type(pa.timestamp("us", tz="UTC"))
        if pa.types.is_timestamp(f.type) and not f.type.tz
        else f
        for f in schema
    )


def _head(file: Path) -> bytes:
    """The file's first MiB, cut after its last whole line."""
    with file.open("rb") as handle:
        head = handle.read(SAMPLE_BYTES)
    if len(head) == SAMPLE_BYTES and b"\n" in head:
        head = head[: head.rindex(b"\n") + 1]
    return head


def spark_type(arrow: pa.DataType) -> str:
    """The Spark DDL type of an Arrow type."""
    simple = {
        pa.bool_(): "boolean",
        pa.int8(): "tinyint",
        pa.int16(): "smallint",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.date32(): "date",
    }
    if arrow in simple:
        return simple[arrow]
    if pa.types.is_integer(arrow):  # unsigned
        return "bigint" if arrow.bit_width < 64 else "decimal(20,0)"
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow) or pa.types.is_null(arrow):
        return "string"
    if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow):
        return "binary"
    if pa.types.is_timestamp(arrow):
        return "timestamp" if arrow.tz else "timestamp_ntz"
    if pa.types.is_decimal(arrow):
        return f"decimal({arrow.precision},{arrow.scale})"
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return f"array<{spark_type(arrow.value_type)}>"
    if pa.types.is_struct(arrow):
        fields = ", ".join(f"{_name(f.name)}: {spark_type(f.type)}" for f in arrow)
        return f"struct<{fields}>"
    if pa.types.is_map(arrow):
        return f"map<{spark_type(arrow.key_type)},{spark_type(arrow.item_type)}>"
    return "string"  # what Spark cannot hold as it is: read as text, cast in the transform


def _name(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"`{name}`"


def schema_ddl(schema: pa.Schema) -> str:
    return ", ".join(f"{_name(f.name)} {spark_type(f.type)}" for f in schema)


def guess_key(schema: pa.Schema) -> str:
    names = schema.names
    exact = [n for n in names if n.lower() == "id"]
    ending = [n for n in names if n.lower().endswith("id")]
    return str((exact or ending or names)[0])


def guess_ordering(schema: pa.Schema, key: str) -> str | None:
    timed = [
        f.name
        for f in schema
        if f.name != key and (pa.types.is_timestamp(f.type) or pa.types.is_date(f.type))
    ]
    named = [
        f.name
        for f in schema
        if f.name != key
        and _ORDERING_NAMES.match(f.name.lower())
        and (pa.types.is_integer(f.type) or pa.types.is_floating(f.type))
    ]
    return str((timed or named)[0]) if timed or named else None


def guess_buckets(total_bytes: int) -> int:
    """A power of two, at least 4, about one per BUCKET_BYTES of the sample's data."""
    wanted = max(4, math.ceil(total_bytes / BUCKET_BYTES))
    return 1 << (wanted - 1).bit_length()


@dataclass(frozen=True)
class InitRequest:
    data: Path  # the sample: a file or a directory of files
    out: Path  # the spec file to write
    name: str | None = None
    record_key: str | None = None  # comma-separated fields; None: guessed
    fmt: str | None = None


def spec_text(request: InitRequest, found: Sample) -> str:
    """The spec, as YAML with comments: the guesses marked `# check:`."""
    name = request.name or re.sub(r"[^A-Za-z0-9_]+", "_", request.data.stem).strip("_") or "table"
    key = request.record_key or guess_key(found.schema)
    missing = [k for k in key.split(",") if k.strip() not in found.schema.names]
    if missing:
        raise UserError(
            f"--key {', '.join(missing)} is not a column of {found.first_file}: its columns are "
            f"{', '.join(found.schema.names)}"
        )
    ordering = guess_ordering(found.schema, key)
    relative = Path(_relative(request.data, request.out.parent))
    lines = [
        f"# Made by `runner init {request.data}` from {found.first_file.name}; check each line",
        "# marked `check:`, then `runner validate` this file and run it.",
        f"name: {name}",
        "sources:",
        f"  - name: {name}",
        f"    format: {found.format}",
        f"    path: {relative}               # relative to this file",
        *(['    options: {header: "true"}'] if found.format == "csv" else []),
        f'    schema: "{schema_ddl(found.schema)}"',
        "target:",
        f"  path: warehouse/{name}",
        "  operation: upsert              # insert, bulk_insert (a first load), delete",
        f"  record_key: {key}"
        + ("" if request.record_key else "   # check: what identifies a row"),
    ]
    if ordering:
        lines.append(
            f"  precombine_field: {ordering}   # check: of two rows with one key, the greater wins"
        )
    lines += [
        f"  index: {{buckets: {guess_buckets(found.total_bytes)}}}"
        f"   # check: for {human_size(found.total_bytes)}; `runner expand` grows it later",
    ]
    return "\n".join(lines) + "\n"


def _relative(path: Path, base: Path) -> str:
    return os.path.relpath(path.resolve(), base.resolve())


def write_spec(request: InitRequest, force: bool) -> str:
    """Write the spec made from the sample, checked as `runner validate` checks it."""
    if request.out.exists() and not force:
        raise UserError(f"{request.out} exists; give another --out, or --force to replace it")
    text = spec_text(request, sample(request.data, request.fmt))
    staged = request.out.with_name(f".{request.out.name}.init")
    staged.write_text(text)
    try:
        _, problems = check_spec_file(staged)
        if problems:
            raise UserError(
                "the spec made from the sample is not valid (a bug of `runner init`): "
                + "; ".join(p.message for p in problems)
            )
        staged.replace(request.out)
    finally:
        staged.unlink(missing_ok=True)
    return text
