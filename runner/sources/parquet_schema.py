"""A parquet source's columns as Spark reads them, from its files' footers (no JVM):
what `runner validate --against` learns of it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from runner.sources.listing import list_new_files
from runner.sources.model import InputSchema
from runner.storage.location import filesystem

# The newest files of a parquet source whose footers are read: Spark takes one file's
# schema, so every file of them must agree for the check to know which.
FOOTERS_READ = 50


def parquet_schema(path: str, where: str) -> InputSchema:
    """The columns of a parquet source at `path` from its newest files' footers, or why
    they cannot be told without Spark."""
    listing = list_new_files(path, None)
    if not listing.paths:
        return InputSchema(None, f"{where} has no files under {path} yet")
    newest = listing.paths[-FOOTERS_READ:]
    if any("=" in part for p in newest for part in p[len(listing.root) :].split("/")[:-1]):
        return InputSchema(None, f"Spark adds the partition directories of {where} as columns")
    schemas = {file: _footer_schema(file) for file in newest}
    first, schema = next(iter(schemas.items()))
    other = next((p for p, s in schemas.items() if not s.equals(schema)), None)
    if other is not None:
        return InputSchema(
            None,
            f"the files of {where} differ in schema ({first} and {other}), and Spark takes "
            "the schema of whichever it reads first",
        )
    files = f"{len(newest)} newest file(s)" if len(newest) > 1 else "file"
    return InputSchema(schema, f"the {files} of {where} ({newest[-1]})")


def _footer_schema(path: str) -> pa.Schema:
    """A parquet file's columns as Spark reads them (INT96 timestamps are Spark's
    `timestamp`, which pyarrow reads without a time zone)."""
    fs, local = filesystem(path)
    parquet = pq.ParquetFile(local, filesystem=fs)
    int96 = {
        parquet.schema.column(i).path.split(".")[0]
        for i in range(len(parquet.schema))
        if parquet.schema.column(i).physical_type == "INT96"
    }
    return pa.schema(
        [
            pa.field(
                f.name, pa.timestamp("us", tz="UTC") if f.name in int96 else _as_spark_gives(f.type)
            )
            for f in parquet.schema_arrow
        ]
    )


def _as_spark_gives(kind: pa.DataType) -> pa.DataType:
    """The Arrow type of a parquet column once Spark has read it (unsigned integers one
    size up, timestamps in microseconds, large and view types plain)."""
    if pa.types.is_dictionary(kind):
        return _as_spark_gives(kind.value_type)
    if pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return pa.string()
    if pa.types.is_large_binary(kind) or pa.types.is_binary_view(kind):
        return pa.binary()
    unsigned = {pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64()}
    if kind in unsigned:
        return unsigned[kind]
    if kind == pa.uint64():
        return pa.decimal128(20, 0)
    if pa.types.is_timestamp(kind):
        return pa.timestamp("us", tz="UTC" if kind.tz else None)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(_as_spark_gives(kind.value_type))
    if pa.types.is_map(kind):
        return pa.map_(_as_spark_gives(kind.key_type), _as_spark_gives(kind.item_type))
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, _as_spark_gives(f.type)) for f in kind])
    return kind
