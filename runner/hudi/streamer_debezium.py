"""The target of HoodieStreamer's Debezium sources (PostgresDebeziumSource,
MysqlDebeziumSource): their payloads, ordering fields and columns as the runner's change feed.

Hudi flattens each event into the row (`after`, `before` for a delete) beside columns of its
own: `_change_operation_type` (op), `_event_lsn` (PostgreSQL's source.lsn) or
`_event_bin_file`, `_event_pos`, `_event_row` and `_event_seq` (MySQL's binlog file and
position), `_event_origin_ts_ms` (source.ts_ms), `_event_tx_id`, `_event_xmin`,
`_upstream_event_processed_ts_ms` (the envelope's ts_ms), `db_shard_source_partition`
(source.name), `db_schema_source_partition` (source.schema). Its payloads
(PostgresDebeziumAvroPayload, MySqlDebeziumAvroPayload; Hudi 1.1 writes them as
EVENT_TIME_ORDERING on those fields with `_change_operation_type` = d as the delete marker)
delete on d and keep a stored row whose log position is newer than the incoming one's.

The runner does the same with a kafka source of value_format debezium: its target applies
the events as a change feed ordered by `_debezium_position`, the database's log position,
with `_debezium_op` deciding upsert or delete (runner/spec/debezium.py), so the import
writes no merge settings; it notes what each of Hudi's became, and stops where a transform's
SQL reads a column of Hudi's that the runner's view names otherwise.
"""

from __future__ import annotations

import re

from runner.errors import UserError
from runner.hudi.merge_names import ORDERING_PROPS, PAYLOADS
from runner.hudi.streamer_job import Job
from runner.hudi.streamer_kafka import DEBEZIUM_SOURCES

DEBEZIUM_PAYLOADS = (
    f"{PAYLOADS}debezium.PostgresDebeziumAvroPayload",
    f"{PAYLOADS}debezium.MySqlDebeziumAvroPayload",
)
# Hudi's ordering fields of a Debezium table: the log position it flattened.
HUDI_POSITIONS = ("_event_lsn", "_event_seq", "_event_bin_file", "_event_pos", "_event_row")
HUDI_OP = "_change_operation_type"
TOASTED = "__debezium_unavailable_value"
# Hudi's columns of a flattened event, and the runner's view's expression of the same.
HUDI_COLUMNS = {
    HUDI_OP: "_debezium_op",
    **dict.fromkeys(HUDI_POSITIONS, "_debezium_position (one number: the log position)"),
    "_event_origin_ts_ms": "_debezium_ts (a timestamp: unix_millis(_debezium_ts))",
    "_event_tx_id": "_debezium_source['txId']",
    "_event_xmin": "_debezium_source['xmin']",
    "db_shard_source_partition": "_debezium_source['name']",
    "db_schema_source_partition": "_debezium_source['schema']",
    "_upstream_event_processed_ts_ms": (
        "nothing (the envelope's ts_ms is not in the view; _kafka_timestamp, when Kafka "
        "Connect wrote the event, is close)"
    ),
}
IMPLIED = (
    "target.cdc, implied by value_format debezium: sequence_by _debezium_position (the runner's "
    "own log position: PostgreSQL's lsn; MySQL's binlog file, position and row), "
    "operation_column _debezium_op, delete_values [d]; an event older than the stored row "
    "changes nothing"
)
SEQUENCE = "target.cdc.sequence_by _debezium_position (implied), the runner's own log position"
NOT_STORED = (
    "Hudi's Debezium columns (_change_operation_type, _event_lsn, ...) are not in the table: "
    "it stores _debezium_position; select others in transform.sql under names of your own"
)
_POSITION_ONLY = (
    "the runner orders a Debezium topic's events by _debezium_position, its log position"
)
_PAYLOAD = "target.cdc (implied): d events delete, an event older than the stored row is skipped"
_MERGE_PROPS = (
    "hoodie.write.record.merge.mode",
    "hoodie.record.merge.mode",
)
_PARTIAL_PROPS = ("hoodie.write.partial.update.mode", "hoodie.table.partial.update.mode")
_PROPERTY = "hoodie.record.merge.property."  # Hudi 1.1 keeps merge properties under it
_MARKER = "hoodie.write.partial.update.custom.marker"
# Hudi 1.1's delete marker of a Debezium table: the property, and its value there.
_DELETE_PROPS = (("hoodie.payload.delete.field", HUDI_OP), ("hoodie.payload.delete.marker", "d"))
_TOAST_WHY = (
    f"the runner stores a column sent as {TOASTED} (PostgreSQL's unchanged TOASTed value "
    "under REPLICA IDENTITY DEFAULT) as sent, where Hudi keeps the stored value: set REPLICA "
    "IDENTITY FULL on the table (docs/cdc-database.md)"
)


def fed_by_debezium(job: Job) -> bool:
    return job.flags.get("--source-class") in DEBEZIUM_SOURCES


def debezium_merge(job: Job) -> None:
    """Hudi's ordering and merge settings of a Debezium table: the change feed the runner
    applies instead (IMPLIED), noted setting by setting."""
    if job.flags.get("--filter-dupes") == "true":
        raise UserError(
            "--filter-dupes with a Debezium source: HoodieStreamer refuses it with --op UPSERT "
            "(updates would be missed), and a Debezium topic is applied with upsert; leave it out"
        )
    ordering = job.setting(["--source-ordering-fields", "--source-ordering-field"], *ORDERING_PROPS)
    if ordering:
        fields = [f.strip() for f in ordering[1].split(",") if f.strip()]
        if set(fields) <= set(HUDI_POSITIONS):
            copy = f"{SEQUENCE}, of which {ordering[1]} is Hudi's copy"
            job.out.mapped.append((ordering[0], copy))
        else:
            job.out.skipped.append((ordering[0], f"{_POSITION_ONLY}, not by {ordering[1]}"))
    mode = job.setting(["--merge-mode", "--record-merge-mode"], *_MERGE_PROPS)
    if mode and mode[1].upper() == "EVENT_TIME_ORDERING":
        job.out.mapped.append((mode[0], f"{SEQUENCE} (the event time)"))
    elif mode:
        job.out.skipped.append((mode[0], f"{_POSITION_ONLY}, not by {mode[1]}"))
    payload = job.setting(["--payload-class"], "hoodie.datasource.write.payload.class")
    if payload:
        cls = payload[1] if "." in payload[1] else f"{PAYLOADS}debezium.{payload[1]}"
        if cls not in DEBEZIUM_PAYLOADS:
            job.out.skipped.append((payload[0], f"{_POSITION_ONLY}, and d events delete"))
        elif cls.endswith("PostgresDebeziumAvroPayload"):
            job.out.mapped.append((payload[0], f"{_PAYLOAD}; but {_TOAST_WHY}"))
        else:
            job.out.mapped.append((payload[0], _PAYLOAD))
    partial = job.prop(*_PARTIAL_PROPS)
    if partial and partial[1].upper() != "IGNORE_MARKERS":
        job.out.skipped.append((partial[0], "a Debezium topic's events are whole rows"))
    else:
        job.skip(partial, _TOAST_WHY)
    job.skip(job.prop(_MARKER, f"{_PROPERTY}{_MARKER}"), _TOAST_WHY)
    for name, hudis in _DELETE_PROPS:
        found = job.prop(name, f"{_PROPERTY}{name}")
        if found and found[1] == hudis:
            job.out.mapped.append((found[0], "target.cdc: _debezium_op d deletes (implied)"))
        else:
            job.skip(found, "a Debezium topic's deletes are its d events (_debezium_op)")
    job.out.mapped.append(("value_format debezium", f"{IMPLIED}. {NOT_STORED}"))


def check_transform_sql(sql: str) -> None:
    """Stop at a transform reading Hudi's flattened Debezium columns, naming the runner's."""
    used = [name for name in HUDI_COLUMNS if re.search(rf"\b{name}\b", sql)]
    if used:
        instead = "; ".join(f"{name}: {HUDI_COLUMNS[name]}" for name in used)
        raise UserError(
            f"hoodie.streamer.transformer.sql reads Hudi's Debezium columns, which the runner's "
            f"view names otherwise ({instead}): rewrite the query with --set "
            "hoodie.streamer.transformer.sql=..."
        )
