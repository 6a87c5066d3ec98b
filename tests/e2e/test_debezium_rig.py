"""The Debezium rig of tests/debezium.py against itself: what a PostgreSQL table's changes look
like in Kafka, so that the Debezium source's tests stand on known ground. One connector over
two tables: a snapshot of existing rows, insert, update, delete and its tombstone, a primary
key update, an added column, each logical type PostgreSQL gives, and the re-delivery of
events by a restart from earlier offsets; then the same without schemas.

RUNNER_RECORD_DEBEZIUM=tests/data/debezium/postgres records the topics there
(tests/data/debezium/postgres/README.md).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.debezium import ChangeEvent, Connector

pytestmark = pytest.mark.slow

COLUMNS = """
  id int PRIMARY KEY,
  amount numeric(10, 2),
  ratio numeric,
  day date,
  at_ms timestamp(3),
  at_us timestamp,
  at_tz timestamptz,
  t_ms time(3),
  t_us time,
  doc jsonb,
  ref uuid,
  feel mood
"""
ROW_1 = """(1, 12.34, 0.125, '2024-01-02', '2024-01-02 03:04:05.678', '2024-01-02 03:04:05.678901',
   '2024-01-02 03:04:05.678901+02', '13:14:15.167', '13:14:15.167891', '{"a": [1, 2]}',
   'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'happy')"""
MOOD = """DO $$ BEGIN CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
  EXCEPTION WHEN duplicate_object THEN NULL; END $$;"""
TABLES = f"""{MOOD}
CREATE TABLE orders ({COLUMNS});
CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance numeric(12, 4));
ALTER TABLE accounts REPLICA IDENTITY FULL;
INSERT INTO orders VALUES
  {ROW_1},
  (2, -0.5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'sad');
"""
CHANGES = """
INSERT INTO orders (id, amount, day, feel) VALUES (3, 7, '1969-12-31', 'ok');
UPDATE orders SET amount = 99.95 WHERE id = 1;
DELETE FROM orders WHERE id = 2;
UPDATE orders SET id = 30 WHERE id = 3;
ALTER TABLE orders ADD COLUMN note text;
INSERT INTO orders (id, amount, note) VALUES (4, 0.5, 'added');
INSERT INTO accounts VALUES (1, 'ann', 10.5);
UPDATE accounts SET balance = 11 WHERE id = 1;
DELETE FROM accounts WHERE id = 1;
"""


def _decimal(field_schema: dict[str, Any], encoded: str) -> Decimal:
    """Connect's Decimal: base64 of the big-endian two's-complement unscaled value, the scale
    in the field's schema parameters."""
    unscaled = int.from_bytes(base64.b64decode(encoded), "big", signed=True)
    return Decimal(unscaled).scaleb(-int(field_schema["parameters"]["scale"]))


def _fields(event: ChangeEvent) -> dict[str, dict[str, Any]]:
    """The `after` row's field schemas by name."""
    envelope_fields = {f["field"]: f for f in event.value["schema"]["fields"]}
    return {f["field"]: f for f in envelope_fields["after"]["fields"]}


def _record(connector: Connector, tables: list[str], suffix: str) -> None:
    folder = os.environ.get("RUNNER_RECORD_DEBEZIUM")
    if not folder:
        return
    for table in tables:
        events = [{"key": e.key, "value": e.value} for e in connector.events(table)]
        path = Path(folder) / f"{table}{suffix}.json"
        path.write_text(json.dumps(events, indent=1) + "\n")


def test_changes_arrive_as_debezium_envelopes_and_a_restart_delivers_them_again(debezium):
    debezium.execute(TABLES)
    with debezium.connector(["orders", "accounts"]) as connector:
        after_snapshot = connector.offsets()
        debezium.execute(CHANGES)
        connector.sync()
        events = connector.events("orders")
        _snapshot_and_changes(events)
        _logical_types(events[0])
        _added_column(events)
        _full_replica_identity(connector.events("accounts"))
        _record(connector, ["orders", "accounts"], "")

        connector.restart(after_snapshot)
        connector.sync()
        again = connector.events("orders")[len(events) :]
        streamed = [(e.op, e.key, e.envelope and e.envelope["source"]["lsn"]) for e in events[2:]]
        assert [
            (e.op, e.key, e.envelope and e.envelope["source"]["lsn"]) for e in again
        ] == streamed


def _snapshot_and_changes(events: list[ChangeEvent]) -> None:
    keys = [e.key["payload"]["id"] for e in events]
    ops = [e.op for e in events]  # None: a tombstone
    assert list(zip(ops, keys, strict=True)) == [
        ("r", 1), ("r", 2),  # the snapshot of the rows there before
        ("c", 3),
        ("u", 1),
        ("d", 2), (None, 2),  # a delete, then its tombstone
        ("d", 3), (None, 3), ("c", 30),  # a key update: the old key's delete, the new's create
        ("c", 4),
    ]  # fmt: skip
    snapshot = [e.envelope["source"] for e in events[:2]]
    assert [s["snapshot"] for s in snapshot] == ["first", "last"]
    assert snapshot[0]["lsn"] == snapshot[1]["lsn"]  # the slot's consistent point
    lsns = [e.envelope["source"]["lsn"] for e in events[2:] if e.envelope]
    assert lsns == sorted(lsns) and lsns[0] > snapshot[0]["lsn"]
    assert lsns[3] == lsns[4]  # the key update's delete and create: one WAL record
    update, delete = events[3].envelope, events[4].envelope
    assert update["before"] is None  # REPLICA IDENTITY DEFAULT: no old row for an update
    assert _decimal(_fields(events[3])["amount"], update["after"]["amount"]) == Decimal("99.95")
    assert delete["after"] is None and delete["before"]["id"] == 2
    assert {k for k, v in delete["before"].items() if v is not None} == {"id"}  # the key only
    assert events[5].raw_value is None and events[5].key == events[4].key


def _logical_types(snapshot: ChangeEvent) -> None:
    """Each PostgreSQL type's Connect schema and its JSON value."""
    fields, row = _fields(snapshot), snapshot.envelope["after"]
    names = {name: f.get("name") for name, f in fields.items()}
    assert names == {
        "id": None,
        "amount": "org.apache.kafka.connect.data.Decimal",
        "ratio": "io.debezium.data.VariableScaleDecimal",
        "day": "io.debezium.time.Date",
        "at_ms": "io.debezium.time.Timestamp",
        "at_us": "io.debezium.time.MicroTimestamp",
        "at_tz": "io.debezium.time.ZonedTimestamp",
        "t_ms": "io.debezium.time.Time",
        "t_us": "io.debezium.time.MicroTime",
        "doc": "io.debezium.data.Json",
        "ref": "io.debezium.data.Uuid",
        "feel": "io.debezium.data.Enum",
    }
    assert fields["amount"]["parameters"] == {"scale": "2", "connect.decimal.precision": "10"}
    assert _decimal(fields["amount"], row["amount"]) == Decimal("12.34")
    ratio = row["ratio"]  # a numeric without scale: the scale travels with each value
    assert _decimal({"parameters": {"scale": ratio["scale"]}}, ratio["value"]) == Decimal("0.125")
    epoch = dt.datetime(1970, 1, 1)
    assert epoch + dt.timedelta(days=row["day"]) == dt.datetime(2024, 1, 2)
    assert epoch + dt.timedelta(milliseconds=row["at_ms"]) == dt.datetime(
        2024, 1, 2, 3, 4, 5, 678000
    )
    assert epoch + dt.timedelta(microseconds=row["at_us"]) == dt.datetime(
        2024, 1, 2, 3, 4, 5, 678901
    )
    assert row["at_tz"] == "2024-01-02T01:04:05.678901Z"  # normalised to UTC, as text
    assert row["t_ms"] == ((13 * 60 + 14) * 60 + 15) * 1000 + 167  # ms of the day, int32
    assert row["t_us"] == ((13 * 60 + 14) * 60 + 15) * 1_000_000 + 167891  # µs, int64
    assert json.loads(row["doc"]) == {"a": [1, 2]}  # JSON as text
    assert row["ref"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert row["feel"] == "happy" and fields["feel"]["parameters"]["allowed"] == "sad,ok,happy"


def _added_column(events: list[ChangeEvent]) -> None:
    """The schema of the events after ALTER TABLE ADD COLUMN has the column; earlier, not."""
    assert "note" not in _fields(events[-2])
    assert _fields(events[-1])["note"]["type"] == "string"
    assert events[-1].envelope["after"]["note"] == "added"


def _full_replica_identity(events: list[ChangeEvent]) -> None:
    """REPLICA IDENTITY FULL: an update and a delete carry the whole old row."""
    assert [e.op for e in events] == ["c", "u", "d", None]
    update, delete = events[1].envelope, events[2].envelope
    scale = _fields(events[1])["balance"]
    assert _decimal(scale, update["before"]["balance"]) == Decimal("10.5")
    assert _decimal(scale, update["after"]["balance"]) == Decimal("11")
    assert delete["before"]["owner"] == "ann" and delete["after"] is None


def test_without_schemas_the_envelope_is_the_whole_value(debezium):
    debezium.execute(f"{MOOD} CREATE TABLE plain ({COLUMNS})")
    with debezium.connector(["plain"], schemas=False) as connector:
        debezium.execute(
            f"INSERT INTO plain VALUES {ROW_1};"
            "UPDATE plain SET amount = 2.25 WHERE id = 1; DELETE FROM plain"
        )
        connector.sync()
        events = connector.events("plain")
        _record(connector, ["plain"], "-schemaless")
    assert [(e.op, e.key) for e in events] == [
        ("c", {"id": 1}), ("u", {"id": 1}), ("d", {"id": 1}), (None, {"id": 1})
    ]  # fmt: skip
    update = events[1].value
    assert set(update) >= {"before", "after", "source", "op", "ts_ms"}
    # no schema: a Decimal's scale is not in the message; the reader must know it
    assert base64.b64decode(update["after"]["amount"]) == (225).to_bytes(
        2, "big"
    )  # two's complement: 0x00E1
    assert update["after"]["ratio"] == {"scale": 3, "value": base64.b64encode(b"\x7d").decode()}
    assert update["after"]["at_tz"] == "2024-01-02T01:04:05.678901Z"
    assert update["after"]["feel"] == "happy"
    assert isinstance(update["source"]["lsn"], int)
