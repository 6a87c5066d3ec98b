"""The index and key settings a table is written with, stored in its Delta configuration.

A run whose spec disagrees with the table is refused before anything is read or written,
with every difference listed and what to do about it.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from runner.delta.snapshot import TableSnapshot
from runner.errors import TableMismatchError
from runner.index.layout import LAYOUT_KEYS, BucketLayout
from runner.index.string_hash import HASH_FUNCTION
from runner.keygen import build_key_generator
from runner.spec.ddl_types import arrow_field_type
from runner.spec.model import Target

FORMAT_VERSION = "1"
PREFIX = "runner."
# Stored by every table written since the runner renders timestamp fields as Hudi does.
TIMESTAMP_TEXT_KEY = "runner.keygen.consistent.logical.timestamp"


def table_settings(target: Target) -> dict[str, str]:
    """Every setting that decides where a record lives, as stable strings."""
    return {
        "runner.format.version": FORMAT_VERSION,
        "runner.table.type": target.table_type,
        "runner.index.type": target.index.type,
        "runner.index.hash.function": HASH_FUNCTION,
        "runner.index.hash.fields": ",".join(target.index.hash_fields),
        **BucketLayout(target.index.buckets).to_configuration(),
        # the generator's own settings: type, fields, encodings, timestamp formats and zones
        **build_key_generator(target.key_generator).settings(),
        **change_feed_settings(target),
    }


def change_feed_settings(target: Target) -> dict[str, str]:
    """A change feed's sequence column and history (what `runner read
    --as-of-business-time` reads); none for a table that takes no change feed."""
    if target.cdc is None:
        return {}
    scd = target.scd
    history = (
        {"runner.scd.start_column": scd.start_column, "runner.scd.end_column": scd.end_column}
        if scd.type == 2
        else {}
    )
    return {
        "runner.cdc.sequence_by": target.cdc.sequence_by,
        "runner.scd.type": str(scd.type),
        **history,
    }


def _bucket_problem(target: Target, stored: Mapping[str, str]) -> str | None:
    """The spec's bucket count may be the table's count when it was created or its count
    now (after `runner expand`); anything else is a mistake worth stopping for."""
    layout = BucketLayout.from_configuration(stored)
    wanted = target.index.buckets
    if wanted in (layout.default, layout.created):
        return None
    since = f" (created with {layout.created})" if layout.created != layout.default else ""
    return (
        f"  index.buckets: table has {str(layout.default)!r}{since}, spec has {str(wanted)!r} -> "
        f"set index.buckets to {layout.default}: the bucket count of an existing table "
        f"changes only with `runner expand SPEC --buckets {wanted}`"
    )


def _timestamp_text_problem(target: Target, snapshot: TableSnapshot) -> str | None:
    """A table written before the runner followed Hudi's text for timestamp fields (epoch
    microseconds; it wrote Spark's `2016-12-29 09:54:00` before) holds keys, partition
    paths and buckets of its timestamp fields in the old text: this run would write the same
    records under other keys, beside the stored ones, so it stops instead."""
    if TIMESTAMP_TEXT_KEY in snapshot.configuration:
        return None
    generator = build_key_generator(target.key_generator)
    fields = dict.fromkeys([*generator.input_fields(), *target.index.hash_fields])
    schema = snapshot.arrow_schema()
    stamped = [f for f in fields if _is_timestamp(schema, f)]
    if not stamped:
        return None
    return (
        f"  timestamp field(s) {', '.join(stamped)}: the table was written by an earlier "
        "runner, which put them in keys, partition paths and buckets as Spark's text "
        "(2016-12-29 09:54:00) where Hudi and this runner write epoch microseconds -> "
        "load the table again into a new target.path (or keep the earlier runner for it); "
        "writing it on would store each record a second time under a new key"
    )


def _is_timestamp(schema: pa.Schema, name: str) -> bool:
    """A (possibly dotted) field of the table holds timestamps (with or without zone)."""
    kind = arrow_field_type(schema, name)
    return kind is not None and pa.types.is_timestamp(kind)


def check_table_settings(
    spec_path: str, target: Target, snapshot: TableSnapshot, table: str | None = None
) -> None:
    """Raise TableMismatchError listing every setting where the spec and the table differ;
    `table` names the table in the message (target.path unless given)."""
    stored = snapshot.configuration
    wanted = table_settings(target)
    table = table or target.path
    if stored.get("runner.format.version") is None:
        raise TableMismatchError(
            f"{table} is a Delta table not written by runner (no runner.* settings); "
            "point target.path at a new location or at a runner table"
        )
    lines = []
    for key, value in wanted.items():
        have = stored.get(key)
        if key not in LAYOUT_KEYS and have is not None and have != value:
            name = key.removeprefix(PREFIX)
            lines.append(
                f"  {name}: table has {have!r}, spec {spec_path} has {value!r} -> "
                "a table keeps the settings it was created with; write to a new "
                "target.path to change it"
            )
    for problem in (_bucket_problem(target, stored), _timestamp_text_problem(target, snapshot)):
        if problem:
            lines.append(problem)
    if lines:
        raise TableMismatchError(
            f"the spec disagrees with the table at {table}:\n" + "\n".join(lines)
        )
