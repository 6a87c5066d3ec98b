"""Adds the key columns to a batch: the one code path shared by `runner run` and `runner keys`."""

from __future__ import annotations

from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from runner.delta.directory import DELTA_LOG, RESERVED
from runner.fields import check_fields
from runner.index.bucket import layout_bucket_column
from runner.index.layout import BucketLayout
from runner.keygen import build_key_generator
from runner.spec.model import Target
from runner.storage.meta_columns import BUCKET, PARTITION_PATH, RECORD_KEY

KEY_ERROR = "__runner_key_error"

MAX_NAME_BYTES = 255  # one directory name, on the usual file systems (ext4, xfs)


def add_key_columns(df: DataFrame, target: Target, layout: BucketLayout | None = None) -> DataFrame:
    """`df` plus _record_key, _partition_path, _bucket and _key_error (null when keyable).

    A record with an error keeps null key columns, so it can never be written by mistake.
    `layout` is the table's bucket layout, its counts and split buckets (default: the spec's
    count, for a new table).
    """
    generator = build_key_generator(target.key_generator)
    check_fields(df.schema, target.record_key, "record key")
    check_fields(df.schema, generator.input_fields(), "key generator")
    check_fields(df.schema, target.index.hash_fields, "index hash")
    cols = generator.columns(df.schema)
    error = cols.error
    if not cols.unpartitioned:
        error = F.coalesce(cols.error, unsafe_partition_path(cols.partition_path))
    layout = layout or BucketLayout(target.index.buckets)
    strings = generator.strings(df.schema)  # the hash reads the key's text of each field
    bucket = layout_bucket_column(target.index.hash_fields, layout, cols.partition_path, strings)
    keyed = F.col(KEY_ERROR).isNull()
    # one withColumns, not three withColumn: each call is a plan analysis through py4j
    return df.withColumn(KEY_ERROR, error).withColumns(
        {
            RECORD_KEY: F.when(keyed, cols.record_key),
            PARTITION_PATH: F.when(keyed, cols.partition_path),
            BUCKET: F.when(keyed, bucket),
        }
    )


def unsafe_partition_path(path: Column) -> Column:
    """Why a partition path cannot be a directory of the table, else null.

    A path that a file system or an object store would spell another way (`a//b`, `a/b/`),
    that leaves the table (`..`, `/a`), that lands in its log or the runner's own
    directories, or that no file system can hold (a NUL, a name over 255 bytes) never
    reaches a file name: the record is refused with the reason. Every path the log holds is
    then the one a listing of the directory gives back, which `runner clean` relies on.
    """
    # Plain substring tests pick the few paths worth a closer look (a regular expression
    # per row cost more than the rest of the key columns); only those are split into names.
    # The tests that need a '/' or a '_' (every reserved name starts with one) run only on
    # paths that have one: a path of one plain value costs three scans, not nine.
    assert all(name.startswith("_") for name in (DELTA_LOG, *RESERVED))
    slashed = path.startswith("/") | path.endswith("/") | path.contains("//") | path.contains("/.")
    reserved = path.contains(DELTA_LOG) | reduce(
        lambda a, b: a | b, [path.startswith(name) for name in RESERVED]
    )
    suspicious = (
        (path.contains("/") & slashed)
        | path.startswith(".")
        | (path.contains("_") & reserved)
        | path.contains("\x00")
        | (F.octet_length(path) > MAX_NAME_BYTES)
    )
    segments = F.split(path, "/")
    escape = "set key_generator.url_encode: true to escape '/' in values"
    rename = "change the value in the transform or set key_generator.hive_style_partitioning"
    rules = [
        (path.startswith("/"), f"starts with '/', which leaves the table directory; {escape}"),
        (
            path.contains("//") | path.endswith("/"),
            f"has an empty directory name (a value starts or ends with '/'); {escape}",
        ),
        (
            F.exists(segments, lambda s: s.isin(".", "..")),
            f"has a '.' or '..' directory, which leaves the table directory; {rename}",
        ),
        (
            F.exists(segments, lambda s: s == F.lit(DELTA_LOG)) | segments[0].isin(*RESERVED),
            f"names a directory the table reserves ({DELTA_LOG}, or {', '.join(RESERVED)} "
            f"at its root); {rename}",
        ),
        (path.contains("\x00"), f"holds a NUL character; {escape}"),
        (
            F.exists(segments, lambda s: F.octet_length(s) > MAX_NAME_BYTES),
            f"has a directory name over {MAX_NAME_BYTES} bytes, more than a file system "
            "takes; shorten the value in the transform",
        ),
    ]
    reason = F.when(rules[0][0], F.lit(rules[0][1]))
    for broken, why in rules[1:]:
        reason = reason.when(broken, F.lit(why))
    return F.when(suspicious, F.concat(F.lit("partition path '"), path, F.lit("' "), reason))
