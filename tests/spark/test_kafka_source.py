"""Kafka sources against a real broker (tests/kafka.py): JSON and Avro values, upserts
ordered by a field or by Kafka's timestamp, deletes, change feeds, offsets kept in the
commit, rate limits, new partitions, retention, and records that do not decode."""

from __future__ import annotations

import base64
import io
import json
import time
from pathlib import Path
from typing import Any

import fastavro
import pytest
import yaml
from click.testing import CliRunner
from deltalake import DeltaTable

from runner.cli import cli
from runner.errors import BadRecordsError, UserError
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.helpers import read_table

ORDER_SCHEMA = "order_id bigint, amount double, city string, ts bigint"
AVRO_ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "city", "type": "string"},
        {"name": "ts", "type": "long"},
    ],
}


def _spec(tmp_path: Path, kafka: dict[str, Any], **extra: Any) -> Any:
    source = {
        "name": "orders",
        "format": "kafka",
        "incremental": {"since": "last"},
        "kafka": kafka,
        **extra.pop("source", {}),
    }
    if kafka.get("value_format", "json") == "json":
        source.setdefault("schema", ORDER_SCHEMA)
    target = {
        "path": "table",
        "record_key": "order_id",
        "precombine_field": "ts",
        "index": {"buckets": 2},
        **extra.pop("target", {}),
    }
    spec = {
        "name": "orders",
        "sources": [source],
        "target": {k: v for k, v in target.items() if v is not None},  # None: left out
        **extra,
    }
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return load_spec(path)


def _orders(rows: list[tuple[int, float, str, int]]) -> list[str]:
    return [json.dumps({"order_id": i, "amount": a, "city": c, "ts": t}) for i, a, c, t in rows]


def _content(table: Path) -> dict[int, tuple[float, int]]:
    frame = read_table(table)
    return {int(r.order_id): (r.amount, int(r.ts)) for r in frame.itertuples()}


def _checkpoint(table: Path) -> dict[str, Any]:
    return DeltaTable(str(table)).history(1)[0]["runner"]["checkpoint"]["orders"]


@pytest.fixture
def topic(kafka_broker):
    name = kafka_broker.unique_topic("orders")
    kafka_broker.create_topic(name, partitions=3)
    return name


def _kafka(kafka_broker, topic: str, **settings: Any) -> dict[str, Any]:
    return {"bootstrap_servers": kafka_broker.bootstrap, "topics": [topic], **settings}


def test_json_upserts_keep_the_latest_by_field_and_the_offsets_go_in_the_commit(
    spark, tmp_path, kafka_broker, topic
):
    # key 1 arrives newest-first on another partition: the field, not the offset, orders
    kafka_broker.produce(
        topic, _orders([(1, 10.0, "ams", 5), (2, 20.0, "sf", 1)]), partitions=[0, 1]
    )
    kafka_broker.produce(
        topic, _orders([(1, 11.0, "ams", 3), (3, 30.0, "ams", 1)]), partitions=[2, 2]
    )
    spec = _spec(tmp_path, _kafka(kafka_broker, topic))

    first = run_pipeline(spec, spark=spark)

    assert first.rows_read == 4 and first.inserted == 3
    assert _content(tmp_path / "table") == {1: (10.0, 5), 2: (20.0, 1), 3: (30.0, 1)}
    ends = kafka_broker.end_offsets(topic)
    assert _checkpoint(tmp_path / "table") == {topic: {str(p): o for p, o in ends.items()}}
    assert first.sources["orders"]["records"] == 4

    idle = run_pipeline(spec, spark=spark)
    assert idle.nothing_new and idle.version is None

    kafka_broker.produce(
        topic, _orders([(2, 21.0, "sf", 2), (4, 40.0, "sf", 1)]), partitions=[1, 0]
    )
    second = run_pipeline(spec, spark=spark)
    assert second.rows_read == 2  # only the records after the checkpoint
    assert (second.inserted, second.updated) == (1, 1)
    assert _content(tmp_path / "table")[2] == (21.0, 2)


def _run(spec: Any, *flags: str) -> str:
    """`runner run SPEC` as a user types it; its output (the summary)."""
    done = CliRunner().invoke(cli, ["run", spec.file, *flags])
    assert done.exit_code == 0, done.output + repr(done.exception)
    return done.output


def test_a_first_run_at_latest_with_nothing_after_it_fixes_where_the_next_run_starts(
    spark, tmp_path, kafka_broker, topic
):
    kafka_broker.produce(topic, _orders([(1, 1.0, "ams", 1), (2, 2.0, "sf", 1)]), partitions=[0, 1])
    spec = _spec(tmp_path, _kafka(kafka_broker, topic, starting_offsets="latest"))
    table = tmp_path / "table"

    first = _run(spec)
    assert (
        "nothing new in orders; no records after the latest offsets; starting points recorded "
        "in version 1: the next run reads what arrives after them" in first
    )
    ends = kafka_broker.end_offsets(topic)
    assert _checkpoint(table) == {topic: {str(p): o for p, o in ends.items()}}
    assert read_table(table).empty  # version 0: the table as a first run creates it

    # produced before the second run: read by it, and nothing before the first run is
    kafka_broker.produce(topic, _orders([(3, 3.0, "ams", 1), (4, 4.0, "sf", 1)]), partitions=[2, 0])
    second = _run(spec)
    assert "inserted     2" in second
    assert set(_content(table)) == {3, 4}
    assert "nothing to do" in _run(spec)  # a start already recorded is kept, not recorded again
    assert DeltaTable(str(table)).version() == 2


def _renamed(spec: Any, name: str, **kafka: Any) -> Any:
    """The spec under another pipeline name (its target the same table)."""
    text = yaml.safe_load(Path(spec.file).read_text())
    text["name"] = name
    text["sources"][0]["kafka"].update(kafka)
    path = Path(spec.file).with_name(f"{name}.yaml")
    path.write_text(yaml.safe_dump(text, sort_keys=False))
    return load_spec(path)


def test_a_renamed_pipeline_at_latest_is_refused_with_its_old_offsets_and_earliest_says_so(
    spark, tmp_path, kafka_broker, topic
):
    spec = _spec(tmp_path, _kafka(kafka_broker, topic, starting_offsets="latest"))
    _run(spec)
    kafka_broker.produce(topic, _orders([(1, 1.0, "ams", 1)]), partitions=[0])
    _run(spec)
    offsets = _checkpoint(tmp_path / "table")
    kafka_broker.produce(topic, _orders([(2, 2.0, "sf", 1)]), partitions=[1])  # meanwhile

    renamed = _renamed(spec, "orders_v2")
    refused = CliRunner().invoke(cli, ["run", renamed.file])
    assert isinstance(refused.exception, UserError), refused.output
    message = str(refused.exception)
    shown = json.dumps(offsets, separators=(",", ":"))
    assert message.startswith("source 'orders': pipeline 'orders_v2' has no checkpoint in ")
    assert "starting_offsets: latest would skip every record produced since" in message
    assert f"pipeline 'orders' recorded orders at {shown} (table version 2)" in message
    assert f"run with --checkpoint 'orders={shown}' (or under the name 'orders')" in message
    assert "--ignore-checkpoint starts at the latest offsets" in message
    assert set(_content(tmp_path / "table")) == {1}

    told = _run(renamed, "--checkpoint", f"orders={shown}")  # the fix, as given
    assert "inserted     1" in told
    assert set(_content(tmp_path / "table")) == {1, 2}

    # from earliest, a pipeline new to the table reads again what it holds, and says so
    again = _run(_renamed(spec, "orders_v3", starting_offsets="earliest"))
    assert (
        "checkpoints  none of this pipeline in this table, which holds rows already "
        "(checkpoints of pipeline 'orders_v2' in version 3, pipeline 'orders' in version 2): "
        "orders from the earliest offsets"
    ) in again
    assert "inserted     0   updated 0   unchanged 2" in again


def test_kafka_timestamp_as_the_precombine_field_and_kafka_columns_in_the_view(
    spark, tmp_path, kafka_broker, topic
):
    value = json.dumps({"order_id": 7, "amount": 1.0, "city": "ams", "ts": 0})
    later = json.dumps({"order_id": 7, "amount": 2.0, "city": "ams", "ts": 0})
    # the later timestamp is produced first, on partition 0; the earlier after, on 1 (both
    # recent: the broker's retention removes records by their timestamp)
    now = int(time.time() * 1000)
    kafka_broker.produce(topic, [later], partitions=[0], timestamps=[now - 1000], keys=[b"k7"])
    kafka_broker.produce(topic, [value], partitions=[1], timestamps=[now - 2000], keys=[b"k7"])
    spec = _spec(
        tmp_path,
        _kafka(kafka_broker, topic),
        target={"precombine_field": "_kafka_timestamp"},
    )
    run_pipeline(spec, spark=spark)
    row = read_table(tmp_path / "table").iloc[0]
    assert row.amount == 2.0
    assert (row._kafka_topic, row._kafka_partition, row._kafka_offset) == (topic, 0, 0)
    assert row._kafka_key == b"k7"


def test_a_delete_marker_in_the_values_deletes_the_key(spark, tmp_path, kafka_broker, topic):
    schema = ORDER_SCHEMA + ", deleted boolean"
    kafka_broker.produce(topic, _orders([(1, 1.0, "ams", 1), (2, 2.0, "sf", 1)]))
    spec = _spec(
        tmp_path,
        _kafka(kafka_broker, topic),
        source={"schema": schema},
        target={"delete_marker": "deleted"},
    )
    run_pipeline(spec, spark=spark)
    tombstone = {"order_id": 1, "amount": 1.0, "city": "ams", "ts": 2, "deleted": True}
    kafka_broker.produce(topic, [json.dumps(tombstone)])
    second = run_pipeline(spec, spark=spark)
    assert second.deleted == 1
    assert set(_content(tmp_path / "table")) == {2}


def test_a_change_feed_read_from_a_topic(spark, tmp_path, kafka_broker, topic):
    events = [
        {"order_id": 1, "amount": 1.0, "city": "ams", "lsn": 1, "op": "c"},
        {"order_id": 2, "amount": 2.0, "city": "sf", "lsn": 2, "op": "c"},
        {"order_id": 1, "amount": 1.5, "city": "ams", "lsn": 3, "op": "u"},
        {"order_id": 2, "amount": 2.0, "city": "sf", "lsn": 4, "op": "d"},
    ]
    # one key's events on one partition, as a keyed producer sends them
    kafka_broker.produce(
        topic, [json.dumps(e) for e in events], partitions=[e["order_id"] for e in events]
    )
    spec = _spec(
        tmp_path,
        _kafka(kafka_broker, topic),
        source={"schema": "order_id bigint, amount double, city string, lsn bigint, op string"},
        target={
            "precombine_field": None,
            "cdc": {"sequence_by": "lsn", "operation_column": "op"},
        },
    )
    run_pipeline(spec, spark=spark)
    frame = read_table(tmp_path / "table")
    assert [(int(r.order_id), r.amount) for r in frame.itertuples()] == [(1, 1.5)]


def test_a_malformed_json_record_is_quarantined_with_its_topic_partition_and_offset(
    spark, tmp_path, kafka_broker, topic
):
    good = _orders([(1, 1.0, "ams", 1), (2, 2.0, "sf", 1), (3, 3.0, "ams", 1)])
    kafka_broker.produce(topic, [*good, '{"order_id": "four", ', None], partitions=[0, 0, 0, 1, 2])
    spec = _spec(
        tmp_path,
        _kafka(kafka_broker, topic),
        source={"on_bad_record": "quarantine"},
        target={"quarantine": {"path": "quarantine", "max_fraction": 0.5}},
    )
    summary = run_pipeline(spec, spark=spark)
    assert summary.rows_quarantined == 2
    assert set(_content(tmp_path / "table")) == {1, 2, 3}
    quarantined = read_table(tmp_path / "quarantine").sort_values("_reason")
    reasons = list(quarantined["_reason"])
    assert f"(topic {topic}, partition 1, offset 0)" in reasons[0]
    assert f"(topic {topic}, partition 2, offset 0)" in reasons[1]
    assert '{"order_id": "four", ' in list(quarantined["_record"])
    # and the offsets moved past them: they are not read again
    assert run_pipeline(spec, spark=spark).nothing_new


def test_a_malformed_record_fails_the_run_by_default_and_moves_no_offset(
    spark, tmp_path, kafka_broker, topic
):
    kafka_broker.produce(topic, [*_orders([(1, 1.0, "ams", 1)]), "not json"], partitions=[0, 0])
    spec = _spec(tmp_path, _kafka(kafka_broker, topic))
    with pytest.raises(BadRecordsError) as error:
        run_pipeline(spec, spark=spark)
    assert f"topic {topic}, partition 0, offset 1" in str(error.value)
    assert not (tmp_path / "table").exists()


def _avro_bytes(record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO_ORDER), record)
    return out.getvalue()


def test_avro_values_with_a_schema_file(spark, tmp_path, kafka_broker, topic):
    (tmp_path / "order.avsc").write_text(json.dumps(AVRO_ORDER))
    records = [{"order_id": i, "amount": i * 1.5, "city": "ams", "ts": 1} for i in range(5)]
    values = [_avro_bytes(r) for r in records] + [b"\x01garbage"]
    kafka_broker.produce(topic, values, partitions=[0] * 6)
    spec = _spec(
        tmp_path,
        _kafka(kafka_broker, topic, value_format="avro", avro_schema="order.avsc"),
        source={"on_bad_record": "quarantine"},
        target={"quarantine": {"path": "quarantine", "max_fraction": 0.5}},
    )
    summary = run_pipeline(spec, spark=spark)
    assert summary.rows_quarantined == 1
    assert _content(tmp_path / "table") == {i: (i * 1.5, 1) for i in range(5)}
    bad = read_table(tmp_path / "quarantine").iloc[0]
    assert bad._reason.endswith(f"(topic {topic}, partition 0, offset 5)")
    assert base64.b64decode(bad._record) == b"\x01garbage"  # the value as read


def test_avro_in_confluent_wire_format_reads_old_values_into_the_new_schema(
    spark, tmp_path, kafka_broker, topic, schema_registry
):
    from confluent_kafka.serialization import MessageField, SerializationContext

    v2 = {
        **AVRO_ORDER,
        "fields": [*AVRO_ORDER["fields"], {"name": "note", "type": "string", "default": "-"}],
    }
    context = SerializationContext(topic, MessageField.VALUE)
    old = schema_registry.serializer(json.dumps(AVRO_ORDER))
    new = schema_registry.serializer(json.dumps(v2))
    values = [old({"order_id": 1, "amount": 1.0, "city": "ams", "ts": 1}, context)]
    values.append(new({"order_id": 2, "amount": 2.0, "city": "sf", "ts": 1, "note": "x"}, context))
    kafka_broker.produce(topic, values)
    spec = _spec(
        tmp_path,
        _kafka(kafka_broker, topic, value_format="avro", schema_registry_url=schema_registry.url),
    )
    run_pipeline(spec, spark=spark)
    frame = read_table(tmp_path / "table").sort_values("order_id")
    assert list(frame["note"]) == ["-", "x"]  # the old value read with the new field's default
    fetched = [r for r in schema_registry.requests if r.startswith("GET /schemas/ids/")]
    assert len(fetched) == 2 and all(schema_registry.requests[r] == 1 for r in fetched)


def test_max_records_per_run_splits_a_backlog_over_runs_each_record_once(
    spark, tmp_path, kafka_broker, topic
):
    kafka_broker.produce(topic, _orders([(i, float(i), "ams", 1) for i in range(25)]))
    spec = _spec(tmp_path, _kafka(kafka_broker, topic, max_records_per_run=10))
    read = []
    while not (summary := run_pipeline(spec, spark=spark)).nothing_new:
        read.append(summary.rows_read)
    assert read == [10, 10, 5]
    assert len(read_table(tmp_path / "table")) == 25


def test_a_partition_added_between_runs_is_read_from_its_earliest_offset(
    spark, tmp_path, kafka_broker, topic
):
    kafka_broker.produce(topic, _orders([(1, 1.0, "ams", 1)]), partitions=[0])
    spec = _spec(tmp_path, _kafka(kafka_broker, topic))
    run_pipeline(spec, spark=spark)
    kafka_broker.add_partitions(topic, 4)
    kafka_broker.produce(topic, _orders([(2, 2.0, "sf", 1), (3, 3.0, "sf", 1)]), partitions=[3, 3])
    second = run_pipeline(spec, spark=spark)
    assert second.rows_read == 2
    assert set(_content(tmp_path / "table")) == {1, 2, 3}
    assert _checkpoint(tmp_path / "table")[topic]["3"] == 2


def test_records_removed_by_retention_fail_or_are_skipped(spark, tmp_path, kafka_broker, topic):
    kafka_broker.produce(topic, _orders([(1, 1.0, "ams", 1)]), partitions=[0])
    spec = _spec(tmp_path, _kafka(kafka_broker, topic))
    run_pipeline(spec, spark=spark)
    kafka_broker.produce(
        topic, _orders([(i, 1.0, "ams", 1) for i in range(2, 7)]), partitions=[0] * 5
    )
    kafka_broker.delete_records(topic, {0: 4})  # offsets 1-3 go before the next run reads them

    with pytest.raises(UserError) as error:
        run_pipeline(spec, spark=spark)
    message = str(error.value)
    assert f"topic '{topic}' partition 0" in message
    assert "stopped at offset 1" in message and "earliest offset left is 4" in message

    skipping = _spec(tmp_path, _kafka(kafka_broker, topic, on_data_loss="skip"))
    summary = run_pipeline(skipping, spark=spark)
    assert summary.rows_read == 2 and summary.sources["orders"]["records_lost"] == 3
    assert set(_content(tmp_path / "table")) == {1, 5, 6}


def test_a_topic_pattern_reads_every_matching_topic(spark, tmp_path, kafka_broker):
    prefix = kafka_broker.unique_topic("region")
    for region in ("eu", "us"):
        kafka_broker.create_topic(f"{prefix}-{region}", partitions=1)
    kafka_broker.produce(f"{prefix}-eu", _orders([(1, 1.0, "ams", 1)]))
    kafka_broker.produce(f"{prefix}-us", _orders([(2, 2.0, "sf", 1)]))
    kafka = {"bootstrap_servers": kafka_broker.bootstrap, "topic_pattern": f"{prefix}-.*"}
    summary = run_pipeline(_spec(tmp_path, kafka), spark=spark)
    assert summary.sources["orders"]["topics"] == [f"{prefix}-eu", f"{prefix}-us"]
    assert set(_content(tmp_path / "table")) == {1, 2}


def test_raw_values_are_decoded_by_the_transform(spark, tmp_path, kafka_broker, topic):
    kafka_broker.produce(topic, ["1|ams|9.5", "2|sf|3.0"], partitions=[0, 0])
    spec = _spec(
        tmp_path,
        _kafka(kafka_broker, topic, value_format="raw"),
        transform={
            "sql": "SELECT CAST(split(CAST(value AS STRING), '[|]')[0] AS BIGINT) AS order_id, "
            "CAST(split(CAST(value AS STRING), '[|]')[2] AS DOUBLE) AS amount, "
            "_kafka_offset AS ts FROM orders"
        },
    )
    run_pipeline(spec, spark=spark)
    assert _content(tmp_path / "table") == {1: (9.5, 0), 2: (3.0, 1)}


def test_a_missing_topic_and_an_unreachable_broker_are_one_line_errors(
    spark, tmp_path, kafka_broker
):
    missing = _spec(tmp_path, _kafka(kafka_broker, "no-such-topic"))
    with pytest.raises(UserError, match=r"no topic 'no-such-topic' at 127\.0\.0\.1"):
        run_pipeline(missing, spark=spark)
    nobody = {
        "bootstrap_servers": "127.0.0.1:9",
        "topics": ["t"],
        "options": {"default.api.timeout.ms": 3000},
    }
    with pytest.raises(UserError) as error:
        run_pipeline(_spec(tmp_path, nobody), spark=spark)
    message = str(error.value)
    assert "no answer from the Kafka brokers at 127.0.0.1:9 within 3 s" in message
    assert "\n" not in message and "at org.apache" not in message
