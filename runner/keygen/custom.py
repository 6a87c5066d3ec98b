"""CustomKeyGenerator: partition parts `field:SIMPLE` or `field:TIMESTAMP`, joined by '/'.

Each part is built as its own single-field generator would build it (hive prefix and
url-encoding per part); every TIMESTAMP part shares the one set of timestamp settings, as in
Hudi. One record key field is taken as it is, several are written as `f:v` pairs.
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from runner.keygen.base import KeyColumns, KeyGenerator
from runner.keygen.common import (
    complex_record_key,
    join_parts,
    partition_part,
    simple_record_key,
)
from runner.keygen.timestamp import TimestampPart, timestamp_partition_part


class CustomKeyGenerator(KeyGenerator):
    def columns(self, schema: StructType) -> KeyColumns:
        spec, fields, strings = self.spec, self.spec.record_key, self.strings(schema)
        key, key_error = (
            simple_record_key(fields[0], strings)
            if len(fields) == 1
            else complex_record_key(fields, strings)
        )
        parts: list[Column] = []
        errors: list[Column] = [key_error]
        for name, part_type in zip(spec.partition_fields, spec.partition_types, strict=True):
            if part_type == "TIMESTAMP":
                assert spec.timestamp is not None, "validated: a TIMESTAMP part has settings"
                path, error = timestamp_partition_part(
                    TimestampPart(name, spec.timestamp, spec.consistent_logical_timestamp),
                    schema,
                    spec.hive_style_partitioning,
                    spec.url_encode,
                )
                parts.append(path)
                errors.append(error)
            else:
                parts.append(
                    partition_part(name, spec.hive_style_partitioning, spec.url_encode, strings)
                )
        return KeyColumns(key, join_parts(parts), reduce(lambda a, b: F.coalesce(a, b), errors))
