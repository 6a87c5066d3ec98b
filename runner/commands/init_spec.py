"""`runner init`: a spec to start from, made from a sample of the data it will read.

A file source's sample is its first file (a directory's first in name order): parquet gives
its schema; CSV and JSON lines are read in their first MiB by pyarrow, which infers the
types. The spec declares that schema (so `validate` knows the columns and no run samples
the files), and guesses what only the user knows, each guess marked `# check:` on its
line: the record key (a column named id, else the first ending in id), the ordering field
(a timestamp or date column, else one named like ts or updated_at), a bucket count for the
sample's size. A database table's sample is its columns and primary key (the record key),
asked of the database through Spark's JDBC reader. The file is checked as `runner validate`
checks it before it is written.
"""

from __future__ import annotations

import io
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from runner.errors import UserError
from runner.spec.loader import check_spec_file
from runner.spec.model import Source
from runner.summary import human_size

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMATS = {
    ".parquet": "parquet",
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
}
SAMPLE_BYTES = 1 << 20
BUCKET_BYTES = 256 << 20  # a bucket's data at which the guess adds one
_ORDERING_NAMES = re.compile(r"^(ts|timestamp|updated(_at|_on)?|modified(_at)?|.*_(at|ts|time))$")


@dataclass(frozen=True)
class Sample:
    """What a sample tells: the format, the columns, how much data there is, and the
    source's lines of the spec."""

    format: str
    schema: pa.Schema
    total_bytes: int | None  # None: not known (a database table)
    made_from: str  # for the spec's first line
    source_lines: tuple[str, ...]  # after `format:`
    primary_key: tuple[str, ...] = ()


def sample(path: Path, fmt: str | None, out_dir: Path) -> Sample:
    """The sample of a file or directory of files, for a spec written in `out_dir`."""
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
    schema = _schema(first, found)
    lines = (
        f"    path: {os.path.relpath(path.resolve(), out_dir.resolve())}   # relative to this file",
        *(['    options: {header: "true"}'] if found == "csv" else []),
        f'    schema: "{schema_ddl(schema)}"',
    )
    total = sum(f.stat().st_size for f in files)
    made_from = str(path) if path.is_file() else f"{path}, its file {first.name}"
    return Sample(found, schema, total, made_from, lines)


def jdbc_sample(spark: SparkSession, source: Source) -> Sample:
    """The sample of a database table: its columns and primary key, asked of the database
    through Spark's JDBC reader."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from runner.sources.jdbc import described_table

    jdbc = source.jdbc
    assert jdbc is not None
    struct, primary_key = described_table(spark, source)
    lines = [
        "    jdbc:",
        f"      url: {jdbc.url}",
        f"      table: {jdbc.table}",
        *([f"      user: {jdbc.user}"] if jdbc.user else []),
        *([f"      password: {jdbc.password}"] if jdbc.password else []),
    ]
    schema = to_arrow_schema(struct, timezone="UTC")
    return Sample("jdbc", schema, None, str(jdbc.table), tuple(lines), primary_key)


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
    data: Path | None  # the sample: a file or a directory of files (None: a database table)
    out: Path  # the spec file to write
    name: str | None = None
    record_key: str | None = None  # comma-separated fields; None: guessed
    fmt: str | None = None


def spec_text(request: InitRequest, found: Sample) -> str:
    """The spec, as YAML with comments: the guesses marked `# check:`."""
    stem = request.data.stem if request.data else found.made_from.rpartition(".")[2]
    name = request.name or re.sub(r"[^A-Za-z0-9_]+", "_", stem).strip("_") or "table"
    key, key_note = _record_key(request, found)
    ordering = guess_ordering(found.schema, key)
    size = f"for {human_size(found.total_bytes)}" if found.total_bytes is not None else "a guess"
    lines = [
        f"# Made by `runner init` from {found.made_from}; check each line marked `check:`,",
        "# then `runner validate` this file and run it.",
        f"name: {name}",
        "sources:",
        f"  - name: {name}",
        f"    format: {found.format}",
        *found.source_lines,
        "target:",
        f"  path: warehouse/{name}",
        "  operation: upsert              # insert, bulk_insert (a first load), delete",
        f"  record_key: {key}{key_note}",
    ]
    if ordering:
        lines.append(
            f"  precombine_field: {ordering}   # check: of two rows with one key, the greater wins"
        )
    buckets = guess_buckets(found.total_bytes or 0)
    lines.append(f"  index: {{buckets: {buckets}}}   # check: {size}; `runner expand` grows it")
    return "\n".join(lines) + "\n"


def _record_key(request: InitRequest, found: Sample) -> tuple[str, str]:
    """The record key and its line's comment: given, the table's primary key, or guessed."""
    if request.record_key:
        missing = [k for k in request.record_key.split(",") if k.strip() not in found.schema.names]
        if missing:
            raise UserError(
                f"--key {', '.join(missing)} is not a column of {found.made_from}: its columns "
                f"are {', '.join(found.schema.names)}"
            )
        return request.record_key, ""
    if found.primary_key:
        return ",".join(found.primary_key), "   # the table's primary key"
    return guess_key(found.schema), "   # check: what identifies a row"


def write_spec(request: InitRequest, found: Sample, force: bool) -> str:
    """Write the spec made from the sample, checked as `runner validate` checks it."""
    if request.out.exists() and not force:
        raise UserError(f"{request.out} exists; give another --out, or --force to replace it")
    text = spec_text(request, found)
    staged = request.out.with_name(f".{request.out.name}.init")
    staged.write_text(text)
    try:
        _, problems = check_spec_file(staged, resolve_paths=False)
        if problems:
            raise UserError(
                "the spec made from the sample is not valid (a bug of `runner init`): "
                + "; ".join(p.message for p in problems)
            )
        staged.replace(request.out)
    finally:
        staged.unlink(missing_ok=True)
    return text


def database_sample(url: str, table: str, user: str | None, password: str | None) -> Sample:
    """The sample of a database table, read with a Spark session of its own; `user` and
    `password` are ${env:NAME} references."""
    from runner.jvm.session import spark_session
    from runner.sources.jdbc import driver_jars
    from runner.spec.model import JdbcSpec, SparkSettings

    source = Source("init", "jdbc", jdbc=JdbcSpec(url, table, user=user, password=password))
    spark = spark_session(SparkSettings(), "runner-init", driver_jars((source,)))
    return jdbc_sample(spark, source)
