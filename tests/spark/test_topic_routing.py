"""Topic-to-table routing against the real broker: one spec whose target path names
{schema} and {table} writes a table per topic, and a topic created between runs gets its
table on the next run; each table keeps its own checkpoint."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from deltalake import DeltaTable

from tests.cli_in_process import run_cli
from tests.helpers import read_table


def _rows(table: Path) -> list[tuple[int, str]]:
    frame = read_table(table)
    return sorted(zip(frame["id"], frame["name"], strict=True))


def test_one_spec_writes_a_table_per_topic_and_picks_up_a_new_topic(
    spark, tmp_path, kafka_broker, monkeypatch
):
    for module in ("runner.commands.spec_set_run", "runner.pipeline.inputs"):
        monkeypatch.setattr(f"{module}.spark_session", lambda *args, **kwargs: spark)
    prefix = kafka_broker.unique_topic("shop").replace("-", "_")
    topics = [f"{prefix}.public.customers", f"{prefix}.public.orders"]
    for topic in topics:
        kafka_broker.create_topic(topic)
    kafka_broker.produce(topics[0], [json.dumps({"id": 1, "name": "ann", "ts": 1})])
    kafka_broker.produce(topics[1], [json.dumps({"id": 7, "name": "order-7", "ts": 1})])
    spec = {
        "name": "shop",
        "sources": [
            {
                "name": "events",
                "format": "kafka",
                "schema": "id bigint, name string, ts bigint",
                "incremental": {"since": "last"},
                "kafka": {
                    "bootstrap_servers": kafka_broker.bootstrap,
                    "topic_pattern": f"{prefix}\\.public\\..*",
                },
            }
        ],
        "target": {
            "path": "warehouse/{schema}/{table}",
            "record_key": "id",
            "precombine_field": "ts",
            "index": {"buckets": 2},
        },
    }
    path = tmp_path / "shop.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert run_cli("validate", str(path)).returncode == 0
    first = run_cli("run", str(path))
    assert first.returncode == 0, first.stderr
    assert re.search(rf"shop\.{topics[0]}\s+committed version", first.stdout)
    warehouse = tmp_path / "warehouse" / "public"
    assert _rows(warehouse / "customers") == [(1, "ann")]
    assert _rows(warehouse / "orders") == [(7, "order-7")]
    # a spec reading one topic's table runs after the routing spec, though its name sorts first
    (tmp_path / "a_contacts.yaml").write_text(yaml.safe_dump(_reads_customers(), sort_keys=False))
    validated = run_cli("validate", str(tmp_path))
    assert validated.stdout.splitlines()[-1] == "run order: shop, contacts"

    kafka_broker.create_topic(f"{prefix}.public.items")
    kafka_broker.produce(f"{prefix}.public.items", [json.dumps({"id": 3, "name": "pen", "ts": 1})])
    kafka_broker.produce(topics[0], [json.dumps({"id": 1, "name": "anne", "ts": 2})])
    second = run_cli("run", str(tmp_path), "--parallel", "2")
    assert second.returncode == 0, second.stderr
    assert "4 spec(s): 3 committed, 1 nothing new" in second.stdout
    assert re.search(rf"shop\.{topics[1]}\s+nothing new", second.stdout)
    assert _rows(warehouse / "customers") == [(1, "anne")]  # from its own checkpoint on
    assert _rows(warehouse / "items") == [(3, "pen")]
    assert _rows(tmp_path / "warehouse" / "contacts") == [(1, "anne")]  # after the customers


def _reads_customers() -> dict:
    """A spec reading the table the routing spec writes for the customers' topic."""
    return {
        "name": "contacts",
        "sources": [
            {
                "name": "customers",
                "format": "delta",
                "path": "warehouse/public/customers",
                "incremental": {"since": "last", "deletes": "ignore"},
            }
        ],
        "transform": {"sql": "SELECT id, name, ts FROM customers"},
        "target": {
            "path": "warehouse/contacts",
            "record_key": "id",
            "precombine_field": "ts",
            "index": {"buckets": 2},
        },
    }


def test_a_routed_path_names_only_the_routing_fields_and_one_kafka_source(tmp_path):
    spec = {
        "name": "bad",
        "sources": [{"name": "f", "format": "json", "path": "in", "schema": "id bigint"}],
        "target": {"path": "warehouse/{table}", "record_key": "id", "index": {"buckets": 2}},
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = run_cli("validate", str(path))
    assert done.returncode == 2
    assert "target.path: names {table}, which routes each topic of a kafka source" in done.stdout
    spec["target"]["path"] = "warehouse/{tabel}"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert "{tabel} is not a routing field" in run_cli("validate", str(path)).stdout


def test_debezium_topics_each_get_a_table_keyed_by_their_own_message_key(
    spark, tmp_path, debezium, monkeypatch
):
    for module in ("runner.commands.spec_set_run", "runner.pipeline.inputs"):
        monkeypatch.setattr(f"{module}.spark_session", lambda *args, **kwargs: spark)
    debezium.execute(
        "CREATE TABLE people (id int PRIMARY KEY, name text);"
        "CREATE TABLE lines (order_id int, line int, sku text, PRIMARY KEY (order_id, line));"
        "INSERT INTO people VALUES (1, 'ann'); INSERT INTO lines VALUES (1, 1, 'a'), (1, 2, 'b');"
    )
    with debezium.connector(["people", "lines"]) as connector:
        prefix = connector.topic("people").rsplit(".", 2)[0]
        spec = {
            "name": "db",
            "sources": [
                {
                    "name": "db",
                    "format": "kafka",
                    "incremental": {"since": "last"},
                    "kafka": {
                        "bootstrap_servers": debezium.kafka.bootstrap,
                        "topic_pattern": f"{prefix}\\.public\\.(people|lines)",
                        "value_format": "debezium",
                    },
                }
            ],
            "target": {"path": "warehouse/{table}", "index": {"buckets": 2}},
        }
        path = tmp_path / "db.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        done = run_cli("run", str(path))
        assert done.returncode == 0, done.stderr
        debezium.execute("DELETE FROM lines WHERE order_id = 1 AND line = 2;")
        connector.sync()
        assert run_cli("run", str(path)).returncode == 0
    lines = read_table(tmp_path / "warehouse" / "lines")
    assert sorted(zip(lines["order_id"], lines["line"], lines["sku"], strict=True)) == [(1, 1, "a")]
    assert list(read_table(tmp_path / "warehouse" / "people")["name"]) == ["ann"]
    stored = DeltaTable(str(tmp_path / "warehouse" / "lines")).metadata().configuration
    assert stored["runner.keygen.record.key"] == "order_id,line"  # its own message key
