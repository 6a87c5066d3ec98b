"""File sources (parquet, csv, json, orc) and the optional SQL transform over their views."""

from __future__ import annotations

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, SparkSession

from runner.errors import UserError
from runner.spec.model import PipelineSpec, Source
from runner.spec.secrets import resolve


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0]


def read_source(spark: SparkSession, source: Source) -> DataFrame:
    """The source's DataFrame; `${env:NAME}` in its path and options resolved only here."""
    where = f"source '{source.name}'"
    options = resolve(dict(source.options), where=where)
    reader = spark.read.format(source.format).options(**options)
    if source.schema:
        try:
            reader = reader.schema(source.schema)
        except (ParseException, AnalysisException) as exc:
            raise UserError(
                f"source '{source.name}': schema is not valid DDL: {_first_line(exc)}"
            ) from exc
    try:
        return reader.load(resolve(source.path, where=where))
    except AnalysisException as exc:
        raise UserError(
            f"source '{source.name}' ({source.format} at {source.path}): {_first_line(exc)}"
        ) from exc


def read_input(spark: SparkSession, spec: PipelineSpec) -> DataFrame:
    """The batch to write: the transform over the sources' views, or the single source."""
    frames = {s.name: read_source(spark, s) for s in spec.sources}
    for name, frame in frames.items():
        frame.createOrReplaceTempView(name)
    if not spec.transform_sql:
        return next(iter(frames.values()))
    try:
        return spark.sql(spec.transform_sql)
    except (AnalysisException, ParseException) as exc:
        raise UserError(f"transform.sql in {spec.file}: {_first_line(exc)}") from exc
