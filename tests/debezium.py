"""A real Debezium pipeline on 127.0.0.1 for tests: PostgreSQL -> Debezium's PostgreSQL
connector in Kafka Connect standalone -> the KRaft broker.

`debezium` (session fixture) yields a `Debezium` rig made of:

- the session's PostgreSQL server (tests/postgres.py; its `wal_level` is `logical` for this),
  in a database of its own, `debezium_test`, owned by `runner` as `runner_test` is; Debezium
  connects as the role `debezium` (superuser and replication, password auth over TCP);
- the session's Kafka broker (tests/kafka.py: Kafka 3.9.1, one KRaft node);
- one Kafka Connect 4.3.0 standalone worker (tests/kafka_connect.py) with
  io.debezium:debezium-connector-postgres:3.6.1.Final on its class path. Connect 4.3.0 is
  the Kafka that Debezium 3.6.1 is built against; its 4.x clients speak to the 3.9.1 broker
  (Kafka 4 clients talk to brokers from 2.1 on); Java 17 runs both.

A test makes its tables with `rig.execute(sql)` (as `runner`, in `debezium_test`), then
`with rig.connector(["t"]) as c:` registers a connector for them: the pgoutput plugin, a
replication slot and a publication of its own (named after the connector, dropped on leaving),
a snapshot of the tables' rows (`op` "r"), then their changes; key and value through Kafka
Connect's JsonConverter with schemas (`schemas=False`: without), topics
`<connector>.public.<table>` created by Connect (one partition). `c.events("t")` reads the
topic back with confluent-kafka as `ChangeEvent`s (tombstones: value None).

`c.sync()` waits until every change committed so far is in Kafka, without a sleep: it inserts
a row into the marker table `debezium_sync` (every connector captures it too), reads that
row's event from the connector's marker topic for its `source.lsn` (a marker the snapshot
read does not count: the next one is streamed), then waits until the connector's committed
source offset (Connect's REST API; the worker flushes offsets every 100 ms, and commits only
the offsets of records the broker acknowledged) has reached that LSN. Since PostgreSQL
decodes transactions in commit order, every earlier change is then in its topic.
`c.offsets()` is that committed offset; `c.restart(offsets)` stops the connector, sets those
(earlier) offsets and resumes it, so that the events after them are delivered again
(the connector runs with `flush.lsn.source=false`: the slot keeps the WAL from its creation,
so PostgreSQL can stream it again); `c.restart()` without offsets is a plain restart.

Not here: Avro. Debezium's Avro path needs Confluent's AvroConverter, which Maven Central does
not serve (Confluent's own repository does; the machines here reach Central only), and
Apicurio's converter speaks Apicurio's API, not the Confluent one of tests/schema_registry.py.

What it needs: Java 17+, Maven, confluent-kafka (the dev extra), PostgreSQL. The first use
copies the worker's jars (68 with their dependencies, 39 MB; about 10 s with a warm ~/.m2)
once into `~/.cache/runner/jars/kafka-connect-4.3.0-debezium-3.6.1.Final/` ($RUNNER_JAR_CACHE
or $XDG_CACHE_HOME move it); without Java, Maven or the network the tests that use it skip, saying
why. On this machine (2 cores, shared) the worker answers 3 to 5 s after it starts, and a
connector's registration, snapshot and first `sync()` take about 2 s; PostgreSQL, the broker
and the worker together are up in about 13 s.

Use it through tests/conftest.py (`from tests.debezium import debezium`), as the other
session fixtures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.kafka_connect import ConnectWorker, WorkerFailed, connect_jars, running_worker
from tests.kafka_server import KafkaBroker
from tests.postgres import PostgresServer, as_superuser

DATABASE = "debezium_test"
ROLE = "debezium"
SYNC_TABLE = "debezium_sync"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
WAIT_S = 120


@dataclass(frozen=True)
class ChangeEvent:
    """One record of a connector's topic, its key and value decoded from JSON."""

    offset: int
    key: Any  # None: no key
    value: Any  # None: a tombstone
    raw_key: bytes | None = field(repr=False)
    raw_value: bytes | None = field(repr=False)

    @property
    def envelope(self) -> dict[str, Any] | None:
        """The envelope (before, after, source, op, ts_ms...), with or without a schema."""
        return _payload(self.value)

    @property
    def op(self) -> str | None:
        return None if self.envelope is None else self.envelope["op"]


def _payload(value: Any) -> Any:
    """JsonConverter with schemas wraps the data as {"schema": ..., "payload": ...}."""
    if isinstance(value, dict) and set(value) == {"schema", "payload"}:
        return value["payload"]
    return value


@dataclass
class Connector:
    """A registered Debezium PostgreSQL connector (its name is also its topic prefix)."""

    rig: Debezium
    name: str
    tables: tuple[str, ...]
    _markers: Iterator[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    def topic(self, table: str) -> str:
        return f"{self.name}.public.{table}"

    def events(self, table: str) -> list[ChangeEvent]:
        """Every record of the table's topic, in offset order ([] before the first)."""
        return read_topic(self.rig.kafka.bootstrap, self.topic(table))

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = self.rig.worker.request("GET", f"/connectors/{self.name}/status")
        return status

    def offsets(self) -> list[dict[str, Any]]:
        """The committed source offsets: [{"partition": {"server": name}, "offset": {...}}]."""
        found = self.rig.worker.request("GET", f"/connectors/{self.name}/offsets")
        offsets: list[dict[str, Any]] = found["offsets"]
        return offsets

    def sync(self) -> int:
        """Wait until every change committed so far is in Kafka (see the module docstring);
        the marker's LSN."""
        while True:
            n = next(self._markers)
            self.rig.execute(f"INSERT INTO {SYNC_TABLE} VALUES ('{self.name}', {n})")
            marker = self._wait(functools.partial(self._marker, n), f"the marker event {n}")
            # A marker inserted while the slot was being made is read by the snapshot: its
            # offset is the snapshot's. The next one is streamed.
            if marker["op"] != "r":
                break
        lsn = int(marker["source"]["lsn"])
        self._wait(lambda: self._committed(lsn), f"a committed offset at LSN {lsn}")
        return lsn

    def _marker(self, n: int) -> dict[str, Any] | None:
        """The envelope of marker `n`'s event, None while it is not in Kafka."""
        for event in self.events(SYNC_TABLE):
            envelope = event.envelope or {}
            after = envelope.get("after") or {}
            if after.get("connector") == self.name and after.get("n") == n:
                return envelope
        return None

    def _committed(self, lsn: int) -> bool | None:
        """Whether the committed offset is a streamed event's at `lsn` or later. A snapshot's
        offset does not count: its LSN, the server's when the snapshot began, can be past
        changes that are streamed after the snapshot."""
        offsets = self.offsets()
        offset = offsets[0]["offset"] if offsets else {}
        return ("snapshot" not in offset and int(offset.get("lsn", 0)) >= lsn) or None

    def restart(self, offsets: Sequence[Mapping[str, Any]] | None = None) -> None:
        """Restart the connector; with `offsets` (an earlier `offsets()`), from there: the
        events after them come again. Returns once its task runs (then `sync()`)."""
        path = f"/connectors/{self.name}"
        if offsets is None:
            self.rig.worker.request("POST", f"{path}/restart?includeTasks=true")
        else:
            self.rig.worker.request("PUT", f"{path}/stop")
            self._wait(lambda: self._state("STOPPED"), "the connector stopped")
            self.rig.worker.request("PATCH", f"{path}/offsets", {"offsets": list(offsets)})
            self.rig.worker.request("PUT", f"{path}/resume")
        self._wait(lambda: self._state("RUNNING"), "the connector and its task running")

    def _state(self, wanted: str) -> bool | None:
        status = self.status()
        tasks = [t["state"] for t in status["tasks"]]
        if "FAILED" in tasks:
            raise WorkerFailed(f"connector {self.name}'s task failed: {status['tasks']}")
        if status["connector"]["state"] != wanted:
            return None
        return wanted == "STOPPED" or (bool(tasks) and set(tasks) == {"RUNNING"}) or None

    def _wait(self, check: Any, what: str) -> Any:
        """`check()` until it gives something (not None); the connector failing fails it."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            found = check()
            if found is not None:
                return found
            failed = [t for t in self.status()["tasks"] if t["state"] == "FAILED"]
            if failed:
                trace = failed[0].get("trace", "")
                raise WorkerFailed(f"connector {self.name}'s task failed: {trace[:3000]}")
            time.sleep(0.1)
        raise WorkerFailed(
            f"waited {WAIT_S} s for {what} of connector {self.name}\n{self.rig.worker.tail()}"
        )


@dataclass
class Debezium:
    """The rig: `postgres` is `runner` on database `debezium_test`; `admin` is `debezium`."""

    postgres: PostgresServer
    admin: PostgresServer
    kafka: KafkaBroker
    worker: ConnectWorker
    _names: Iterator[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    def execute(self, sql: str) -> None:
        self.postgres.execute(sql)

    def query(self, sql: str) -> list[tuple[str, ...]]:
        return self.postgres.query(sql)

    def connector_config(self, name: str, tables: Sequence[str], schemas: bool) -> dict[str, str]:
        """A connector's settings: pgoutput, its own slot and publication, JSON with or without
        schemas, topics created by Connect."""
        captured = [f"public.{t}" for t in (*tables, SYNC_TABLE)]
        return {
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "tasks.max": "1",
            "database.hostname": self.admin.host,
            "database.port": str(self.admin.port),
            "database.user": self.admin.user,
            "database.password": self.admin.password,
            "database.dbname": self.admin.database,
            "topic.prefix": name,
            "plugin.name": "pgoutput",
            "slot.name": f"{name}_slot",
            "publication.name": f"{name}_pub",
            "publication.autocreate.mode": "filtered",
            "table.include.list": ",".join(captured),
            "flush.lsn.source": "false",  # the slot keeps its WAL: restart(offsets) re-delivers
            "topic.creation.default.replication.factor": "1",
            "topic.creation.default.partitions": "1",
            "key.converter": JSON_CONVERTER,
            "value.converter": JSON_CONVERTER,
            "key.converter.schemas.enable": str(schemas).lower(),
            "value.converter.schemas.enable": str(schemas).lower(),
        }

    @contextlib.contextmanager
    def connector(
        self,
        tables: Sequence[str],
        *,
        schemas: bool = True,
        config: Mapping[str, str] | None = None,
    ) -> Iterator[Connector]:
        """Register a connector for `tables` (of schema public, made beforehand) and wait for
        its snapshot; `config` adds or overrides settings. Deleted, with its slot and
        publication, on leaving."""
        name = f"dbz_{next(self._names)}"
        settings = {**self.connector_config(name, tables, schemas), **(config or {})}
        connector = Connector(self, name, tuple(tables))
        try:
            self.worker.request("PUT", f"/connectors/{name}/config", settings)
            connector._wait(lambda: self._slot_exists(name), "its replication slot")
            connector.sync()
            yield connector
        finally:
            with contextlib.suppress(WorkerFailed):
                self.worker.request("DELETE", f"/connectors/{name}")
            self._drop_slot(name)

    def _slot_exists(self, name: str) -> bool | None:
        found = self.admin.query(
            f"SELECT 1 FROM pg_replication_slots WHERE slot_name = '{name}_slot'"
        )
        return bool(found) or None

    def _drop_slot(self, name: str) -> None:
        """Once the deleted connector's task has let go of it (a slot in use cannot go)."""
        deadline = time.monotonic() + 60
        slot = f"'{name}_slot'"
        while True:
            active = self.admin.query(
                f"SELECT active FROM pg_replication_slots WHERE slot_name = {slot}"
            )
            if active == [("f",)]:
                self.admin.execute(f"SELECT pg_drop_replication_slot({slot})")
            if active != [("t",)]:
                break
            if time.monotonic() > deadline:
                raise WorkerFailed(f"the replication slot {slot} is still in use after 60 s")
            time.sleep(0.1)
        self.admin.execute(f"DROP PUBLICATION IF EXISTS {name}_pub")


def read_topic(bootstrap: str, topic: str) -> list[ChangeEvent]:
    """Every record of a one-partition topic up to its high watermark ([] if no topic yet)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "runner-tests-debezium",  # never committed: assign() needs one
            "enable.auto.commit": False,
            "topic.metadata.propagation.max.ms": 1_000,
        }
    )
    try:
        if topic not in consumer.list_topics(timeout=10).topics:
            return []
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        events: list[ChangeEvent] = []
        deadline = time.monotonic() + 60
        while (not events or events[-1].offset < high - 1) and high > low:
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {topic}: {len(events)} of {high - low} records")
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            events.append(_event(msg.offset(), msg.key(), msg.value()))
        return events
    finally:
        consumer.close()


def _event(offset: int, key: bytes | None, value: bytes | None) -> ChangeEvent:
    decoded = [None if raw is None else json.loads(raw) for raw in (key, value)]
    return ChangeEvent(offset, decoded[0], decoded[1], key, value)


@pytest.fixture(scope="session")
def debezium(postgres: PostgresServer, kafka_broker: KafkaBroker) -> Iterator[Debezium]:
    """PostgreSQL, a Kafka Connect worker with Debezium's connector, the broker: a rig."""
    jars, problem = connect_jars()
    if jars is None:
        pytest.skip(f"no Debezium: {problem}")
    password = secrets.token_hex(12)
    as_superuser(
        f"CREATE ROLE {ROLE} LOGIN SUPERUSER REPLICATION PASSWORD '{password}'",
        f"CREATE DATABASE {DATABASE} OWNER {postgres.user}",
    )
    database = dataclasses.replace(postgres, database=DATABASE)
    admin = dataclasses.replace(database, user=ROLE, password=password)
    database.execute(
        f"CREATE TABLE {SYNC_TABLE} (connector text, n bigint, PRIMARY KEY (connector, n))"
    )
    try:
        with contextlib.ExitStack() as stack:
            try:
                worker = stack.enter_context(running_worker(jars, kafka_broker.bootstrap))
            except WorkerFailed as exc:
                pytest.fail(str(exc), pytrace=False)
            yield Debezium(database, admin, kafka_broker, worker)
    finally:
        as_superuser(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)", f"DROP ROLE {ROLE}")
