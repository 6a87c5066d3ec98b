"""A parquet source's rows read by the writer itself, by (file, row index).

A bulk_insert's rows crossing Spark's Arrow hand-off to the Python writers cost about 40 %
of its time (docs/performance.md). When the batch is one parquet source as it is (no
transform, no declared schema), Spark needs to send only what it alone may compute (the
record key, partition path, bucket and verdict of each row) plus where the row is
(`_metadata.file_path` and `_metadata.row_index`); the writer reads the rows themselves from
the source files with pyarrow, as `multiple_rehash` reads a table's files.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from runner.sources.kinds import kind_of
from runner.spec.model import PipelineSpec
from runner.storage.location import local_path

# Reader options that only choose which files are read: the writer follows the file Spark
# names for each row, so these change nothing for it. Any other option may change values.
_FILE_CHOICE_OPTIONS = {"recursivefilelookup", "pathglobfilter", "modifiedbefore", "modifiedafter"}


def why_spark_sends_rows(
    spec: PipelineSpec, batch: DataFrame, file_schema: pa.Schema, data_columns: Sequence[str]
) -> str | None:
    """None when the writer can read the batch's data columns from the source files
    itself; else why the rows must come from Spark."""
    if spec.transform_sql:
        return "the batch is a transform's result"
    if len(spec.sources) != 1:
        return "the spec has several sources"
    source = spec.sources[0]
    from_spark = kind_of(source).rows_from_spark(source)
    if from_spark:
        return from_spark
    if source.schema:
        return "the source declares a schema, which Spark casts the files to"
    if "_metadata" in batch.columns:
        return "an input column named _metadata hides Spark's file metadata"
    options = sorted(k for k in source.options if k.lower() not in _FILE_CHOICE_OPTIONS)
    if options:
        return f"reader option(s) {', '.join(options)}"
    files = batch.inputFiles()  # the listing Spark made when the source was read
    if not files:
        return "no input files"
    first = local_path(files[0])
    if first is None:
        return "the source files are on an object store"
    stored = pq.read_schema(first)
    for name in data_columns:
        if name not in stored.names:
            return f"column {name} is not in the files (a partition directory's value?)"
        found, wanted = stored.field(name).type, file_schema.field(name).type
        if not _reads_as(found, wanted):
            return f"column {name} is {found} in the files and {wanted} in Spark"
    return None


def _reads_as(found: pa.DataType, wanted: pa.DataType) -> bool:
    """True when pyarrow's value of a file's column casts to Spark's type without change."""
    if pa.types.is_dictionary(found):
        found = found.value_type
    if found == wanted:
        return True
    strings = (pa.string(), pa.large_string())
    if found in strings and wanted in strings:
        return True
    if pa.types.is_timestamp(found) and pa.types.is_timestamp(wanted):
        # s and ms widen to Spark's microseconds; ns would lose digits (Spark truncates)
        same_kind = (found.tz is None) == (wanted.tz is None)
        return same_kind and found.unit in ("s", "ms", "us") and wanted.unit == "us"
    return False
