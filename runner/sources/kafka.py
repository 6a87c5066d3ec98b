"""Kafka sources: the offsets a run reads, asked of the brokers, and the records read.

Planning asks the brokers, through the Kafka client Spark's connector brings (on the driver,
over Py4J: the consumer settings mean the same as for Spark's reader, security included),
for the topics' partitions and their earliest and latest offsets; runner/sources/
kafka_offsets.py turns them and the last checkpoint into one range per partition. The read is
then a bounded batch read of exactly those ranges (Spark's `assign`, `startingOffsets`,
`endingOffsets`), so the records committed are the records the recorded offsets cover: a run
that fails or is killed moves no offset, and its re-run reads the same records again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from runner.errors import UserError
from runner.sources.kafka_offsets import (
    BrokerOffsets,
    TopicPartition,
    assignment,
    offsets_json,
    parse_checkpoint,
    plan_read,
)
from runner.sources.model import SourcePlan
from runner.spec.model import KafkaSpec
from runner.spec.secrets import resolve

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# How long the driver waits for the brokers' answers before it says they cannot be reached
# (kafka.options default.api.timeout.ms changes it).
DEFAULT_TIMEOUT_MS = 10_000
BYTES = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
# Kafka's columns as the source's view shows them (value columns keep their own names).
KAFKA_COLUMNS = {
    "topic": "_kafka_topic",
    "partition": "_kafka_partition",
    "offset": "_kafka_offset",
    "timestamp": "_kafka_timestamp",
    "key": "_kafka_key",
    "headers": "_kafka_headers",
}


def consumer_settings(kafka: KafkaSpec, where: str) -> dict[str, str]:
    """The consumer's settings, `${env:NAME}` references resolved in the options and in
    bootstrap_servers (their values are then scrubbed from messages), bootstrap.servers last
    so that options cannot move it. Credentials go in the options, as Kafka's SASL and SSL
    settings take them (sasl.jaas.config: ${env:NAME})."""
    settings: dict[str, str] = resolve(dict(kafka.options), where=f"{where} kafka.options")
    servers = resolve(kafka.bootstrap_servers, where=f"{where} kafka.bootstrap_servers")
    settings["bootstrap.servers"] = servers
    return settings


def plan_kafka(spark: SparkSession, plan: SourcePlan) -> SourcePlan:
    """`plan` with the offset ranges this run reads, and the checkpoint to record."""
    kafka = plan.source.kafka
    assert kafka is not None
    since = parse_checkpoint(plan.since, plan.where) if plan.source.incremental else None
    broker = broker_offsets(spark, kafka, plan.where)
    read = plan_read(kafka, since, broker, plan.where)
    return replace(
        plan,
        kafka=read,
        until=read.checkpoint if plan.source.incremental else None,
        nothing_new=bool(plan.source.incremental) and read.records == 0,
        details=read.summary(),
    )


def broker_offsets(spark: SparkSession, kafka: KafkaSpec, where: str) -> BrokerOffsets:
    """Each partition's earliest and latest offset, from a consumer on the driver."""
    with driver_consumer(spark, kafka, where) as (jvm, consumer, wait, timeout_ms):
        try:
            partitions = topic_partitions(jvm, consumer, kafka, wait, where)
            if not partitions:
                return BrokerOffsets({}, {})
            listed = java_partitions(jvm, partitions)
            earliest = _offsets(consumer.beginningOffsets(listed, wait))
            latest = _offsets(consumer.endOffsets(listed, wait))
        except UserError:
            raise
        except Exception as exc:
            raise UserError(_unreachable(kafka, timeout_ms, exc, where)) from None
    return BrokerOffsets(earliest, latest)


def java_partitions(jvm: Any, partitions: list[TopicPartition]) -> Any:
    """The topic-partitions as the Java client takes them (a List of TopicPartition)."""
    listed = jvm.java.util.ArrayList()
    for topic, partition in partitions:
        listed.add(jvm.org.apache.kafka.common.TopicPartition(topic, partition))
    return listed


def topic_names(spark: SparkSession, kafka: KafkaSpec, where: str) -> list[str]:
    """The topics the source reads, as the brokers list them now."""
    with driver_consumer(spark, kafka, where) as (jvm, consumer, wait, timeout_ms):
        try:
            partitions = topic_partitions(jvm, consumer, kafka, wait, where)
        except UserError:
            raise
        except Exception as exc:
            raise UserError(_unreachable(kafka, timeout_ms, exc, where)) from None
    return sorted({topic for topic, _ in partitions})


@contextmanager
def driver_consumer(
    spark: SparkSession, kafka: KafkaSpec, where: str, extra: dict[str, str] | None = None
) -> Iterator[tuple[Any, Any, Any, int]]:
    """A consumer on the driver with the source's settings (`extra` beside them), closed
    after: the JVM's gateway, the consumer, how long a call waits (a Duration) and in ms."""
    settings = consumer_settings(kafka, where)
    timeout_ms = int(settings.get("default.api.timeout.ms", DEFAULT_TIMEOUT_MS))
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    props = jvm.java.util.Properties()
    for key, value in {
        "key.deserializer": BYTES,
        "value.deserializer": BYTES,
        "enable.auto.commit": "false",
        "default.api.timeout.ms": str(timeout_ms),
        "request.timeout.ms": str(min(timeout_ms, 30_000)),
        **(extra or {}),
        **settings,
    }.items():
        props.put(key, value)
    try:
        consumer = jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props)
    except Exception as exc:  # a setting the client refuses
        raise UserError(f"{where}: Kafka consumer settings refused: {_java_reason(exc)}") from None
    try:
        yield jvm, consumer, jvm.java.time.Duration.ofMillis(timeout_ms), timeout_ms
    finally:
        consumer.close()


def topic_partitions(
    jvm: Any, consumer: Any, kafka: KafkaSpec, wait: Any, where: str
) -> list[TopicPartition]:
    """The topic-partitions to read: of the named topics (each must exist), or of every
    topic whose whole name matches the pattern (Java's regular expressions, as Spark's)."""
    topics = consumer.listTopics(wait)  # also the first contact: an unreachable broker fails here
    if kafka.topic_pattern:
        pattern = jvm.java.util.regex.Pattern.compile(kafka.topic_pattern)
        names = sorted(str(t) for t in topics.keySet() if pattern.matcher(t).matches())
    else:
        missing = [t for t in kafka.topics if not topics.containsKey(t)]
        if missing:
            raise UserError(
                f"{where}: no topic {', '.join(repr(t) for t in missing)} at "
                f"{kafka.bootstrap_servers} (topics there: {_some(topics.keySet())})"
            )
        names = list(kafka.topics)
    return [(name, int(info.partition())) for name in names for info in topics.get(name) or []]


def _offsets(java_map: Any) -> dict[TopicPartition, int]:
    return {
        (str(tp.topic()), int(tp.partition())): int(java_map.get(tp)) for tp in java_map.keySet()
    }


def _some(names: Any) -> str:
    shown = sorted(str(n) for n in names if not str(n).startswith("__"))
    if not shown:
        return "none"
    return ", ".join(shown[:10]) + (f" and {len(shown) - 10} more" if len(shown) > 10 else "")


def _unreachable(kafka: KafkaSpec, timeout_ms: int, exc: Exception, where: str) -> str:
    reason = _java_reason(exc)
    if "Timeout" in reason or "timed out" in reason.lower():
        return (
            f"{where}: no answer from the Kafka brokers at {kafka.bootstrap_servers} within "
            f"{timeout_ms / 1000:g} s; check kafka.bootstrap_servers, that the brokers are "
            "reachable from here, and the security settings in kafka.options"
        )
    return f"{where}: Kafka at {kafka.bootstrap_servers}: {reason}"


def _java_reason(exc: Exception) -> str:
    """The Java exception's own message, without the Py4J trace around it."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        return f"{java.getClass().getSimpleName()}: {java.getMessage()}"
    found = re.search(r"(\w+(?:Exception|Error)): (.+)", str(exc))
    return f"{found[1]}: {found[2]}" if found else str(exc).strip().splitlines()[0]


def read_kafka(spark: SparkSession, plan: SourcePlan) -> DataFrame:
    """The records of the planned ranges, Kafka's columns named as KAFKA_COLUMNS says and
    the value still binary (`value`); no records at all reads nothing."""
    kafka, read = plan.source.kafka, plan.kafka
    assert kafka is not None and read is not None
    ranges = read.to_read
    if not ranges:
        return empty_records(spark)
    settings = consumer_settings(kafka, plan.where)
    reader = (
        spark.read.format("kafka")
        .options(**{f"kafka.{k}": v for k, v in settings.items()})
        .option("assign", json.dumps(assignment(ranges)))
        .option("startingOffsets", offsets_json(ranges, "start"))
        .option("endingOffsets", offsets_json(ranges, "end"))
        # the plan checked for lost records; any lost since then fails the read
        .option("failOnDataLoss", "true")
        .option("includeHeaders", "true")
    )
    return _renamed(reader.load())


def empty_records(spark: SparkSession) -> DataFrame:
    schema = (
        "key binary, value binary, topic string, partition int, offset bigint, "
        "timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>"
    )
    return _renamed(spark.createDataFrame([], schema))


def _renamed(frame: DataFrame) -> DataFrame:
    return frame.withColumnsRenamed(KAFKA_COLUMNS).drop("timestampType")
