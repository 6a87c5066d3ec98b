"""Debezium change events of a real PostgreSQL, through a real Debezium connector and Kafka
broker (tests/debezium.py), into tables: the table after each run is the database's own
`SELECT` of the captured table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.helpers import read_table

pytestmark = pytest.mark.slow


def _spec(tmp_path: Path, bootstrap: str, topic: str, **target: Any) -> Any:
    spec = {
        "name": "customers",
        "sources": [
            {
                "name": "customers",
                "format": "kafka",
                "incremental": {"since": "last"},
                "kafka": {
                    "bootstrap_servers": bootstrap,
                    "topics": [topic],
                    "value_format": "debezium",
                },
            }
        ],
        "target": {"path": "table", "index": {"buckets": 2}, **target},
    }
    path = tmp_path / "customers.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return load_spec(path)


def _rows(table: Path, columns: list[str]) -> list[tuple[Any, ...]]:
    frame = read_table(table)
    return sorted(tuple(r) for r in frame[columns].itertuples(index=False))


def test_inserts_updates_deletes_and_a_key_change_end_as_the_database(spark, tmp_path, debezium):
    debezium.execute(
        "CREATE TABLE customers (id int PRIMARY KEY, name text, balance numeric(10, 2));"
        "INSERT INTO customers VALUES (1, 'ann', 10.50), (2, 'bob', -3.25);"
    )
    with debezium.connector(["customers"]) as connector:
        spec = _spec(tmp_path, debezium.kafka.bootstrap, connector.topic("customers"))
        assert spec.target.key_from_message
        summary = run_pipeline(spec, spark)
        assert summary.inserted == 2
        debezium.execute(
            "INSERT INTO customers VALUES (3, 'cy', 1);"
            "UPDATE customers SET balance = 11 WHERE id = 1;"
            "DELETE FROM customers WHERE id = 2;"
            "UPDATE customers SET id = 30 WHERE id = 3;"
        )
        connector.sync()
        run_pipeline(spec, spark)
    wanted = debezium.query("SELECT id, name, balance FROM customers ORDER BY id")
    got = _rows(tmp_path / "table", ["id", "name", "balance"])
    assert [(str(i), n, str(b)) for i, n, b in got] == [tuple(r) for r in wanted]
