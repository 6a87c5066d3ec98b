"""A Kafka source as real `runner` processes: exactly once across a SIGKILL at each fault
point (and Debezium events across one before the commit), `--continuous` rounds while records
arrive, and a broker that cannot be reached."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable

from tests.e2e.test_continuous import _wait_for, start_continuous
from tests.e2e.test_kill import _runner
from tests.kill import kill_at


def _setup(tmp_path: Path, bootstrap: str, topic: str, **options: str) -> str:
    """An insert target: a record committed twice would be two rows."""
    spec = {
        "name": "events",
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4"}},
        "sources": [
            {
                "name": "events",
                "format": "kafka",
                "schema": "id bigint, payload string",
                "incremental": {"since": "last"},
                "kafka": {"bootstrap_servers": bootstrap, "topics": [topic], "options": options},
            }
        ],
        "target": {
            "path": "table",
            "operation": "insert",
            "record_key": "id",
            "index": {"buckets": 2},
        },
    }
    (tmp_path / "events.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return "events.yaml"


def _produce(kafka_broker, topic: str, ids: range) -> None:
    values = [json.dumps({"id": i, "payload": f"p{i}"}) for i in ids]
    kafka_broker.produce(topic, values, partitions=[i % 3 for i in ids])


def _ids(tmp_path: Path) -> list[int]:
    frame = DeltaTable(str(tmp_path / "table")).to_pyarrow_table(columns=["id"]).to_pandas()
    return sorted(int(i) for i in frame["id"])


def _checkpoint(tmp_path: Path) -> dict:
    return DeltaTable(str(tmp_path / "table")).history(1)[0]["runner"]["checkpoint"]["events"]


def _ends(kafka_broker, topic: str) -> dict:
    return {topic: {str(p): o for p, o in kafka_broker.end_offsets(topic).items()}}


@pytest.mark.e2e
@pytest.mark.slow
def test_sigkill_at_every_point_then_a_rerun_commits_each_record_once(tmp_path, kafka_broker):
    topic = kafka_broker.unique_topic("kill")
    kafka_broker.create_topic(topic, partitions=3)
    spec = _setup(tmp_path, kafka_broker.bootstrap, topic)
    produced = 0
    for point in ("keyed", "after_bucket_file", "before_commit"):
        _produce(kafka_broker, topic, range(produced, produced + 10))
        produced += 10
        kill_at(tmp_path, point, spec)
        assert not (tmp_path / "table" / "_delta_log").exists() or not _ids(tmp_path), point

    kill_at(tmp_path, "after_commit", spec)  # the commit is whole: data and offsets
    assert _ids(tmp_path) == list(range(produced))
    assert _checkpoint(tmp_path) == _ends(kafka_broker, topic)

    _produce(kafka_broker, topic, range(produced, produced + 5))
    rerun = _runner(tmp_path, spec)
    assert rerun.returncode == 0, rerun.stderr
    assert _ids(tmp_path) == list(range(produced + 5))  # each record once
    assert _checkpoint(tmp_path) == _ends(kafka_broker, topic)


@pytest.mark.e2e
@pytest.mark.slow
def test_continuous_rounds_read_records_as_they_arrive(tmp_path, kafka_broker):
    topic = kafka_broker.unique_topic("continuous")
    kafka_broker.create_topic(topic, partitions=3)
    spec = _setup(tmp_path, kafka_broker.bootstrap, topic)
    _produce(kafka_broker, topic, range(0, 10))
    proc, lines = start_continuous(tmp_path, spec)
    seen: list[str] = []
    try:
        _wait_for(lines, "commit_done", seen)
        _wait_for(lines, "nothing_new", seen)  # an idle round: no commit
        for start in (10, 20):
            _produce(kafka_broker, topic, range(start, start + 10))
            _wait_for(lines, "commit_done", seen)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, "".join(seen[-20:])
    assert "3 commit(s)" in out
    assert _ids(tmp_path) == list(range(30))
    assert _checkpoint(tmp_path) == _ends(kafka_broker, topic)


@pytest.mark.e2e
def test_a_broker_that_cannot_be_reached_is_one_line_and_no_secret_shows(tmp_path, monkeypatch):
    secret = "s3cr3t-Kafka-password"
    login = "org.apache.kafka.common.security.plain.PlainLoginModule required"
    jaas = f'{login} username="u" password="{secret}";'
    monkeypatch.setenv("KAFKA_JAAS", jaas)
    options = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}
    spec = _setup(
        tmp_path, "127.0.0.1:9", "events", **options, **{"sasl.jaas.config": "${env:KAFKA_JAAS}"}
    )
    result = _runner(tmp_path, "--log-format", "json", "run", spec)
    assert secret not in result.stdout + result.stderr
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "Kafka" in line]
    assert errors and "no answer from the Kafka brokers at 127.0.0.1:9 within 10 s" in errors[-1]
    assert "at org.apache" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.e2e
@pytest.mark.slow
def test_debezium_events_killed_before_the_commit_then_a_rerun_end_as_the_database(
    tmp_path, debezium
):
    """A runner killed after writing a Debezium batch, before its commit, and run again: the
    table is the database's, its checkpoint the topic's end."""
    debezium.execute(
        "CREATE TABLE killed (id int PRIMARY KEY, name text);"
        "INSERT INTO killed VALUES (1, 'ann'), (2, 'bob'), (3, 'cy');"
    )
    with debezium.connector(["killed"]) as connector:
        topic = connector.topic("killed")
        spec = _setup(tmp_path, debezium.kafka.bootstrap, topic)
        data = yaml.safe_load((tmp_path / spec).read_text())
        del data["sources"][0]["schema"], data["target"]["operation"], data["target"]["record_key"]
        data["sources"][0]["kafka"]["value_format"] = "debezium"
        (tmp_path / spec).write_text(yaml.safe_dump(data, sort_keys=False))
        debezium.execute(
            "UPDATE killed SET name = 'anna' WHERE id = 1; DELETE FROM killed WHERE id = 2;"
            "INSERT INTO killed VALUES (4, 'dee');"
        )
        connector.sync()
        kill_at(tmp_path, "before_commit", spec)
        assert not (tmp_path / "table" / "_delta_log").exists() or not _ids(tmp_path)

        rerun = _runner(tmp_path, spec)
        assert rerun.returncode == 0, rerun.stderr
        assert _ids(tmp_path) == [
            int(i) for (i,) in debezium.query("SELECT id FROM killed ORDER BY id")
        ]
        names = DeltaTable(str(tmp_path / "table")).to_pyarrow_table(columns=["id", "name"])
        assert sorted(zip(*names.to_pydict().values(), strict=True)) == [
            (int(i), n) for i, n in debezium.query("SELECT id, name FROM killed ORDER BY id")
        ]
        assert _checkpoint(tmp_path) == _ends(debezium.kafka, topic)
