"""GlobalDeleteKeyGenerator: no partition path; the key is always `f:v` pairs, even for one
field (unlike NON_PARTITIONED), as Hudi's GlobalAvroDeleteKeyGenerator writes it."""

from __future__ import annotations

from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from runner.keygen.base import KeyColumns, KeyGenerator
from runner.keygen.common import complex_record_key


class GlobalDeleteKeyGenerator(KeyGenerator):
    def columns(self, schema: StructType) -> KeyColumns:
        key, error = complex_record_key(self.spec.record_key, self.strings(schema))
        return KeyColumns(key, F.lit(""), error, unpartitioned=True)
