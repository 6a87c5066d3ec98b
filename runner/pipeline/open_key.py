"""A run of a spec whose record key is left to Debezium's message key (runner/spec/
debezium.py) fills it in before any stage reads it: from the table, which stores the key
it was created with, or, before the table exists, from the source's topics."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import structlog

from runner.errors import UserError
from runner.pipeline.context import RunContext
from runner.sources.message_key import stored_record_key, topic_key_fields
from runner.spec.loader import load_spec
from runner.spec.model import PipelineSpec
from runner.spec.routing import route

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from runner.sources.model import SourcePlan

log = structlog.get_logger(__name__)


def with_stored_key(ctx: RunContext, say: bool = True) -> RunContext:
    """`ctx` with the table's record key, when the spec leaves it to the message key and
    the table exists (`say`: log where the key came from; a run says it once)."""
    if not ctx.target.key_from_message:
        return ctx
    fields = stored_record_key(ctx.target.path)
    return ctx if fields is None else _keyed(ctx, fields, "the table's" if say else "")


def keyed_spec(spec: PipelineSpec) -> PipelineSpec:
    """The spec with its table's record key, when it leaves the key to the message key: for
    the commands that work on the table a run created (compact, expand, keys...)."""
    if not spec.target.key_from_message:
        return spec
    fields = stored_record_key(spec.target.path)
    if fields is None:
        raise UserError(
            f"{spec.file}: the record key is left to the Debezium message key, and there is no "
            f"table at {spec.target.path} yet to tell its fields: run the pipeline first, or "
            "name them in target.record_key"
        )
    return load_spec(spec.file, parse_transform=False, record_key=fields)


def with_topic_key(
    ctx: RunContext, spark: SparkSession, plans: tuple[SourcePlan, ...]
) -> RunContext:
    """`ctx` with the message key's fields, read from the first Debezium source's topics,
    when the spec leaves the key to them and no table tells it."""
    if not ctx.target.key_from_message:
        return ctx
    for plan in plans:
        kafka = plan.source.kafka
        if kafka is not None and kafka.value_format == "debezium":
            fields = topic_key_fields(spark, plan.source)
            if fields is not None:
                return _keyed(ctx, fields, f"source '{plan.source.name}''s message")
    raise UserError(
        "the record key is left to the Debezium message key, and no topic has a keyed "
        "record yet to tell its fields: name them in target.record_key, or run again once "
        "the connector has written"
    )


def _keyed(ctx: RunContext, fields: tuple[str, ...], whose: str) -> RunContext:
    if whose:
        log.info("record_key_from_message_key", fields=list(fields), taken_from=whose)
    spec = load_spec(ctx.spec.file, parse_transform=False, record_key=fields)
    topic = ctx.spec.route_topic
    return replace(ctx, spec=route(spec, topic) if topic else spec)
