"""Spark reads of runner tables: delta-rs picks the files, Spark reads the parquet.

On a MERGE_ON_READ table a file may carry a deletion vector: its deleted rows are dropped
by an anti-join on (file name, row index), with Spark's `_metadata.row_index` (the row's
position in its parquet file, what a deletion vector counts) and the deleted positions read
on the driver. File names are unique in a runner table (file group, write token, instant).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from runner.table.deletion_vectors import read_deleted_rows
from runner.table.snapshot import DataFile, TableSnapshot, open_table

_GLOB_CHARS = "\\[]{}*?"
SOURCE_FILE = "__runner_source_file"
ROW_INDEX = "__runner_row_index"
_FILE_NAME = "__runner_file_name"


def _hadoop_path(uri: str, rel: str) -> str:
    """An exact file path for Spark: Hadoop would read [ ] { } * ? in a path as a glob."""
    path = f"{uri.rstrip('/')}/{rel}"
    for ch in _GLOB_CHARS:
        path = path.replace(ch, "\\" + ch)
    return path


def read_files(
    spark: SparkSession,
    snapshot: TableSnapshot,
    files: Sequence[DataFile],
    positions: bool = False,
) -> DataFrame:
    """The live rows of some of the table's files, with the table's schema; with
    `positions`, also each row's file (SOURCE_FILE, as Spark names it) and ROW_INDEX."""
    schema = from_arrow_schema(snapshot.arrow_schema())
    if not files:
        frame = spark.createDataFrame([], schema)
        if positions:
            frame = frame.withColumn(SOURCE_FILE, F.lit(None).cast("string"))
            frame = frame.withColumn(ROW_INDEX, F.lit(None).cast("long"))
        return frame
    frame = spark.read.schema(schema).parquet(*[_hadoop_path(snapshot.uri, f.path) for f in files])
    extra = []
    if positions:
        extra += [
            F.col("_metadata.file_path").alias(SOURCE_FILE),
            F.col("_metadata.row_index").alias(ROW_INDEX),
        ]
    deleted = _deleted_positions(spark, snapshot, files)
    if deleted is None:
        return frame.select("*", *extra) if extra else frame
    marked = frame.select(
        "*",
        *extra,
        F.col("_metadata.file_name").alias(_FILE_NAME),
        F.col("_metadata.row_index").alias(f"{_FILE_NAME}_row"),
    )
    return marked.join(F.broadcast(deleted), [_FILE_NAME, f"{_FILE_NAME}_row"], "left_anti").drop(
        _FILE_NAME, f"{_FILE_NAME}_row"
    )


def _deleted_positions(
    spark: SparkSession, snapshot: TableSnapshot, files: Sequence[DataFile]
) -> DataFrame | None:
    """(file name, row index) of every row the files' deletion vectors delete."""
    with_dv = [f for f in files if f.deletion_vector]
    if not with_dv:
        return None
    fs, root = snapshot.location.filesystem()
    names, rows = [], []
    for f in with_dv:
        assert f.deletion_vector is not None
        gone = read_deleted_rows(fs, root, f.deletion_vector)
        names.append(np.full(len(gone), f.path.rsplit("/", 1)[-1], dtype=object))
        rows.append(gone.astype(np.int64))
    table = pa.table(
        {
            _FILE_NAME: pa.array(np.concatenate(names), pa.string()),
            f"{_FILE_NAME}_row": pa.array(np.concatenate(rows), pa.int64()),
        }
    )
    return spark.createDataFrame(table)


def read_table(spark: SparkSession, uri: str) -> DataFrame:
    """The table's current rows (an empty frame for a table with no files)."""
    snapshot = open_table(uri)
    if snapshot is None:
        raise FileNotFoundError(f"no Delta table at {uri}")
    return read_files(spark, snapshot, snapshot.files())
