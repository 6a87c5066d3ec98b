"""The plan stage: the sources read into one batch, checked against the spec, with its key
columns and verdicts added, and the schema its files get.

Checks come first and cost nothing to the table: the spec's fields among the batch's columns,
their types, the expectations, the schema against the table's. The batch is not read here:
it is a Spark plan the next stages count and write.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BooleanType, CharType, StringType, StructType, VarcharType

from runner.delta.schema import SchemaPlan, plan_schema
from runner.delta.schema_rewrite import SchemaRewrite, plan_for_target
from runner.delta.snapshot import TableSnapshot
from runner.errors import UserError
from runner.fields import check_fields, columns_of, missing_field
from runner.index.layout import BucketLayout
from runner.pipeline.cdc_columns import check_feed_columns, not_stored, with_history_columns
from runner.pipeline.context import RunContext
from runner.pipeline.key_columns import add_key_columns
from runner.pipeline.quality import add_malformed, add_verdicts, check_expectations
from runner.pipeline.value_fit import cast_to_table
from runner.sources.kinds import kind_of
from runner.sources.model import SourcePlan
from runner.sources.plan import Input, read_input
from runner.spec.debezium import OP, POSITION
from runner.spec.model import PipelineSpec, Target
from runner.spec.text_order import text_order_fix, text_order_refusal
from runner.storage.meta_columns import (
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    META_COLUMNS,
    RESERVED_PREFIX,
)

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Batch:
    judged: DataFrame  # the batch with key columns, bucket and verdict (FATE, RULE) columns
    input_columns: tuple[str, ...]  # the batch's own columns, as the quarantine records them
    schema: SchemaPlan  # the data files' schema, and the columns this run adds to the table
    transformed: DataFrame  # the batch as the transform left it, with history columns
    cached_sources: tuple[DataFrame, ...] = ()  # sources read once (Kafka), kept in memory

    def release(self) -> None:
        """Free what the run cached of this batch."""
        self.judged.unpersist()
        for frame in self.cached_sources:
            frame.unpersist()


def plan_batch(
    ctx: RunContext,
    spark: SparkSession,
    plans: tuple[SourcePlan, ...],
    snapshot: TableSnapshot | None,
    pending: SchemaRewrite | None = None,
) -> Batch:
    """The batch, planned against the table as `pending` (schema_evolution full's renames
    and drops, rewritten before the write: runner/pipeline/rewrite_stage.py) leaves it."""
    with ctx.stage("plan"):
        read = read_input(spark, ctx.spec, list(plans))
        try:
            return _planned(ctx, read, snapshot, pending)
        except BaseException:
            # a refused batch frees what its read cached (a long-lived application goes on)
            for frame in read.cached:
                frame.unpersist()
            raise


def _planned(
    ctx: RunContext,
    read: Input,
    snapshot: TableSnapshot | None,
    pending: SchemaRewrite | None,
) -> Batch:
    spec, target = ctx.spec, ctx.target
    batch = _without_meta_columns(read.batch)
    check_operation_fields(batch.schema, target, columns_of(spec))
    check_feed_columns(batch.schema, target)
    input_columns = tuple(batch.columns)
    # the types are checked as they are stored: after the cast to the table's types where
    # values are cast (target.on_schema_mismatch), else before the schema plan, whose
    # refusal is then the less likely fix (a csv source read without a schema)
    casting = target.on_schema_mismatch != "refuse"
    if not casting:
        _check_types(batch, spec)
    batch = with_history_columns(batch, target)
    schema = plan_table_schema(batch, target, snapshot, pending)
    batch = cast_to_table(batch, schema.casts)
    if casting:
        _check_types(batch, spec)
    layout = table_layout(snapshot, target)
    keyed = add_key_columns(batch, target, layout)
    judged = _pinned(
        add_malformed(add_verdicts(keyed, spec), read.malformed), _changing_source(spec)
    )
    return Batch(judged, input_columns, schema, batch, tuple(read.cached))


def _check_types(batch: DataFrame, spec: PipelineSpec) -> None:
    check_operation_types(batch.schema, spec.target)
    check_expectations(batch, spec)


def table_layout(snapshot: TableSnapshot | None, target: Target) -> BucketLayout:
    """The bucket counts writes use: the table's own (expansion changes them), or the
    spec's count for a table this run creates."""
    if snapshot is None:
        return BucketLayout(target.index.buckets)
    return BucketLayout.from_configuration(snapshot.configuration)


def _changing_source(spec: PipelineSpec) -> str | None:
    """What makes the batch change between its reads (a JDBC source), or None."""
    return next((kind.pins_batch for kind in map(kind_of, spec.sources) if kind.pins_batch), None)


def _pinned(keyed: DataFrame, changing_source: str | None = None) -> DataFrame:
    """The batch is read twice (bucket counts, then the write); both passes must agree.

    A file source's listing is fixed when its DataFrame is created, so a deterministic plan
    gives the same rows twice, and caching it would cost more than reading it again (about
    3 s per million rows here). A non-deterministic plan (rand(), now(), ...) is cached.
    """
    if changing_source:
        # a live table changes between the passes (and a re-merge): read it once (a Kafka
        # source is cached as it is read: runner/sources/plan.py read_input)
        log.info("batch_cached", reason=changing_source)
        return keyed.persist()
    if keyed._jdf.queryExecution().analyzed().deterministic():
        return keyed
    log.info("batch_cached", reason="the transform is not deterministic")
    return keyed.persist()


def _without_meta_columns(batch: DataFrame) -> DataFrame:
    """A batch read from a runner table brings meta columns; this run computes its own."""
    # a change feed's version and time: a transform that wants them renames them
    dropped = [c for c in batch.columns if c in (*META_COLUMNS, COMMIT_VERSION, COMMIT_TIMESTAMP)]
    if dropped:
        log.info("input_meta_columns_replaced", columns=dropped)
    return batch.drop(*dropped)


def check_operation_fields(schema: StructType, target: Target, where: str) -> None:
    """Every field the spec names is among the batch's columns (`where` says whose they
    are)."""
    names = schema.fieldNames()
    reserved = [n for n in names if n.startswith(RESERVED_PREFIX)]
    if reserved:
        raise UserError(
            f"input column(s) {', '.join(reserved)} use the prefix {RESERVED_PREFIX!r}, which "
            "the runner keeps for itself; rename them in the transform"
        )
    check_fields(schema, target.record_key, "record key", where)
    check_fields(schema, target.key_generator.partition_fields, "partition", where)
    check_fields(schema, target.index.hash_fields, "index hash", where)
    if target.fed_by_debezium and target.cdc:
        feed = (target.cdc.sequence_by, target.cdc.operation_column)
        lost = [c for c in (POSITION, OP) if c in feed and c not in names]
        if lost:
            raise UserError(
                f"{' and '.join(lost)} of the Debezium events are not among {where}: keep them "
                f"in the transform's SELECT (SELECT *, or name them): they order the events "
                "and tell deletes"
            )
    if target.precombine_field and target.operation != "delete":
        role = "cdc.sequence_by" if target.cdc else "precombine"
        if target.precombine_field not in names:
            raise UserError(missing_field(role, target.precombine_field, names, where))
    if target.delete_marker and target.delete_marker not in names:
        raise UserError(missing_field("delete_marker", target.delete_marker, names, where))


def check_operation_types(schema: StructType, target: Target) -> None:
    """The ordering and delete-marker columns have types that mean what they say."""
    if target.precombine_field and target.operation != "delete":
        _refuse_text_order(schema, target)
    marker = target.delete_marker
    if marker and not isinstance(schema[marker].dataType, BooleanType):
        raise UserError(
            f"delete_marker '{marker}' must be a boolean column, not "
            f"{schema[marker].dataType.simpleString()}; cast it in the transform"
        )


def _refuse_text_order(schema: StructType, target: Target) -> None:
    """A string ordering column compares as text ('9' above '10'): a newer record would lose
    to an older one without a word. It is used only when the spec says text order is meant."""
    column = target.precombine_field
    assert column is not None
    kind = schema[column].dataType
    if target.precombine_string_order or not isinstance(kind, StringType | CharType | VarcharType):
        return
    raise UserError(
        f"{text_order_refusal(target, kind.simpleString())}; nothing was written. "
        f"{text_order_fix(column)}"
    )


def plan_table_schema(
    batch: DataFrame,
    target: Target,
    snapshot: TableSnapshot | None,
    pending: SchemaRewrite | None = None,
) -> SchemaPlan:
    """The schema plan of `batch`'s stored columns against the table's (after `pending`)."""
    table_schema = snapshot.arrow_schema() if snapshot else None
    if table_schema is not None and pending:
        table_schema = pending.apply(table_schema)
    if target.operation == "delete":
        if table_schema is None:
            raise UserError(f"operation delete needs an existing table; none at {target.path}")
        return plan_schema(table_schema, table_schema, target.path)
    internal = [c for c in batch.columns if c.startswith(RESERVED_PREFIX)]  # value_fit.py's
    data = batch.drop(*not_stored(target, batch.columns), *internal)
    incoming = to_arrow_schema(data.schema, timezone="UTC")
    schema = plan_for_target(incoming, table_schema, target, target.path)
    if schema.changes:  # known before anything is written (and in a dry run)
        log.info("schema_changes_planned", changes=[c.describe() for c in schema.changes])
    if schema.casts:
        log.info("values_cast_to_table_types", columns=[c.describe() for c in schema.casts])
    return schema
