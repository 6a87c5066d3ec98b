"""Adds the key columns to a batch: the one code path shared by `runner run` and `runner keys`."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from runner.fields import check_fields
from runner.index.bucket import layout_bucket_column
from runner.index.layout import BucketLayout
from runner.keygen import build_key_generator
from runner.spec.model import Target
from runner.table.meta import BUCKET, PARTITION_PATH, RECORD_KEY

KEY_ERROR = "__runner_key_error"

# A partition path must stay inside the table directory.
_ESCAPING_PATH_RE = r"(^/)|(^|/)\.\.?(/|$)"


def add_key_columns(df: DataFrame, target: Target, layout: BucketLayout | None = None) -> DataFrame:
    """`df` plus _record_key, _partition_path, _bucket and _key_error (null when keyable).

    A record with an error keeps null key columns, so it can never be written by mistake.
    `layout` is the table's bucket counts (default: the spec's count, for a new table).
    """
    generator = build_key_generator(target.key_generator)
    check_fields(df.schema, target.record_key, "record key")
    check_fields(df.schema, generator.input_fields(), "key generator")
    check_fields(df.schema, target.index.hash_fields, "index hash")
    cols = generator.columns(df.schema)
    escaping = cols.partition_path.rlike(_ESCAPING_PATH_RE)
    error = F.coalesce(
        cols.error,
        F.when(
            escaping,
            F.concat(
                F.lit("partition path '"),
                cols.partition_path,
                F.lit("' leaves the table directory; set key_generator.url_encode: true"),
            ),
        ),
    )
    layout = layout or BucketLayout(target.index.buckets)
    bucket = layout_bucket_column(
        target.index.hash_fields, layout.partitions, layout.default, cols.partition_path
    )
    keyed = F.col(KEY_ERROR).isNull()
    # one withColumns, not three withColumn: each call is a plan analysis through py4j
    return df.withColumn(KEY_ERROR, error).withColumns(
        {
            RECORD_KEY: F.when(keyed, cols.record_key),
            PARTITION_PATH: F.when(keyed, cols.partition_path),
            BUCKET: F.when(keyed, bucket),
        }
    )
