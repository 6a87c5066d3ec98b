"""What the runner asks of a source kind: one interface, one implementation per kind.

A kind is planned (where its read starts and ends: `plan` before Spark starts,
`plan_live` once it has, for what only a live system tells), read into a DataFrame, and
described: its checkpoints as the summary shows them, what a first read into a table that
holds rows reads or would lose, its lineage datasets, the jars Spark needs for it, its
columns as far as they are known without a JVM, and the flags below. Nothing here imports
Spark: the plug-ins import their Spark-side modules where they read.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.errors import UserError
from runner.sources.dataset_names import Dataset
from runner.sources.model import InputSchema, SourcePlan
from runner.spec.ddl_types import ddl_arrow_schema
from runner.spec.model import Source

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class FirstReadLoss:
    """What a source's first read into a table that holds rows would lose without a word,
    and what `--ignore-checkpoint` does instead."""

    lost: str
    anyway: str


class SourceKind(ABC):
    """One source kind (a `format` of the spec's sources)."""

    format: str
    # the Source field (and the JSON Schema's $defs entry) holding the kind's own settings
    spec_section: str | None = None
    reads_path: bool = False  # Spark reads files under the source's path (S3, pods mount it)
    lists_files: bool = False  # its plan lists the files Spark reads (their bytes are known)
    bad_file_places: bool = False  # a file Spark cannot read is the source's (on_bad_file)
    text_records: bool = False  # records that may not parse: read PERMISSIVE, a row reader
    # why the whole batch is cached: the source changes between the batch's reads
    pins_batch: str | None = None
    cached_when_read: bool = False  # decoded once and kept: its reads must see the same rows

    @abstractmethod
    def plan(self, source: Source, since: Any, skip: frozenset[str]) -> SourcePlan:
        """What the source reads after checkpoint `since` (no JVM); `skip`: files found
        unreadable, to be read no more."""

    def plan_live(self, spark: SparkSession, plan: SourcePlan) -> SourcePlan:
        """The plan with what only the live system tells once Spark runs (bounds, offsets)."""
        return plan

    @abstractmethod
    def read(self, spark: SparkSession, plan: SourcePlan) -> DataFrame:
        """The planned read as a DataFrame (a text source with the corrupt-record column)."""

    @abstractmethod
    def first_read(self, source: Source) -> str:
        """Where a read starts without a checkpoint, as the summary says it."""

    def first_read_loses(self, source: Source) -> FirstReadLoss | None:
        """What a first read into a table that holds rows would lose, or None."""
        return None

    def shown_checkpoint(self, text: str) -> str:
        """A recorded checkpoint (as --checkpoint takes it) in a message."""
        return text

    @abstractmethod
    def datasets(self, source: Source) -> list[Dataset]:
        """The OpenLineage datasets the source reads."""

    def jars(self, source: Source, under_spark_submit: bool) -> list[str]:
        """The jars Spark needs on its class path to read the source."""
        return []

    @abstractmethod
    def input_schema(self, source: Source) -> InputSchema:
        """The source's columns as Spark would give them, as far as known without a JVM."""

    def rows_from_spark(self, source: Source) -> str | None:
        """Why Spark sends the source's rows to the writers; None: the writers' tasks may
        read them from the source's files (runner/sources/file_rows.py)."""
        return f"a {self.format} source"

    def read_failure(self, text: str) -> UserError | None:
        """What a failed Spark job's messages (`text`) say of this kind's input, or None."""
        return None

    def record_format(self, source: Source) -> str:
        """The format of a record that does not parse, in its verdict's reason."""
        return self.format

    def table_read(self, source: Source) -> str | None:
        """The path of the Delta table the source reads (one another spec of a set may
        write: runner/pipeline/spec_set.py runs that spec first); None for other kinds."""
        return None


def where(source: Source) -> str:
    return f"source '{source.name}'"


def declared_schema(source: Source) -> InputSchema | None:
    """The schema a source declares (Spark DDL) as Arrow; None when it declares none."""
    if not source.schema:
        return None
    schema = ddl_arrow_schema(source.schema)
    if schema is None:
        return InputSchema(None, f"{where(source)} declares a type this check does not read")
    return InputSchema(schema, f"the schema {where(source)} declares")
