"""The bucket function: pmod(hash(string(f1), ..., string(fk)), N) with Spark's Murmur3 hash.

Spark's `hash` (Murmur3 x86_32, seed 42) is the function Spark's own bucketing uses: native
and code-generated. Because pmod(h, k*N) mod N == pmod(h, N), growing N to k*N splits bucket b
into b, b+N, ..., b+(k-1)N, which is what bucket expansion relies on.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column
from pyspark.sql import functions as F

from runner.fields import field_string
from runner.index.string_hash import HASH_FUNCTION as HASH_FUNCTION  # its home: no pyspark


def bucket_column(hash_fields: tuple[str, ...], buckets: int) -> Column:
    return F.pmod(F.hash(*[field_string(f) for f in hash_fields]), F.lit(buckets)).cast("int")


def layout_bucket_column(
    hash_fields: tuple[str, ...], counts: Mapping[str, int], default: int, partition_path: Column
) -> Column:
    """The bucket of each row when partitions have their own counts: the row's partition
    path picks its count from a map literal (one native lookup, no UDF)."""
    if all(n == default for n in counts.values()):  # no per-row lookup of the partition
        return bucket_column(hash_fields, default)
    pairs = [x for pp, n in sorted(counts.items()) for x in (F.lit(pp), F.lit(n))]
    count = F.coalesce(F.create_map(*pairs)[partition_path], F.lit(default))
    return F.pmod(F.hash(*[field_string(f) for f in hash_fields]), count).cast("int")
