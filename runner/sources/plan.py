"""What each source reads this run, decided before Spark starts where possible.

`plan_sources` lists new files and reads Delta logs (no JVM), so a run with nothing new
ends in well under a second. `read_input` then builds the batch in Spark: each source a
temporary view under its name, and the transform over them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F

from runner.delta.spark_read import drop_deleted_rows, listed_on_driver
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
from runner.sources.delta import open_source_table, plan_delta_read
from runner.sources.delta_changes import read_source_changes
from runner.sources.kafka import plan_kafka, read_kafka
from runner.sources.kafka_values import decode_values
from runner.sources.listing import FileCheckpoint, list_new_files
from runner.sources.model import SourcePlan
from runner.spec.model import PipelineSpec, Source
from runner.spec.secrets import resolve
from runner.spec.transform import not_a_query, statement_kind
from runner.storage.location import S3_SCHEMES, TableLocation, locate, scheme
from runner.storage.meta_columns import COMMIT_TIME

FILE_FORMATS = ("parquet", "csv", "json", "orc")


def sources_on_s3(spec: PipelineSpec) -> tuple[str, TableLocation] | None:
    """The first source Spark reads from S3 (what needs it, for messages) and its location
    with the environment's S3 settings; None when Spark reads no source there."""
    for source in spec.sources:
        if source.format not in (*FILE_FORMATS, "delta") or not source.path:
            continue
        if scheme(source.path) in S3_SCHEMES:
            return f"source '{source.name}' ({source.path})", locate(source.path)
    return None


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
    where = f"source '{source.name}'"
    mode = source.incremental.mode if source.incremental else None
    if source.format in FILE_FORMATS and mode == "new_files":
        start = FileCheckpoint.from_json(since, where)
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
    if source.format in FILE_FORMATS and skip:
        # Spark lists the path itself, unless some of its files must be left out
        found = list_new_files(source.path, None)
        kept = tuple(p for p in found.paths if p not in skip)
        if len(kept) < len(found.paths):
            return SourcePlan(source, since=since, paths=kept, base_path=found.root)
    if source.format == "delta":
        read = plan_delta_read(source.path, since, source.incremental, where)
        skipped = read.net.skipped if read.net else frozenset()
        nothing = bool(source.incremental) and read.instants is not None and not read.instants
        until = None
        if source.incremental:
            until = {"version": read.version}
            if nothing and isinstance(since, dict):
                until = since
        return SourcePlan(
            source,
            since=since,
            until=until,
            paths=tuple(read.paths),
            instants=tuple(read.instants) if read.instants is not None else None,
            deletion_vectors=read.deletion_vectors,
            changes=read.changes,
            nothing_new=nothing,
            details={
                "version": read.version,
                "files": len(read.paths),
                "files_skipped": read.files_total - len(read.paths),
                **({"change_feed": True} if read.changes is not None else {}),
                "bytes": read.bytes,
                **({"versions_skipped": sorted(skipped)} if skipped else {}),
            },
            undone=read.net.undone if read.net else None,
        )
    return SourcePlan(source, since=since)


def plan_live_reads(spark: SparkSession, plans: list[SourcePlan]) -> list[SourcePlan]:
    """The plans with each JDBC source's bounds asked of its database, and each Kafka
    source's offsets of its brokers (both through jars Spark loads): what a live source
    reads is fixed before it is read, twice if need be."""
    planners = {"jdbc": jdbc.plan_jdbc, "kafka": plan_kafka}
    return [
        planners[p.source.format](spark, p) if p.source.format in planners else p for p in plans
    ]


@dataclass(frozen=True)
class Input:
    batch: DataFrame  # the transform over the sources' views, or the single source
    malformed: list[MalformedRows]  # per csv/json source: the records that did not parse
    cached: list[DataFrame]  # sources read once and cached: unpersist when done


def read_input(spark: SparkSession, spec: PipelineSpec, plans: list[SourcePlan]) -> Input:
    """The batch to write, and the text records left out of it because they do not parse."""
    frames: dict[str, DataFrame] = {}
    malformed = []
    cached = []
    for plan in plans:
        frame = read_source(spark, plan)
        if plan.source.format == "kafka":
            # decoded once: the rows that parsed and those that did not are two scans of
            # it, and the write's passes more; retention cannot change it meanwhile
            frame = frame.persist()
            cached.append(frame)
        if CORRUPT in frame.columns:
            frame, rows = split_malformed(frame, plan.source)
            malformed.append(rows)
        frames[plan.source.name] = frame
        frame.createOrReplaceTempView(plan.source.name)
    if not spec.transform_sql:
        return Input(next(iter(frames.values())), malformed, cached)
    refuse_statements(spark, spec.transform_sql, spec.file)
    try:
        batch = spark.sql(spec.transform_sql)
    except (AnalysisException, ParseException) as exc:
        raise UserError(f"transform.sql in {spec.file}: {_first_line(exc)}") from exc
    _refuse_repeated_columns(batch.columns, spec.file)
    return Input(batch, malformed, cached)


def _refuse_repeated_columns(columns: list[str], spec_file: str) -> None:
    """A column name given twice (`SELECT id, * ...`) cannot be stored, nor read back as one
    column; Spark and Delta match names regardless of case, so neither is `id` beside `ID`."""
    spellings: dict[str, list[str]] = {}
    for name in columns:
        spellings.setdefault(name.lower(), []).append(name)
    repeated = [names for names in spellings.values() if len(names) > 1]
    if repeated:
        shown = ", ".join(_repeats(names) for names in repeated)
        raise UserError(
            f"transform.sql in {spec_file} gives the same column name more than once: "
            f"{shown}; alias them so that each column has its own name "
            "(`SELECT s.*, o.id AS order_id ...`), or select each column once (names that "
            "differ only in case are one name to Spark and Delta)"
        )


def _repeats(names: list[str]) -> str:
    if len(set(names)) > 1:
        return " and ".join(f"'{n}'" for n in names)
    return f"'{names[0]}' " + ("twice" if len(names) == 2 else f"{len(names)} times")


def refuse_statements(spark: SparkSession, sql: str, spec_file: str) -> None:
    """Raise UserError unless Spark's parser reads `sql` as one query (trailing ';' allowed).

    `spark.sql()` runs a command (INSERT OVERWRITE DIRECTORY, CREATE TABLE, SET, ...) as
    soon as it is given one, so the text is parsed first, which runs nothing: with the
    grammar's query rule, else as any statement, to tell a statement from a syntax error.
    """
    parser = spark._jsparkSession.sessionState().sqlParser()
    try:
        parser.parseQuery(sql)
        return
    except AnalysisException:  # ParseException: not a query, or no statement at all
        pass
    try:
        plan = parser.parsePlan(sql)
    except AnalysisException as exc:
        raise UserError(f"transform.sql in {spec_file}: {_first_line(exc)}") from exc
    # one statement, maybe followed by ';' (which the query rule does not take): a query
    # when the text before one of its ';' is (a ';' in a literal or comment cuts nothing)
    for cut in reversed([i for i, c in enumerate(sql) if c == ";"]):
        try:
            parser.parseQuery(sql[:cut])
            return
        except AnalysisException:
            continue
    while plan.nodeName() == "UnresolvedWith":  # WITH ... INSERT: the statement after it
        plan = plan.child()
    start = plan.origin().startIndex()  # where Spark read the statement to begin
    at = int(start.get()) if start.isDefined() else 0
    kind = statement_kind(sql[at:]) or statement_kind(sql) or str(plan.nodeName())
    raise UserError(f"transform.sql in {spec_file} {not_a_query(kind)}; nothing of it was run")


def read_source(spark: SparkSession, plan: SourcePlan) -> DataFrame:
    """One source as Spark reads it; a csv or json source carries the corrupt-record column
    (bad_input.CORRUPT), which read_input splits off."""
    source = plan.source
    if source.format == "jdbc":
        return jdbc.read_jdbc(spark, plan)
    if source.format == "delta":
        return _read_delta(spark, plan)
    if source.format == "kafka":
        return decode_values(read_kafka(spark, plan), source)
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
            f"{plan.where} ({source.format} at {source.path}): {_first_line(exc)}"
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


def _read_delta(spark: SparkSession, plan: SourcePlan) -> DataFrame:
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


def _first_line(exc: Exception) -> str:
    """Spark's message without its SQLSTATE code, which tells a user nothing."""
    return re.sub(r"\s*SQLSTATE: \w+", "", str(exc).strip().splitlines()[0])
