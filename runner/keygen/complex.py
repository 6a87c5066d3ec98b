"""ComplexKeyGenerator: several key fields as `f:v` pairs, several partition fields.

A single record key field is written FIELD_PREFIXED (`id:5`), as Hudi 1.1+ does for new
tables and Hudi <= 0.14.0 did (docs/keygen.md explains the HUDI-7001 trap).
"""

from __future__ import annotations

from pyspark.sql.types import StructType

from runner.keygen.base import KeyColumns, KeyGenerator
from runner.keygen.common import complex_record_key, join_parts, partition_part


class ComplexKeyGenerator(KeyGenerator):
    def columns(self, schema: StructType) -> KeyColumns:
        key, error = complex_record_key(self.spec.record_key)
        spec = self.spec
        parts = [
            partition_part(f, spec.hive_style_partitioning, spec.url_encode)
            for f in spec.partition_fields
        ]
        return KeyColumns(key, join_parts(parts), error)
