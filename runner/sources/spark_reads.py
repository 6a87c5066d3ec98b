"""Files and Delta tables as Spark reads them: the read of the file kinds and of the delta
kind (runner/sources/kinds/), exactly the files their plans name."""

from __future__ import annotations

import re

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F

from runner.delta.spark_read import drop_deleted_rows, listed_on_driver
from runner.errors import UserError
from runner.sources.delta import open_source_table
from runner.sources.delta_changes import read_source_changes
from runner.sources.model import SourcePlan
from runner.sources.text_records import CORRUPT, permissive_options, with_corrupt_column
from runner.spec.secrets import resolve
from runner.storage.location import locate
from runner.storage.meta_columns import COMMIT_TIME


def read_files(spark: SparkSession, plan: SourcePlan, text: bool) -> DataFrame:
    """A file source; a `text` one (csv, json) carries the corrupt-record column
    (text_records.CORRUPT), which read_input splits off."""
    source = plan.source
    reader = spark.read.format(source.format).options(
        **resolve(dict(source.options), where=plan.where)
    )
    if text:
        reader = reader.options(**permissive_options())
    if source.schema:
        ddl = f"{source.schema}, `{CORRUPT}` string" if text else source.schema
        try:
            reader = reader.schema(ddl)
        except (ParseException, AnalysisException) as exc:
            raise UserError(f"{plan.where}: schema is not valid DDL: {first_line(exc)}") from exc
    frame = _load(spark, reader, plan)
    if text and frame.columns == [CORRUPT]:
        raise UserError(
            f"{plan.where} ({source.format} at {source.path}): no record parses as "
            f"{source.format}, so no schema can be inferred; fix the input, or give the source "
            "a `schema:` (records that do not parse then follow on_bad_record)"
        )
    if text and CORRUPT not in frame.columns:  # an inferred schema: read again with the column
        frame = _load(spark, reader.schema(with_corrupt_column(frame.schema)), plan)
    return frame


def _load(spark: SparkSession, reader: DataFrameReader, plan: SourcePlan) -> DataFrame:
    source = plan.source
    path = source.path
    try:
        if plan.paths is None:
            return reader.load(path)
        if not plan.paths:  # nothing new here, though another source has news
            return _empty_like(reader, plan, path)
        base = plan.base_path or path
        paths = [spark_path(p) for p in plan.paths]
        with listed_on_driver(spark, paths):
            return reader.option("basePath", base).load(paths)
    except AnalysisException as exc:
        raise UserError(
            f"{plan.where} ({source.format} at {source.path}): {first_line(exc)}"
        ) from exc


def spark_path(path: str) -> str:
    """A file path Spark reads as that one file: it would take [ ] { } * ? as a glob."""
    return re.sub(r"([\\\[\]{}*?])", r"\\\1", path)


def _empty_like(reader: DataFrameReader, plan: SourcePlan, path: str) -> DataFrame:
    """No rows, with the source's columns: from its declared schema, or from the last file
    it read (inferring from the whole directory would re-scan it, or fail when empty)."""
    if plan.source.schema:
        return reader.load(path).where(F.lit(False))
    names = (plan.since or {}).get("names") or []
    if not names:
        raise UserError(
            f"{plan.where} has no files yet and no schema: give the source a `schema:` "
            "(Spark DDL) so the transform can run while its directory is empty"
        )
    last = f"{(plan.base_path or path).rstrip('/')}/{names[0]}"
    return reader.load(spark_path(last)).where(F.lit(False))


def read_delta(spark: SparkSession, plan: SourcePlan) -> DataFrame:
    """A Delta source: its change feed, or the planned files less the rows their deletion
    vectors delete, only of the planned commits."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    if plan.changes is not None:
        return read_source_changes(spark, plan.source.path, plan.changes)
    if not plan.paths:
        table = open_source_table(plan.source.path, plan.where)
        return spark.createDataFrame([], from_arrow_schema(pa.schema(table.schema().to_arrow())))
    paths = [spark_path(p) for p in plan.paths]
    with listed_on_driver(spark, paths):
        frame = spark.read.parquet(*paths)
    if plan.deletion_vectors:  # a MERGE_ON_READ table: rows its deletion vectors delete go
        where = plan.source.path
        frame = drop_deleted_rows(spark, frame, locate(where), plan.deletion_vectors)
    if plan.instants is not None:
        frame = frame.where(F.col(COMMIT_TIME).isin(list(plan.instants)))
    return frame


def first_line(exc: Exception) -> str:
    """Spark's message without its SQLSTATE code, which tells a user nothing."""
    return re.sub(r"\s*SQLSTATE: \w+", "", str(exc).strip().splitlines()[0])
