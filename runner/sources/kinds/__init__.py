"""The source kinds: one plug-in module per kind (files.py for parquet, csv, json and orc;
delta.py, jdbc.py, kafka.py), each a `SourceKind` (base.py), registered below by the spec's
`format`. The rest of the runner asks a source's kind (`kind_of`) and never compares the
format itself; a new kind is a module here and one entry in `_KINDS`.

Nothing here imports Spark, so the commands that run without a JVM (validate, render) ask
the kinds too.
"""

from __future__ import annotations

from collections.abc import Iterable

from runner.errors import UserError
from runner.sources.kinds import delta, files, jdbc, kafka
from runner.sources.kinds.base import SourceKind
from runner.spec.model import Source

_KINDS: dict[str, SourceKind] = {
    kind.format: kind for kind in (*files.KINDS, delta.KIND, jdbc.KIND, kafka.KIND)
}


def kind_of(source: Source) -> SourceKind:
    """The kind of a source, by its format; a format no kind is registered for is refused."""
    found = _KINDS.get(source.format)
    if found is None:
        raise UserError(
            f"source '{source.name}': format {source.format!r} is not a source kind the "
            f"runner knows; use one of: {', '.join(_KINDS)}"
        )
    return found


def registered() -> tuple[SourceKind, ...]:
    """Every registered kind, in the order of the spec's format list."""
    return tuple(_KINDS.values())


def source_jars(sources: Iterable[Source], under_spark_submit: bool) -> list[str]:
    """The jars Spark needs for these sources (JDBC drivers, connectors), each once."""
    jars = [jar for s in sources for jar in kind_of(s).jars(s, under_spark_submit)]
    return list(dict.fromkeys(jars))
