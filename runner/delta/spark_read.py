"""Spark reads of runner tables: delta-rs picks the files, Spark reads the parquet; on S3
the session is given the connector first (`table_reading_jars`, `let_spark_read`).

On a MERGE_ON_READ table a file may carry a deletion vector: its deleted rows are dropped
by an anti-join on (file name, row index), with Spark's `_metadata.row_index` (the row's
position in its parquet file, what a deletion vector counts) and the deleted positions read
on the driver. File names are unique in a runner table (file group, write token, instant).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from runner.delta.deletion_vectors import DeletionVector, read_deleted_rows
from runner.delta.snapshot import DataFile, TableSnapshot, open_table
from runner.jvm import s3_connector
from runner.jvm.session import under_spark_submit
from runner.storage.location import TableLocation, is_local

_GLOB_CHARS = "\\[]{}*?"
FILE_NAME = "__runner_stored_file"
ROW_INDEX = "__runner_row_index"
_FILE_NAME = "__runner_file_name"
_ROW = "__runner_file_row"


def _hadoop_path(uri: str, rel: str) -> str:
    """An exact file path for Spark: Hadoop would read [ ] { } * ? in a path as a glob."""
    path = f"{uri.rstrip('/')}/{rel}"
    for ch in _GLOB_CHARS:
        path = path.replace(ch, "\\" + ch)
    return path


# Spark lists more than this setting's number of paths (32) in a Spark job of its own: 0.4-0.6
# s for 128 files on 2 cores, a third of a million-row bucket expansion. Local files are
# listed on the driver in milliseconds; an object store keeps the job, which spreads its
# requests over the executors.
_LISTING_JOB_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"


@contextmanager
def listed_on_driver(spark: SparkSession, paths: Sequence[str]) -> Iterator[None]:
    """Around a read of exact file paths (its file index is built, and listed, when the
    DataFrame is made): local ones are listed on the driver instead of in a Spark job."""
    if not all(is_local(p) for p in paths):
        yield
        return
    before = spark.conf.get(_LISTING_JOB_THRESHOLD, None)
    spark.conf.set(_LISTING_JOB_THRESHOLD, str(max(32, len(paths))))
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(_LISTING_JOB_THRESHOLD)
        else:
            spark.conf.set(_LISTING_JOB_THRESHOLD, before)


def read_files(
    spark: SparkSession, snapshot: TableSnapshot, files: Sequence[DataFile]
) -> DataFrame:
    """The live rows of some of the table's files, with the table's schema."""
    if not files:
        return spark.createDataFrame([], from_arrow_schema(snapshot.arrow_schema()))
    frame = _scan(spark, snapshot, files)
    vectors = {f.path.rsplit("/", 1)[-1]: f.deletion_vector for f in files if f.deletion_vector}
    if not vectors:
        return frame
    return drop_deleted_rows(spark, frame, snapshot.location, vectors)


def read_stored_rows(
    spark: SparkSession, snapshot: TableSnapshot, files: Sequence[DataFile]
) -> DataFrame:
    """Every row the (non-empty) `files` store, those their deletion vectors delete too,
    with each row's FILE_NAME and ROW_INDEX: for a job that applies the vectors itself."""
    return _scan(spark, snapshot, files).select(
        "*",
        F.col("_metadata.file_name").alias(FILE_NAME),
        F.col("_metadata.row_index").alias(ROW_INDEX),
    )


def _scan(spark: SparkSession, snapshot: TableSnapshot, files: Sequence[DataFile]) -> DataFrame:
    paths = [_hadoop_path(snapshot.uri, f.path) for f in files]
    with listed_on_driver(spark, paths):
        return spark.read.schema(from_arrow_schema(snapshot.arrow_schema())).parquet(*paths)


def drop_deleted_rows(
    spark: SparkSession,
    frame: DataFrame,
    location: TableLocation,
    vectors: Mapping[str, DeletionVector],
) -> DataFrame:
    """A parquet scan of a table's files without the rows their deletion vectors delete.

    `frame` must be the scan itself (its `_metadata` column); `vectors` maps a file name to
    its deletion vector.
    """
    fs, root = location.filesystem()
    names, rows = [], []
    for name, dv in vectors.items():
        gone = read_deleted_rows(fs, root, dv)
        names.append(np.full(len(gone), name, dtype=object))
        rows.append(gone.astype(np.int64))
    deleted = spark.createDataFrame(
        pa.table(
            {
                _FILE_NAME: pa.array(np.concatenate(names), pa.string()),
                _ROW: pa.array(np.concatenate(rows), pa.int64()),
            }
        )
    )
    marked = frame.select(
        "*",
        F.col("_metadata.file_name").alias(_FILE_NAME),
        F.col("_metadata.row_index").alias(_ROW),
    )
    return marked.join(F.broadcast(deleted), [_FILE_NAME, _ROW], "left_anti").drop(_FILE_NAME, _ROW)


def read_table(spark: SparkSession, uri: str) -> DataFrame:
    """The table's current rows (an empty frame for a table with no files)."""
    snapshot = open_table(uri)
    if snapshot is None:
        raise FileNotFoundError(f"no Delta table at {uri}")
    return read_files(spark, snapshot, snapshot.files())


def _reading(location: TableLocation) -> str:
    return f"bucket expansion of {location.uri} (Spark reads the table's files)"


def table_reading_jars(location: TableLocation) -> list[str]:
    """Jars a new session needs to read the table's files: the S3 connector's on S3."""
    if location.is_local:
        return []
    return s3_connector.jars_to_add(_reading(location), under_spark_submit())


def let_spark_read(spark: SparkSession, location: TableLocation) -> None:
    """Give the session what it needs to read the table's files (on S3: the connector's
    settings, from the table's)."""
    if not location.is_local:
        s3_connector.enable(spark, location.settings, _reading(location))
