"""The bucket function: pmod(hash(string(f1), ..., string(fk)), N) with Spark's Murmur3 hash.

Spark's `hash` (Murmur3 x86_32, seed 42) is the function Spark's own bucketing uses: native
and code-generated. Because pmod(h, k*N) mod N == pmod(h, N), growing N to k*N splits bucket b
into b, b+N, ..., b+(k-1)N, which is what bucket expansion relies on; a bucket split alone
(runner/index/layout.py) is the same property at one bucket: b at modulus M into b and b+M.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from runner.fields import CAST_STRINGS, FieldStrings
from runner.index.layout import BucketLayout
from runner.index.string_hash import HASH_FUNCTION as HASH_FUNCTION  # its home: no pyspark


def layout_bucket_column(
    hash_fields: tuple[str, ...],
    layout: BucketLayout,
    partition_path: Column,
    strings: FieldStrings = CAST_STRINGS,
) -> Column:
    """The bucket of each row by the table's layout, as native expressions (no UDF): the
    row's partition path picks its count from a map literal, and in a partition with split
    buckets, one CASE branch per modulus of its split buckets tests whether pmod(h, modulus)
    is one of them (the leaves are disjoint: at most one branch matches). `strings` is the
    key generator's FieldStrings: the hash reads the text the record key holds."""
    hashed = F.hash(*[strings(f) for f in hash_fields])
    counts = layout.partitions
    if all(n == layout.default for n in counts.values()):  # no per-row lookup of the partition
        count = F.lit(layout.default)
    else:
        pairs = [x for pp, n in sorted(counts.items()) for x in (F.lit(pp), F.lit(n))]
        count = F.coalesce(F.create_map(*pairs)[partition_path], F.lit(layout.default))
    bucket = F.pmod(hashed, count)
    if layout.splits:
        by_partition = None
        for pp in sorted(layout.splits):
            is_pp, chosen = partition_path == F.lit(pp), _split_bucket(hashed, layout, pp, bucket)
            by_partition = (
                F.when(is_pp, chosen) if by_partition is None else by_partition.when(is_pp, chosen)
            )
        assert by_partition is not None
        bucket = by_partition.otherwise(bucket)
    return bucket.cast("int")


def _split_bucket(
    hashed: Column, layout: BucketLayout, partition_path: str, base: Column
) -> Column:
    """The bucket in a partition with split buckets: the split leaf at modulus M whose id
    is pmod(h, M), if any, else `base` (a bucket that never split)."""
    deeper = None
    for modulus, buckets in layout.moduli(partition_path).items():
        at = F.pmod(hashed, F.lit(modulus))
        test = at.isin(*buckets)
        deeper = F.when(test, at) if deeper is None else deeper.when(test, at)
    assert deeper is not None, "a partition listed in splits has split buckets"
    return deeper.otherwise(base)
