"""Input the runner cannot read: files Spark fails on, and what a source kind tells of a
failed read.

A file that cannot be read (garbage, truncated, gone between listing and reading) fails
the Spark job that reads it; the failure is turned into an UnreadableFileError that names
the file and the reason instead of a JVM stack trace, and the run either stops (exit 2) or,
with `on_bad_file: skip`, starts its batch again without that file. Text records that do
not parse are runner/sources/text_records.py's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from urllib.parse import unquote

from runner.errors import UnreadableFileError, UserError
from runner.sources.kinds import kind_of, registered
from runner.spec.model import Source
from runner.storage.location import local_path

_FAILED_READ = re.compile(
    r"(?:Encountered error while reading file|Could not read footer for file:?)\s+(\S+)"
)
_CAUSE = re.compile(r"^Caused by: [\w.$]+(?:Exception|Error): (.+)$", re.MULTILINE)
_MAX_REASON = 300


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
            told = _told_by_a_kind(exc)
            if told is None:
                raise
            raise told from exc
        raise bad from exc


def _told_by_a_kind(exc: BaseException) -> UserError | None:
    """What a source kind reads in the failure (Kafka records that retention removed after
    the run planned its offsets), or None."""
    text = _messages(exc)
    return next((e for kind in registered() if (e := kind.read_failure(text))), None)


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
        if not kind_of(source).bad_file_places:
            continue
        root = (local_path(source.path) or source.path).rstrip("/")
        if path == root or path.startswith(root + "/"):
            return source
    return None
