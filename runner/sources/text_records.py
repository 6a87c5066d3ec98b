"""Text records that do not parse: a csv or json record (or a Kafka value) that does not
parse under the schema is kept by Spark's PERMISSIVE mode in a corrupt-record column;
`split_malformed` takes such records out of the source before the transform sees it, with
the file each came from, so they meet the source's `on_bad_record` action instead of
turning into rows of nulls.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from runner.spec.model import Source
from runner.storage.location import local_path

CORRUPT = "__runner_malformed"  # Spark's corrupt-record column for csv and json sources
MALFORMED_FILE = "__runner_malformed_file"
MALFORMED_RAW = "__runner_malformed_raw"
LINE_SEARCH_LIMIT = 256 * 1024 * 1024  # bytes of a file read to find a bad record's line


def permissive_options() -> dict[str, str]:
    """Reader options that keep a record that does not parse, whole, in CORRUPT."""
    return {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}


def with_corrupt_column(schema: StructType) -> StructType:
    """`schema` with the corrupt-record column Spark fills for a record that does not parse."""
    fields = [f for f in schema.fields if f.name != CORRUPT]
    return StructType([*fields, StructField(CORRUPT, StringType())])


@dataclass(frozen=True)
class MalformedRows:
    """The records of one text source that did not parse: MALFORMED_FILE, MALFORMED_RAW."""

    source: Source
    rows: DataFrame


def split_malformed(frame: DataFrame, source: Source) -> tuple[DataFrame, MalformedRows]:
    """The rows that parsed (without the corrupt column), and those that did not.

    Spark parses only the columns a query needs, so a bad value in a column one pass skips
    would pass that pass and fail the next (the bucket count and the write would disagree).
    The test below names every column, which makes every pass parse the whole record; its
    second half is never true, and no optimizer rule knows that."""
    # where a record was: its file, or what the source put in MALFORMED_FILE (a Kafka
    # record's topic, partition and offset)
    where = MALFORMED_FILE if MALFORMED_FILE in frame.columns else "_metadata.file_path"
    data = [c for c in frame.columns if c not in (CORRUPT, MALFORMED_FILE)]
    every_column = F.size(F.array(*[F.col(c).isNull() for c in data])) < 0
    malformed = F.col(CORRUPT).isNotNull() | every_column
    good = frame.where(~malformed).drop(CORRUPT, MALFORMED_FILE)
    bad = frame.where(malformed).select(
        F.col(where).alias(MALFORMED_FILE), F.col(CORRUPT).alias(MALFORMED_RAW)
    )
    return good, MalformedRows(source, bad)


def line_of(file_uri: str, raw: str | None) -> int | None:
    """The 1-based line where the record `raw` starts in a local file, for error messages;
    None when it cannot be told (an object store, a compressed or very large file)."""
    path = local_path(file_uri)
    if path is None or not raw:
        return None
    first = (raw.splitlines() or [raw])[0]
    try:
        with open(path, "rb") as handle:
            seen = 0
            for number, line in enumerate(handle, start=1):
                seen += len(line)
                if line.rstrip(b"\r\n").decode("utf-8", "replace") == first:
                    return number
                if seen > LINE_SEARCH_LIMIT:
                    return None
    except OSError:
        return None
    return None
