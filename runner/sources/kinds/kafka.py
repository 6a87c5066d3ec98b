"""The kafka kind: records of Kafka topics in bounded offset ranges, asked of the brokers
once Spark runs (runner/sources/kafka.py, kafka_offsets.py), their values decoded
(kafka_values.py) once and kept, so every pass of the batch reads the same records. It
needs Spark's Kafka connector (and Avro's for Avro values). Its lineage datasets are
`kafka://` and the first bootstrap server, one per topic (or the pattern).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from runner.errors import UserError
from runner.jvm.spark_connectors import avro, kafka
from runner.sources.dataset_names import Dataset, without_credentials
from runner.sources.kafka import plan_kafka, read_kafka
from runner.sources.kinds.base import FirstReadLoss, SourceKind, where
from runner.sources.model import InputSchema, SourcePlan
from runner.spec.model import KafkaSpec, Source

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_RECORDS_GONE = re.compile(
    r"Could not read records in offset (\[\d+, \d+\)) for topic partition (\S+)"
)


def kafka_datasets(kafka: KafkaSpec) -> list[Dataset]:
    """`kafka://` and the first bootstrap server; one dataset per topic, or the pattern."""
    first = kafka.bootstrap_servers.split(",")[0].strip()
    server = without_credentials(first.split("://", 1)[-1])  # a listener's PROTOCOL:// prefix
    topics = kafka.topics or ((kafka.topic_pattern,) if kafka.topic_pattern else ())
    return [(f"kafka://{server}", topic) for topic in topics]


class Kafka(SourceKind):
    format = "kafka"
    spec_section = "kafka"
    cached_when_read = True

    def plan(self, source: Source, since: Any, skip: frozenset[str]) -> SourcePlan:
        return SourcePlan(source, since=since)

    def plan_live(self, spark: SparkSession, plan: SourcePlan) -> SourcePlan:
        return plan_kafka(spark, plan)

    def read(self, spark: SparkSession, plan: SourcePlan) -> DataFrame:
        records = read_kafka(spark, plan)
        if _settings(plan.source).value_format == "debezium":
            from runner.sources.debezium_values import decode_debezium

            return decode_debezium(records, plan.source)
        from runner.sources.kafka_values import decode_values

        return decode_values(records, plan.source)

    def first_read(self, source: Source) -> str:
        starting = _settings(source).starting_offsets
        if isinstance(starting, str):
            return f"from the {starting} offsets"
        return "from starting_offsets"

    def first_read_loses(self, source: Source) -> FirstReadLoss | None:
        if _settings(source).starting_offsets != "latest":
            return None
        return FirstReadLoss(
            "starting_offsets: latest would skip every record produced since the table's rows "
            "were read",
            "--ignore-checkpoint starts at the latest offsets all the same",
        )

    def datasets(self, source: Source) -> list[Dataset]:
        return kafka_datasets(_settings(source))

    def jars(self, source: Source, under_spark_submit: bool) -> list[str]:
        needed_by = where(source)
        jars = kafka().jars(needed_by, under_spark_submit)
        settings = _settings(source)
        if settings.value_format == "avro" or settings.schema_registry_url:
            jars += avro().jars(needed_by, under_spark_submit)
        return jars

    def input_schema(self, source: Source) -> InputSchema:
        return InputSchema(None, f"{where(source)} is kafka, whose columns Spark decodes")

    def read_failure(self, text: str) -> UserError | None:
        """Records that retention removed after the run planned its offsets (on_data_loss
        is decided then): nothing is written, the next run plans anew."""
        found = _RECORDS_GONE.search(text)
        if not found:
            return None
        return UserError(
            f"Kafka records at offsets {found[1]} of topic-partition {found[2]} were removed "
            "(retention) while this run read them; nothing was written and no offset moved. "
            "Run again: the next run starts from its checkpoint and on_data_loss applies"
        )

    def record_format(self, source: Source) -> str:
        return _settings(source).value_format


def _settings(source: Source) -> KafkaSpec:
    assert source.kafka is not None, "the loader requires kafka: for format kafka"
    return source.kafka


KIND = Kafka()
