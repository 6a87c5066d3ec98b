"""The changes of the Debezium bench (bench/debezium.py): a table `orders` of 8 columns, its
snapshot and batches of updates and deletes, written two ways: as the Debezium PostgreSQL
connector writes them (Kafka Connect's JsonConverter with schemas, key and value) and as
plain JSON upserts (the row, a sequence number and a delete marker).

The row: id (int64, the primary key and the message key), customer and city (text), status
(text), amount (numeric(12,2): Connect's Decimal, base64 of the unscaled big-endian two's
complement, as Debezium's decimal.handling.mode precise writes it), quantity (int32),
created_at and updated_at (timestamp: io.debezium.time.MicroTimestamp, microseconds). The
envelope is the one the rig's recordings show (tests/data/debezium/postgres/orders.json):
`before` null for an update (REPLICA IDENTITY DEFAULT), the key only for a delete, then a
tombstone; a snapshot's events share the slot's LSN (`source.snapshot` first/true/last),
each later change has its own. The plain records carry the same values: amount as a JSON
number, the times as ISO text, `seq` the event's LSN, `deleted` true for a delete (the
other columns absent).

Everything is seeded: the same rows and batch for the same rows, batch and seed.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.write import CITIES

Message = tuple[bytes, bytes | None]  # key, value (None: a tombstone)

COLUMNS = ("id", "customer", "city", "status", "amount", "quantity", "created_at", "updated_at")
DDL = (
    "id bigint, customer string, city string, status string, amount decimal(12,2), "
    "quantity int, created_at timestamp_ntz, updated_at timestamp_ntz, seq bigint, "
    "deleted boolean"
)
STATUSES = ("new", "paid", "shipped", "delivered", "returned")
START_US = 1_704_067_200_000_000  # 2024-01-01 00:00 UTC
FIRST_LSN = 0x2_0000_0000
LSN_STEP = 328  # the WAL bytes between two changes, about a small row's
SERVER = "bench"  # the connector's topic.prefix


def _field(kind: str, field: str, optional: bool = True, **more: object) -> dict[str, object]:
    return {"type": kind, "optional": optional, **more, "field": field}


def _row_schema(side: str) -> dict[str, object]:
    time: dict[str, Any] = {"name": "io.debezium.time.MicroTimestamp", "version": 1}
    decimal: dict[str, Any] = {
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "12"},
    }
    fields = [
        _field("int64", "id", optional=False),
        _field("string", "customer"),
        _field("string", "city"),
        _field("string", "status"),
        _field("bytes", "amount", **decimal),
        _field("int32", "quantity"),
        _field("int64", "created_at", **time),
        _field("int64", "updated_at", **time),
    ]
    value = f"{SERVER}.public.orders.Value"
    return {"type": "struct", "fields": fields, "optional": True, "name": value, "field": side}


def _envelope_schema() -> dict[str, object]:
    text, number = ("string", "int64")
    source = [
        _field(text, "version", False),
        _field(text, "connector", False),
        _field(text, "name", False),
        _field(number, "ts_ms", False),
        _field(text, "snapshot", name="io.debezium.data.Enum", version=1, default="false"),
        _field(text, "db", False),
        _field(text, "sequence"),
        _field(number, "ts_us"),
        _field(number, "ts_ns"),
        _field(text, "schema", False),
        _field(text, "table", False),
        _field(number, "txId"),
        _field(number, "lsn"),
        _field(number, "xmin"),
        _field(text, "origin"),
        _field(number, "origin_lsn"),
    ]
    block = [
        _field(text, "id", False),
        _field(number, "total_order", False),
        _field(number, "data_collection_order", False),
    ]
    fields = [
        _row_schema("before"),
        _row_schema("after"),
        _field(
            "struct", "source", False, fields=source, name="io.debezium.connector.postgresql.Source"
        ),
        _field("struct", "transaction", fields=block, name="event.block", version=1),
        _field(text, "op", False),
        _field(number, "ts_ms"),
        _field(number, "ts_us"),
        _field(number, "ts_ns"),
    ]
    return {
        "type": "struct",
        "fields": fields,
        "optional": False,
        "name": f"{SERVER}.public.orders.Envelope",
        "version": 2,
    }


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


_KEY = (
    '{"schema":'
    + _compact(
        {
            "type": "struct",
            "fields": [_field("int64", "id", optional=False)],
            "optional": False,
            "name": f"{SERVER}.public.orders.Key",
        }
    )
    + ',"payload":{"id":%d}}'
)
_VALUE = (
    '{"schema":'
    + _compact(_envelope_schema())
    + ',"payload":{"before":%s,"after":%s,"source":{"version":"3.6.1.Final",'
    + f'"connector":"postgresql","name":"{SERVER}",'
    + '"ts_ms":%d,"snapshot":"%s","db":"shop","sequence":"[\\"%d\\",\\"%d\\"]","ts_us":%d,'
    + '"ts_ns":%d,"schema":"public","table":"orders","txId":%d,"lsn":%d,"xmin":null,'
    + '"origin":null,"origin_lsn":null},"transaction":null,"op":"%s","ts_ms":%d,"ts_us":%d,'
    + '"ts_ns":%d}}'
)
_ROW = (
    '{"id":%d,"customer":"%s","city":"%s","status":"%s","amount":"%s","quantity":%d,'
    '"created_at":%d,"updated_at":%d}'
)
_DELETED_ROW = (
    '{"id":%d,"customer":null,"city":null,"status":null,"amount":null,"quantity":null,'
    '"created_at":null,"updated_at":null}'
)
_PLAIN = (
    '{"id":%d,"customer":"%s","city":"%s","status":"%s","amount":%s,"quantity":%d,'
    '"created_at":"%s","updated_at":"%s","seq":%d,"deleted":false}'
)
_PLAIN_DELETE = '{"id":%d,"seq":%d,"deleted":true}'


@dataclass
class Orders:
    """The database table's rows as numpy columns, indexed by id - 1; `alive` says which
    rows exist."""

    status: np.ndarray
    cents: np.ndarray
    quantity: np.ndarray
    updated_us: np.ndarray
    alive: np.ndarray
    lsn: int = FIRST_LSN  # the WAL position of the last change

    @staticmethod
    def made(rows: int, seed: int) -> Orders:
        rng = np.random.default_rng(seed)
        return Orders(
            status=rng.integers(0, len(STATUSES), rows),
            cents=rng.integers(100, 5_000_000, rows),
            quantity=rng.integers(1, 21, rows),
            updated_us=_created(np.arange(1, rows + 1)),
            alive=np.ones(rows, dtype=bool),
        )


def _created(ids: np.ndarray) -> np.ndarray:
    return START_US + ids * 1_000_003  # about a second apart, every digit used


@dataclass(frozen=True)
class Step:
    """One step's changes in the log's order: ids, ops ("r", "u" or "d") and LSNs; the
    values are the table's after the step (a deleted row's are not read)."""

    name: str
    ids: np.ndarray
    ops: np.ndarray
    lsns: np.ndarray
    ts_ms: int


def snapshot(orders: Orders) -> Step:
    """Every row, read by the connector's snapshot at one LSN."""
    ids = np.arange(1, len(orders.alive) + 1)
    lsns = np.full(len(ids), orders.lsn)
    return Step("snapshot", ids, np.full(len(ids), "r"), lsns, _ms(orders.lsn))


def changes(orders: Orders, number: int, seed: int, updates: float, deletes: float) -> Step:
    """A batch: `updates` of the rows updated (status, amount, quantity, updated_at), then
    `deletes` of them deleted, drawn from the rows that exist (a row may be updated and then
    deleted in one batch); `orders` changed as the database is."""
    rng = np.random.default_rng((seed, number))
    existing = np.flatnonzero(orders.alive) + 1
    rows = len(orders.alive)
    updated = rng.choice(existing, max(1, round(rows * updates)), replace=False)
    deleted = rng.choice(existing, max(1, round(rows * deletes)), replace=False)
    ids = np.concatenate([updated, deleted])
    lsns = orders.lsn + LSN_STEP * np.arange(1, len(ids) + 1)
    orders.lsn = int(lsns[-1])
    at = updated - 1
    orders.status[at] = rng.integers(0, len(STATUSES), len(at))
    orders.cents[at] = rng.integers(100, 5_000_000, len(at))
    orders.quantity[at] = rng.integers(1, 21, len(at))
    orders.updated_us[at] = _ms(int(lsns[0])) * 1_000 + np.arange(len(at))
    orders.alive[deleted - 1] = False
    ops = np.array(["u"] * len(updated) + ["d"] * len(deleted))
    return Step(f"batch {number}", ids, ops, lsns, _ms(orders.lsn))


def _ms(lsn: int) -> int:
    """The commit time of a change: a millisecond per change, from a year after START_US
    (after every row was created)."""
    return START_US // 1_000 + 366 * 86_400_000 + (lsn - FIRST_LSN) // LSN_STEP


def _amount_bytes(cents: int) -> str:
    """Connect's Decimal: the unscaled value's minimal big-endian two's complement, base64."""
    length = (cents if cents >= 0 else ~cents).bit_length() // 8 + 1
    return base64.b64encode(cents.to_bytes(length, "big", signed=True)).decode()


def debezium_messages(step: Step, orders: Orders) -> Iterator[Message]:
    """The step as the connector writes it: key and envelope per change, a tombstone after a
    delete."""
    last = len(step.ids) - 1
    for i, (key, op, lsn) in enumerate(
        zip(step.ids.tolist(), step.ops.tolist(), step.lsns.tolist(), strict=True)
    ):
        at = key - 1
        if op == "d":
            before, after = _DELETED_ROW % key, "null"
        else:
            before, after = (
                "null",
                _ROW
                % (
                    key,
                    f"customer-{key % 50_000:05d}",
                    CITIES[key % len(CITIES)],
                    STATUSES[orders.status[at]],
                    _amount_bytes(int(orders.cents[at])),
                    orders.quantity[at],
                    _created(key),
                    orders.updated_us[at],
                ),
            )
        ms = step.ts_ms if op == "r" else _ms(lsn)
        shot = ("first" if i == 0 else "last" if i == last else "true") if op == "r" else "false"
        tx = 700 + (0 if op == "r" else i + 1)
        value = _VALUE % (
            before, after, ms, shot, lsn, lsn, ms * 1_000, ms * 1_000_000, tx, lsn,
            op, ms + 5, (ms + 5) * 1_000, (ms + 5) * 1_000_000,
        )  # fmt: skip
        yield (_KEY % key).encode(), value.encode()
        if op == "d":
            yield (_KEY % key).encode(), None


def plain_messages(step: Step, orders: Orders) -> Iterator[Message]:
    """The step as plain JSON upserts keyed by id: the row with `seq` (the LSN), or the id,
    `seq` and `deleted: true`."""

    def texts(micros: np.ndarray) -> list[str]:
        return np.datetime_as_string(micros.astype("datetime64[us]"), unit="us").tolist()

    created, updated = texts(_created(step.ids)), texts(orders.updated_us[step.ids - 1])
    for i, (key, op, lsn) in enumerate(
        zip(step.ids.tolist(), step.ops.tolist(), step.lsns.tolist(), strict=True)
    ):
        at = key - 1
        if op == "d":
            yield str(key).encode(), (_PLAIN_DELETE % (key, lsn)).encode()
            continue
        cents = int(orders.cents[at])
        value = _PLAIN % (
            key,
            f"customer-{key % 50_000:05d}",
            CITIES[key % len(CITIES)],
            STATUSES[orders.status[at]],
            f"{cents // 100}.{cents % 100:02d}",
            orders.quantity[at],
            created[i],
            updated[i],
            lsn,
        )
        yield str(key).encode(), value.encode()
