"""Spark reads of runner tables: delta-rs picks the files, Spark reads the parquet."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from runner.table.snapshot import TableSnapshot, open_table

_GLOB_CHARS = "\\[]{}*?"


def _hadoop_path(uri: str, rel: str) -> str:
    """An exact file path for Spark: Hadoop would read [ ] { } * ? in a path as a glob."""
    path = f"{uri.rstrip('/')}/{rel}"
    for ch in _GLOB_CHARS:
        path = path.replace(ch, "\\" + ch)
    return path


def read_files(spark: SparkSession, snapshot: TableSnapshot, paths: Sequence[str]) -> DataFrame:
    """The rows of some of the table's files, with the table's schema."""
    schema = from_arrow_schema(snapshot.arrow_schema())
    if not paths:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*[_hadoop_path(snapshot.uri, p) for p in paths])


def read_table(spark: SparkSession, uri: str) -> DataFrame:
    """The table's current rows (an empty frame for a table with no files)."""
    snapshot = open_table(uri)
    if snapshot is None:
        raise FileNotFoundError(f"no Delta table at {uri}")
    return read_files(spark, snapshot, [f.path for f in snapshot.files()])
