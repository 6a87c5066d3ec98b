"""A command's SPEC|TABLE argument: every command on a table takes either.

A spec file means its target table. A table (a directory or URI) means a spec made of the
table's own settings, which it stores since its first commit (runner/delta/table_config.py:
table type, key generator, index, change feed), and a spec's defaults for what only a spec
says (cleaning, compaction and expansion settings, Spark, the history beside the table).
That spec is refused unless it gives back every stored setting exactly (a key generator
class, say, is found only beside its spec), so a table change made with it places every
record where the table's writers do.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from runner.delta.snapshot import open_table
from runner.delta.table_config import table_settings
from runner.errors import UserError
from runner.index.layout import LAYOUT_KEYS, BucketLayout
from runner.spec.model import (
    CdcSpec,
    IndexSpec,
    KeyGenSpec,
    PipelineSpec,
    ScdSpec,
    Target,
    TimestampSpec,
)
from runner.spec.nearest import did_you_mean
from runner.storage.location import local_path

_READ_BACK = ("runner.keygen.", "runner.cdc.", "runner.scd.")  # compared both ways
_PART_TYPES = ("SIMPLE", "TIMESTAMP")  # CUSTOM's `field:TYPE` partition fields


def is_spec_file(given: str) -> bool:
    """A spec file, not a table: a table is a directory or an object store's URI."""
    return Path(given).is_file()


def table_of(given: str) -> str:
    """The table a SPEC|TABLE argument means: a spec's target, or the table given."""
    if not is_spec_file(given):
        return given
    from runner.spec import load_spec

    return load_spec(given, parse_transform=False).target.path


def spec_of(given: str) -> PipelineSpec:
    """The spec a SPEC|TABLE argument means: the spec file's, or the table's own."""
    if is_spec_file(given):
        from runner.pipeline.open_key import keyed_spec
        from runner.spec import load_spec

        return keyed_spec(load_spec(given))
    return spec_from_table(given)


def spec_from_table(table: str) -> PipelineSpec:
    """A spec of the table's own settings and a spec's defaults for the rest."""
    path = local_path(table)
    uri = os.path.abspath(path) if path is not None and "://" not in table else table
    snapshot = open_table(uri)
    if snapshot is None:
        hint = did_you_mean(path) if path is not None else ""
        raise UserError(
            f"{table} is neither a spec file nor a Delta table; give the pipeline's spec or "
            f"its target table{hint}"
        )
    stored = snapshot.configuration
    if stored.get("runner.format.version") is None:
        raise UserError(f"{table} is a Delta table not written by runner (no runner.* settings)")
    if stored.get("runner.keygen.class"):
        raise UserError(
            f"{table}'s keys come from the key generator class {stored['runner.keygen.class']}: "
            "give the spec that writes it (its class is found beside it)"
        )
    target = _target(uri, stored)
    differ = _not_read_back(target, stored)
    if differ:
        raise UserError(
            f"{table}'s settings are not all read back from the table alone "
            f"({', '.join(differ)}): give the spec that writes it"
        )
    name = Path(uri.rstrip("/")).name or "table"
    return PipelineSpec(name=name, sources=(), target=target, file=table)


def _not_read_back(target: Target, stored: Mapping[str, str]) -> list[str]:
    """The stored settings that `target` would not write as they are."""
    try:
        wanted = table_settings(target)
    except Exception:  # a generator these settings do not build: none read back
        return sorted(k for k in stored if k.startswith(_READ_BACK))
    keys = {k for k in (*wanted, *stored) if k not in LAYOUT_KEYS}
    compared = [k for k in keys if k in wanted or k.startswith(_READ_BACK)]
    return sorted(k for k in compared if wanted.get(k) != stored.get(k))


def _target(uri: str, stored: Mapping[str, str]) -> Target:
    cdc, scd = None, ScdSpec()
    if "runner.cdc.sequence_by" in stored:
        cdc = CdcSpec(sequence_by=stored["runner.cdc.sequence_by"])
        scd = ScdSpec(
            type=int(stored.get("runner.scd.type", "1")),
            start_column=stored.get("runner.scd.start_column", ScdSpec.start_column),
            end_column=stored.get("runner.scd.end_column", ScdSpec.end_column),
        )
    return Target(
        path=uri,
        key_generator=_key_generator(stored),
        index=IndexSpec(
            buckets=BucketLayout.from_configuration(stored).default,
            hash_fields=_fields(stored.get("runner.index.hash.fields")),
            type=stored.get("runner.index.type", "BUCKET_HASH_INDEX"),
        ),
        table_type="MERGE_ON_READ"
        if stored.get("runner.table.type") == "MERGE_ON_READ"
        else "COPY_ON_WRITE",
        cdc=cdc,
        scd=scd,
        change_data_feed=stored.get("delta.enableChangeDataFeed") == "true",
    )


def _key_generator(stored: Mapping[str, str]) -> KeyGenSpec:
    names, types = [], []
    for part in _fields(stored.get("runner.keygen.partition.fields")):
        name, _, kind = part.rpartition(":")
        names.append(name if kind in _PART_TYPES else part)
        types.append(kind if kind in _PART_TYPES else "")
    return KeyGenSpec(
        type=stored.get("runner.keygen.type", ""),
        record_key=_fields(stored.get("runner.keygen.record.key")),
        partition_fields=tuple(names),
        hive_style_partitioning=stored.get("runner.keygen.hive.style") == "true",
        url_encode=stored.get("runner.keygen.url.encode") == "true",
        complex_encoding="VALUE_ONLY"
        if stored.get("runner.keygen.complex.encoding") == "VALUE_ONLY"
        else "FIELD_PREFIXED",
        consistent_logical_timestamp=(
            stored.get("runner.keygen.consistent.logical.timestamp") == "true"
        ),
        partition_types=tuple(types) if any(types) else (),
        timestamp=_timestamp(stored),
    )


def _timestamp(stored: Mapping[str, str]) -> TimestampSpec | None:
    if "runner.keygen.timestamp.type" not in stored:
        return None
    return TimestampSpec(
        type=stored["runner.keygen.timestamp.type"],
        output_format=stored.get("runner.keygen.timestamp.output.format", ""),
        input_formats=tuple(json.loads(stored.get("runner.keygen.timestamp.input.formats", "[]"))),
        input_timezone=stored.get("runner.keygen.timestamp.input.timezone") or None,
        output_timezone=stored.get("runner.keygen.timestamp.output.timezone") or None,
        scalar_time_unit=stored.get("runner.keygen.timestamp.scalar.time.unit", "SECONDS"),
    )


def _fields(value: str | None) -> tuple[str, ...]:
    return tuple(f for f in (value or "").split(",") if f)
