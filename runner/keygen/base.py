"""The key generator interface: Spark column expressions for record key and partition path.

A generator never runs Python per row. It returns three columns: the record key (string), the
partition path (string) and an error (string, null when the record is fine). A record with an
error is never written under a made-up key; the run reports it with its reason.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql.types import StructType

from runner.fields import FieldStrings
from runner.hudi.keygen_types import KEY_GENERATORS
from runner.spec.model import KeyGenSpec


@dataclass(frozen=True)
class KeyColumns:
    record_key: Column
    partition_path: Column
    error: Column
    # every record's partition path is the table's root (""): there is no directory name
    # to check per record, and building that check's expression costs a warm run 0.1 s
    unpartitioned: bool = False


class KeyGenerator(ABC):
    """One Hudi key generator. Subclasses are registered by spec type in runner.keygen."""

    def __init__(self, spec: KeyGenSpec):
        self.spec = spec

    def input_fields(self) -> tuple[str, ...]:
        """Every input field this generator reads (checked against the input schema first)."""
        return (*self.spec.record_key, *self.spec.partition_fields)

    @abstractmethod
    def columns(self, schema: StructType) -> KeyColumns:
        """Column expressions over a DataFrame with this schema."""

    def strings(self, schema: StructType) -> FieldStrings:
        """How this generator's field values become text, over a DataFrame with `schema`
        (the bucket hash reads the same text: runner.pipeline.key_columns)."""
        return FieldStrings(schema, self.spec.consistent_logical_timestamp)

    def settings(self) -> dict[str, str]:
        """Every setting that changes record keys or partition paths, as stable strings.

        Stored in the table's configuration and compared on later runs. A user class that
        reads settings of its own should add them here.
        """
        spec = self.spec
        parts = (
            [f"{n}:{t}" for n, t in zip(spec.partition_fields, spec.partition_types, strict=True)]
            if spec.partition_types
            else list(spec.partition_fields)
        )
        out = {
            "runner.keygen.type": spec.type,
            "runner.keygen.class": spec.class_path or "",
            "runner.keygen.record.key": ",".join(spec.record_key),
            "runner.keygen.partition.fields": ",".join(parts),
            "runner.keygen.hive.style": str(spec.hive_style_partitioning).lower(),
            "runner.keygen.url.encode": str(spec.url_encode).lower(),
            "runner.keygen.consistent.logical.timestamp": str(
                spec.consistent_logical_timestamp
            ).lower(),
        }
        described = KEY_GENERATORS.get(spec.type)
        if described and described.field_prefixed_keys:
            out["runner.keygen.complex.encoding"] = spec.complex_encoding
        ts = spec.timestamp
        if ts is not None:
            out.update(
                {
                    "runner.keygen.timestamp.type": ts.type,
                    "runner.keygen.timestamp.scalar.time.unit": ts.scalar_time_unit,
                    # JSON: formats may contain the ',' that would otherwise separate them
                    "runner.keygen.timestamp.input.formats": json.dumps(list(ts.input_formats)),
                    "runner.keygen.timestamp.input.timezone": ts.input_timezone or "",
                    "runner.keygen.timestamp.output.format": ts.output_format,
                    "runner.keygen.timestamp.output.timezone": ts.output_timezone or "",
                }
            )
        return out
