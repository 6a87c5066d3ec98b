"""Hudi's settings in the Hudi bench (bench/hudi.py): the runner spec's settings by Hudi's
names, and those of its compaction procedure."""

from __future__ import annotations

# `CALL run_compaction`'s options: compact now, whatever the delta commits since the last
# (the runner's compaction folds every bucket with more than one file); the file settings
# of hudi_options, which a procedure's write client does not otherwise get
COMPACTION = {
    "hoodie.compact.inline.max.delta.commits": "1",
    "hoodie.parquet.compression.codec": "zstd",
    "hoodie.parquet.bloom.filter.enabled": "false",
}


def hudi_options(buckets: int, parallelism: int) -> dict[str, str]:
    """Hudi's write options, the runner spec's settings by Hudi's names (bench.write.spec_file:
    record key id, partition field city, precombine field ts, `buckets` buckets)."""
    return {
        "hoodie.table.name": "bench_hudi",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.partitionpath.field": "city",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.hive_style_partitioning": "false",  # the runner's default
        "hoodie.index.type": "BUCKET",
        "hoodie.index.bucket.engine": "SIMPLE",
        "hoodie.bucket.index.num.buckets": str(buckets),
        "hoodie.bucket.index.hash.field": "id",
        # the runner's shuffle: spark.sql.shuffle.partitions of its session
        "hoodie.bulkinsert.shuffle.parallelism": str(parallelism),
        "hoodie.upsert.shuffle.parallelism": str(parallelism),
        "hoodie.insert.shuffle.parallelism": str(parallelism),
        "hoodie.parquet.compression.codec": "zstd",  # the runner's codec
        # a ~430 KB bloom filter in every file serves the BLOOM index only: Hudi's docs say
        # to turn it off with other indexes (1.1.1's bulk_insert row writer writes it anyway)
        "hoodie.parquet.bloom.filter.enabled": "false",
        # Hudi's default, said: a write never compacts, compaction is a scenario of its own
        "hoodie.compact.inline": "false",
    }
