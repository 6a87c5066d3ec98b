"""SimpleKeyGenerator: one record key field, one partition field, both taken as they are."""

from __future__ import annotations

from pyspark.sql.types import StructType

from runner.keygen.base import KeyColumns, KeyGenerator
from runner.keygen.common import partition_part, simple_record_key


class SimpleKeyGenerator(KeyGenerator):
    def columns(self, schema: StructType) -> KeyColumns:
        strings = self.strings(schema)
        key, error = simple_record_key(self.spec.record_key[0], strings)
        path = partition_part(
            self.spec.partition_fields[0],
            self.spec.hive_style_partitioning,
            self.spec.url_encode,
            strings,
        )
        return KeyColumns(key, path, error)
