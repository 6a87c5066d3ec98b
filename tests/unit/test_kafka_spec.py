"""A Kafka source's spec: what `runner validate` refuses (no JVM, no broker) and the model."""

from __future__ import annotations

import pytest

from runner.spec.loader import load_spec
from tests.unit.test_validate import _validate

KAFKA = """\
name: orders
sources:
  - name: orders
    format: kafka
    schema: "order_id bigint, amount double"
    incremental: {since: last}
    kafka:
      bootstrap_servers: "broker1:9092,broker2:9092"
      topics: [orders]
      starting_offsets: {orders: {"0": 15}}
      max_records_per_run: 5000
      options:
        security.protocol: SASL_SSL
        sasl.jaas.config: "${env:KAFKA_JAAS}"
target:
  path: warehouse/orders
  record_key: order_id
  precombine_field: _kafka_timestamp
  index: {buckets: 4}
"""


def test_a_kafka_spec_loads_with_its_settings(tmp_path):
    assert _validate(tmp_path, KAFKA) == (0, ["p.yaml: ok"])
    source = load_spec(tmp_path / "p.yaml").sources[0]
    assert source.path == ""
    assert source.kafka is not None
    assert source.kafka.topics == ("orders",)
    assert source.kafka.starting_offsets == {"orders": {0: 15}}
    assert source.kafka.max_records_per_run == 5000
    assert source.kafka.value_format == "json" and source.kafka.on_data_loss == "fail"
    assert source.kafka.options["sasl.jaas.config"] == "${env:KAFKA_JAAS}"  # resolved at read


def test_an_avro_schema_file_is_taken_relative_to_the_spec(tmp_path):
    text = KAFKA.replace('    schema: "order_id bigint, amount double"\n', "").replace(
        "      topics: [orders]",
        "      topics: [orders]\n      value_format: avro\n      avro_schema: schemas/orders.avsc",
    )
    (tmp_path / "p.yaml").write_text(text)
    kafka = load_spec(tmp_path / "p.yaml").sources[0].kafka
    assert kafka is not None and kafka.avro_schema == str(tmp_path / "schemas/orders.avsc")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "      topics: [orders]",
            "      topics: [orders]\n      topic_pattern: orders-.*",
            "sources[0].kafka: give exactly one of topics and topic_pattern",
        ),
        (
            '    schema: "order_id bigint, amount double"\n',
            "",
            "sources[0].schema: a kafka source with value_format json needs the schema",
        ),
        (
            "      topics: [orders]",
            "      topics: [orders]\n      value_format: avro",
            "sources[0].schema: value_format avro takes no schema",
        ),
        (
            '    schema: "order_id bigint, amount double"\n',
            '    schema: "order_id bigint"\n    path: /data/orders\n',
            "sources[0].path: a kafka source has no path",
        ),
        (
            "    incremental: {since: last}",
            "    incremental: new_files",
            "sources[0].incremental: a kafka source takes {since: last}",
        ),
        (
            "    incremental: {since: last}",
            "    incremental: {since: last, deletes: ignore}",
            "sources[0].incremental: a kafka source takes {since: last}",
        ),
        (
            '"${env:KAFKA_JAAS}"',
            '"org.apache.kafka.common.security.plain.PlainLoginModule required password=hunter2;"',
            "sources[0].kafka.options.sasl.jaas.config: a password must not be written",
        ),
        (
            "      topics: [orders]",
            "      topics: [orders]\n      schema_registry_url: http://registry:8081",
            "sources[0].kafka.schema_registry_url: applies to value_format avro, not json",
        ),
        (
            "      max_records_per_run: 5000",
            "      max_records_per_run: 0",
            "sources[0].kafka.max_records_per_run: must be at least 1, got 0",
        ),
    ],
)
def test_kafka_settings_that_do_not_fit_are_refused(tmp_path, old, new, expected):
    assert old in KAFKA
    code, lines = _validate(tmp_path, KAFKA.replace(old, new))
    assert code == 2
    assert any(expected in line for line in lines), lines


def test_avro_needs_exactly_one_of_a_schema_file_and_a_registry(tmp_path):
    avro = KAFKA.replace('    schema: "order_id bigint, amount double"\n', "").replace(
        "      topics: [orders]", "      topics: [orders]\n      value_format: avro"
    )
    code, lines = _validate(tmp_path, avro)
    assert code == 2
    assert any("takes exactly one of avro_schema" in line for line in lines), lines
    registry = avro.replace(
        "value_format: avro", "value_format: avro\n      schema_registry_url: http://r:8081"
    )
    assert _validate(tmp_path, registry) == (0, ["p.yaml: ok"])


def test_a_raw_source_has_no_records_that_fail_to_parse(tmp_path):
    raw = KAFKA.replace('    schema: "order_id bigint, amount double"\n', "").replace(
        "      topics: [orders]", "      topics: [orders]\n      value_format: raw"
    )
    assert _validate(tmp_path, raw)[0] == 0
    code, lines = _validate(
        tmp_path, raw.replace("    kafka:", "    on_bad_record: drop\n    kafka:")
    )
    assert code == 2
    assert any("raw values are not parsed" in line for line in lines), lines
