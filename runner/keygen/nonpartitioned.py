"""NonpartitionedKeyGenerator: empty partition path; one key field bare, several as `f:v`."""

from __future__ import annotations

from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from runner.keygen.base import KeyColumns, KeyGenerator
from runner.keygen.common import complex_record_key, simple_record_key


class NonPartitionedKeyGenerator(KeyGenerator):
    def columns(self, schema: StructType) -> KeyColumns:
        fields, strings = self.spec.record_key, self.strings(schema)
        if len(fields) == 1:
            key, error = simple_record_key(fields[0], strings)
        else:
            key, error = complex_record_key(fields, strings)
        return KeyColumns(key, F.lit(""), error, unpartitioned=True)
