"""Input the runner cannot read: files Spark fails on, and text records that do not parse.

A file that cannot be read (garbage, truncated, gone between listing and reading) fails
the Spark job that reads it; the failure is turned into an UnreadableFileError that names
the file and the reason instead of a JVM stack trace, and the run either stops (exit 2) or,
with `on_bad_file: skip`, starts its batch again without that file.

A csv or json record that does not parse under the schema is kept by Spark's PERMISSIVE
mode in a corrupt-record column; `split_malformed` takes such records out of the source
before the transform sees it, with the file each came from, so they meet the source's
`on_bad_record` action instead of turning into rows of nulls.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import unquote

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from runner.errors import UnreadableFileError, UserError
from runner.spec.model import Source
from runner.storage.location import local_path

TEXT_FORMATS = ("csv", "json")
CORRUPT = "__runner_malformed"  # Spark's corrupt-record column for csv and json sources
MALFORMED_FILE = "__runner_malformed_file"
MALFORMED_RAW = "__runner_malformed_raw"
LINE_SEARCH_LIMIT = 256 * 1024 * 1024  # bytes of a file read to find a bad record's line

_FAILED_READ = re.compile(
    r"(?:Encountered error while reading file|Could not read footer for file:?)\s+(\S+)"
)
_KAFKA_GONE = re.compile(
    r"Could not read records in offset (\[\d+, \d+\)) for topic partition (\S+)"
)
_CAUSE = re.compile(r"^Caused by: [\w.$]+(?:Exception|Error): (.+)$", re.MULTILINE)
_MAX_REASON = 300


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


def unreadable_file(exc: BaseException, sources: Sequence[Source]) -> UnreadableFileError | None:
    """The file a Spark failure could not read, and why; None for any other failure."""
    text = _messages(exc)
    match = _FAILED_READ.search(text)
    if not match:
        return None
    uri = match[1].rstrip(".")
    path = local_path(uri) or unquote(uri)
    causes = _CAUSE.findall(text)
    if causes:
        reason = causes[-1].strip()
    else:
        after = text[match.end() :].strip().splitlines()
        reason = after[0].split(" SQLSTATE")[0].strip(" .") if after else "unreadable"
    reason = reason.replace(uri, "the file").replace(f"file:{path}", "the file")
    if len(reason) > _MAX_REASON:
        reason = reason[: _MAX_REASON - 3] + "..."
    source = _source_of(path, sources)
    return UnreadableFileError(
        source.name if source else None,
        path,
        reason or "unreadable",
        skippable=source is not None and source.on_bad_file == "skip",
    )


@contextmanager
def reading(sources: Sequence[Source]) -> Iterator[None]:
    """Turn a Spark job's failure to read an input file into an UnreadableFileError."""
    try:
        yield
    except UnreadableFileError:
        raise
    except Exception as exc:
        bad = unreadable_file(exc, sources)
        if bad is None:
            gone = _kafka_records_gone(exc)
            if gone is None:
                raise
            raise gone from exc
        raise bad from exc


def _kafka_records_gone(exc: BaseException) -> UserError | None:
    """Records of a Kafka source that retention removed after the run planned its offsets
    (on_data_loss is decided then): nothing is written, the next run plans anew."""
    found = _KAFKA_GONE.search(_messages(exc))
    if not found:
        return None
    return UserError(
        f"Kafka records at offsets {found[1]} of topic-partition {found[2]} were removed "
        "(retention) while this run read them; nothing was written and no offset moved. "
        "Run again: the next run starts from its checkpoint and on_data_loss applies"
    )


def _messages(exc: BaseException) -> str:
    """The exception's text with its JVM causes (a Py4J error carries them in its text; a
    converted Spark error may hold the Java exception on the side)."""
    parts = [str(exc)]
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    depth = 0
    while java is not None and depth < 20:
        try:
            parts.append(f"Caused by: {java.getClass().getName()}: {java.getMessage()}")
            java = java.getCause()
        except Exception:
            break
        depth += 1
    return "\n".join(parts)


def _source_of(path: str, sources: Sequence[Source]) -> Source | None:
    """The file source whose path holds `path` (None when none does, e.g. a Delta source)."""
    for source in sources:
        if source.format in ("delta", "jdbc"):
            continue
        root = (local_path(source.path) or source.path).rstrip("/")
        if path == root or path.startswith(root + "/"):
            return source
    return None
