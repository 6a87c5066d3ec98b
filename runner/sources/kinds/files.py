"""The file kinds: parquet, csv, json, orc (runner/spec/derived.py FILE_FORMATS) under a
path. `new_files` lists what changed since the checkpoint (runner/sources/listing.py); a
read in full is Spark's own listing, unless files found unreadable must be left out. csv
and json are text: a record may not parse (runner/sources/text_records.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runner.sources.dataset_names import Dataset, path_dataset
from runner.sources.kinds.base import SourceKind, declared_schema, where
from runner.sources.listing import FileCheckpoint, check_path, list_new_files
from runner.sources.model import InputSchema, SourcePlan
from runner.sources.parquet_schema import parquet_schema
from runner.spec.derived import FILE_FORMATS, TEXT_FORMATS
from runner.spec.model import Source

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class Files(SourceKind):
    reads_path = True
    lists_files = True
    bad_file_places = True

    def __init__(self, format: str) -> None:
        self.format = format
        self.text_records = format in TEXT_FORMATS  # csv, json

    def plan(self, source: Source, since: Any, skip: frozenset[str]) -> SourcePlan:
        mode = source.incremental.mode if source.incremental else None
        if mode == "new_files":
            start = FileCheckpoint.from_json(since, where(source))
            found = list_new_files(source.path, start)
            return SourcePlan(
                source,
                since=start.to_json() if start else None,
                until=found.until.to_json() if found.until else None,
                # skipped files stay under the checkpoint: they are passed, not read again
                paths=tuple(p for p in found.paths if p not in skip),
                base_path=found.root,
                nothing_new=not found.paths,
                details={"files": len(found.paths), "bytes": found.bytes},
            )
        check_path(source.path, where(source))
        if skip:
            # Spark lists the path itself, unless some of its files must be left out
            found = list_new_files(source.path, None)
            kept = tuple(p for p in found.paths if p not in skip)
            if len(kept) < len(found.paths):
                return SourcePlan(source, since=since, paths=kept, base_path=found.root)
        return SourcePlan(source, since=since)

    def read(self, spark: SparkSession, plan: SourcePlan) -> DataFrame:
        from runner.sources.spark_reads import read_files

        return read_files(spark, plan, self.text_records)

    def first_read(self, source: Source) -> str:
        return "every file"

    def datasets(self, source: Source) -> list[Dataset]:
        return [path_dataset(source.path)]

    def input_schema(self, source: Source) -> InputSchema:
        return declared_schema(source) or InputSchema(
            None, f"Spark infers the schema of {where(source)} ({self.format}) from its records"
        )


class Parquet(Files):
    """Typed files whose footers tell their columns, which the writers can read themselves."""

    def input_schema(self, source: Source) -> InputSchema:
        return declared_schema(source) or parquet_schema(source.path, where(source))

    def rows_from_spark(self, source: Source) -> str | None:
        return None


KINDS = tuple(Parquet(format) if format == "parquet" else Files(format) for format in FILE_FORMATS)
