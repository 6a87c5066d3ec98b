"""What each source reads this run, decided before Spark starts where possible.

`plan_sources` lists new files and reads Delta logs (no JVM), so a run with nothing new
ends in well under a second. `read_input` then builds the batch in Spark: each source a
temporary view under its name, and the transform over them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, SparkSession

from runner.errors import UserError
from runner.sources.checkpoint import StartingPoints
from runner.sources.kinds import kind_of
from runner.sources.model import SourcePlan
from runner.sources.spark_reads import first_line
from runner.sources.text_records import CORRUPT, MalformedRows, split_malformed
from runner.spec.model import PipelineSpec
from runner.spec.transform import not_a_query, statement_kind
from runner.storage.location import S3_SCHEMES, TableLocation, locate, scheme


def sources_on_s3(spec: PipelineSpec) -> tuple[str, TableLocation] | None:
    """The first source Spark reads from S3 (what needs it, for messages) and its location
    with the environment's S3 settings; None when Spark reads no source there."""
    for source in spec.sources:
        if not kind_of(source).reads_path or not source.path:
            continue
        if scheme(source.path) in S3_SCHEMES:
            return f"source '{source.name}' ({source.path})", locate(source.path)
    return None


def plan_sources(
    spec: PipelineSpec, points: StartingPoints, skip: frozenset[str] = frozenset()
) -> list[SourcePlan]:
    """What each source reads; `skip` holds files found unreadable, to be read no more."""
    return [kind_of(s).plan(s, points.by_source.get(s.name), skip) for s in spec.sources]


def nothing_new(plans: list[SourcePlan]) -> bool:
    """True when the spec reads incrementally and no incremental source has anything new:
    a run then commits nothing (sources read in full are lookups, not news)."""
    incremental = [p for p in plans if p.source.incremental]
    return bool(incremental) and all(p.nothing_new for p in incremental)


def plan_live_reads(spark: SparkSession, plans: list[SourcePlan]) -> list[SourcePlan]:
    """The plans with each JDBC source's bounds asked of its database, and each Kafka
    source's offsets of its brokers (both through jars Spark loads): what a live source
    reads is fixed before it is read, twice if need be."""
    return [kind_of(p.source).plan_live(spark, p) for p in plans]


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
        if kind_of(plan.source).cached_when_read:
            # decoded once (Kafka): the rows that parsed and those that did not are two
            # scans of it, and the write's passes more; retention cannot change it meanwhile
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
        raise UserError(f"transform.sql in {spec.file}: {first_line(exc)}") from exc
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
        raise UserError(f"transform.sql in {spec_file}: {first_line(exc)}") from exc
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
    """One source as its kind reads it; a csv or json source carries the corrupt-record
    column (text_records.CORRUPT), which read_input splits off."""
    return kind_of(plan.source).read(spark, plan)
