"""ComplexKeyGenerator: several key fields as `f:v` pairs, several partition fields.

A single record key field is written FIELD_PREFIXED (`id:5`), as Hudi 1.1+ does for new
tables and Hudi <= 0.14.0 did, or VALUE_ONLY (`5`, with the single-field rules: null or
empty is an error), as Hudi 0.14.1-1.0.2 did (docs/keygen.md explains the HUDI-7001 trap).
"""

from __future__ import annotations

from pyspark.sql.types import StructType

from runner.keygen.base import KeyColumns, KeyGenerator
from runner.keygen.common import (
    complex_record_key,
    join_parts,
    partition_part,
    simple_record_key,
)


class ComplexKeyGenerator(KeyGenerator):
    def columns(self, schema: StructType) -> KeyColumns:
        spec, strings = self.spec, self.strings(schema)
        if len(spec.record_key) == 1 and spec.complex_encoding == "VALUE_ONLY":
            key, error = simple_record_key(spec.record_key[0], strings)
        else:
            key, error = complex_record_key(spec.record_key, strings)
        # no partition field: the path is "", as Hudi writes it (a non-partitioned table)
        parts = [
            partition_part(f, spec.hive_style_partitioning, spec.url_encode, strings)
            for f in spec.partition_fields
        ]
        return KeyColumns(key, join_parts(parts), error)
