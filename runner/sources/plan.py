"""What each source reads this run, decided before Spark starts where possible.

`plan_sources` lists new files and reads Delta logs (no JVM), so a run with nothing new
ends in well under a second. `read_input` then builds the batch in Spark: each source a
temporary view under its name, and the transform over them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from runner.errors import UserError
from runner.sources import jdbc
from runner.sources.bad_input import (
    CORRUPT,
    TEXT_FORMATS,
    MalformedRows,
    permissive_options,
    split_malformed,
    with_corrupt_column,
)
from runner.sources.checkpoint import StartingPoints
from runner.sources.delta import COMMIT_TIME, open_source_table, plan_delta_read
from runner.sources.listing import FileCheckpoint, list_new_files
from runner.spec.model import PipelineSpec, Source
from runner.spec.secrets import resolve

FILE_FORMATS = ("parquet", "csv", "json", "orc")


@dataclass
class SourcePlan:
    source: Source
    since: Any = None  # the checkpoint this read starts after (None: the beginning)
    until: Any = None  # the checkpoint to record once this read is committed
    paths: list[str] | None = None  # exactly these files (None: the source's path)
    base_path: str | None = None  # the directory partition discovery starts from
    instants: list[str] | None = None  # a Delta source: only rows of these commits
    nothing_new: bool = False
    details: dict[str, Any] = field(default_factory=dict)  # for the run summary

    @property
    def where(self) -> str:
        return f"source '{self.source.name}'"

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": self.source.format, **self.details}
        if self.source.incremental:
            out.update(since=self.since, until=self.until, nothing_new=self.nothing_new)
        return out


def plan_sources(
    spec: PipelineSpec, points: StartingPoints, skip: frozenset[str] = frozenset()
) -> list[SourcePlan]:
    """What each source reads; `skip` holds files found unreadable, to be read no more."""
    return [_plan(s, points.by_source.get(s.name), skip) for s in spec.sources]


def nothing_new(plans: list[SourcePlan]) -> bool:
    """True when the spec reads incrementally and no incremental source has anything new:
    a run then commits nothing (sources read in full are lookups, not news)."""
    incremental = [p for p in plans if p.source.incremental]
    return bool(incremental) and all(p.nothing_new for p in incremental)


def _plan(source: Source, since: Any, skip: frozenset[str]) -> SourcePlan:
    plan = SourcePlan(source, since=since)
    mode = source.incremental.mode if source.incremental else None
    if source.format in FILE_FORMATS and mode == "new_files":
        start = FileCheckpoint.from_json(since, plan.where)
        found = list_new_files(resolve(source.path, where=plan.where), start)
        plan.since = start.to_json() if start else None
        # skipped files stay under the checkpoint: they are passed, not read again
        plan.paths, plan.base_path = [p for p in found.paths if p not in skip], found.root
        plan.until = found.until.to_json() if found.until else None
        plan.nothing_new = not found.paths
        plan.details = {"files": len(found.paths), "bytes": found.bytes}
    elif source.format in FILE_FORMATS and skip:
        # Spark lists the path itself, unless some of its files must be left out
        found = list_new_files(resolve(source.path, where=plan.where), None)
        kept = [p for p in found.paths if p not in skip]
        if len(kept) < len(found.paths):
            plan.paths, plan.base_path = kept, found.root
    elif source.format == "delta":
        read = plan_delta_read(
            resolve(source.path, where=plan.where), since, bool(source.incremental), plan.where
        )
        plan.paths, plan.instants = read.paths, read.instants
        plan.details = {
            "version": read.version,
            "files": len(read.paths),
            "files_skipped": read.files_total - len(read.paths),
            "bytes": read.bytes,
        }
        if source.incremental:
            plan.until = {"version": read.version}
            plan.nothing_new = read.instants is not None and not read.instants
            if plan.nothing_new:
                plan.until = since if isinstance(since, dict) else {"version": read.version}
    return plan


@dataclass(frozen=True)
class Input:
    batch: DataFrame  # the transform over the sources' views, or the single source
    malformed: list[MalformedRows]  # per csv/json source: the records that did not parse


def read_input(spark: SparkSession, spec: PipelineSpec, plans: list[SourcePlan]) -> Input:
    """The batch to write, and the text records left out of it because they do not parse."""
    frames: dict[str, DataFrame] = {}
    malformed = []
    for plan in plans:
        frame = read_source(spark, plan)
        if CORRUPT in frame.columns:
            frame, rows = split_malformed(frame, plan.source)
            malformed.append(rows)
        frames[plan.source.name] = frame
        frame.createOrReplaceTempView(plan.source.name)
    if not spec.transform_sql:
        return Input(next(iter(frames.values())), malformed)
    try:
        return Input(spark.sql(spec.transform_sql), malformed)
    except (AnalysisException, ParseException) as exc:
        raise UserError(f"transform.sql in {spec.file}: {_first_line(exc)}") from exc


def read_source(spark: SparkSession, plan: SourcePlan) -> DataFrame:
    """One source as Spark reads it; a csv or json source carries the corrupt-record column
    (bad_input.CORRUPT), which read_input splits off."""
    source = plan.source
    if source.format == "jdbc":
        return jdbc.read_jdbc(spark, plan)
    if source.format == "delta":
        return _read_delta(spark, plan)
    text = source.format in TEXT_FORMATS
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
            raise UserError(f"{plan.where}: schema is not valid DDL: {_first_line(exc)}") from exc
    frame = _load(reader, plan)
    if text and frame.columns == [CORRUPT]:
        raise UserError(
            f"{plan.where} ({source.format} at {source.path}): no record parses as "
            f"{source.format}, so no schema can be inferred; fix the input, or give the source "
            "a `schema:` (records that do not parse then follow on_bad_record)"
        )
    if text and CORRUPT not in frame.columns:  # an inferred schema: read again with the column
        frame = _load(reader.schema(with_corrupt_column(frame.schema)), plan)
    return frame


def _load(reader, plan: SourcePlan) -> DataFrame:
    source = plan.source
    path = resolve(source.path, where=plan.where)
    try:
        if plan.paths is None:
            return reader.load(path)
        if not plan.paths:  # nothing new here, though another source has news
            return _empty_like(reader, plan, path)
        base = plan.base_path or path
        return reader.option("basePath", base).load([spark_path(p) for p in plan.paths])
    except AnalysisException as exc:
        raise UserError(
            f"{plan.where} ({source.format} at {source.path}): {_first_line(exc)}"
        ) from exc


def spark_path(path: str) -> str:
    """A file path Spark reads as that one file: it would take [ ] { } * ? as a glob."""
    return re.sub(r"([\\\[\]{}*?])", r"\\\1", path)


def _empty_like(reader, plan: SourcePlan, path: str) -> DataFrame:
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


def _read_delta(spark: SparkSession, plan: SourcePlan) -> DataFrame:
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    if not plan.paths:
        table = open_source_table(resolve(plan.source.path, where=plan.where), plan.where)
        return spark.createDataFrame([], from_arrow_schema(pa.schema(table.schema().to_arrow())))
    frame = spark.read.parquet(*[spark_path(p) for p in plan.paths])
    if plan.instants is not None:
        frame = frame.where(F.col(COMMIT_TIME).isin(plan.instants))
    return frame


def _first_line(exc: Exception) -> str:
    """Spark's message without its SQLSTATE code, which tells a user nothing."""
    return re.sub(r"\s*SQLSTATE: \w+", "", str(exc).strip().splitlines()[0])
