"""The change feed a change-feed scenario (bench/change_feed.py) left, read back and checked:
an update_preimage and an update_postimage per updated key, summing to the stored rows and
the batch's rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from bench.merge_on_read import delta_spark_problem
from bench.write import Checksum, checksum

UPDATE_TYPES = ("update_preimage", "update_postimage")
FEED = pa.schema([("id", pa.int64()), ("amount", pa.float64()), ("_change_type", pa.string())])


def read_feed(spark, table: Path, versions: tuple[int, int]) -> tuple[pa.Table, str]:
    """The change feed of `versions` (id, amount, _change_type) and the reader that read it:
    delta-spark readChangeFeed when the session has it, else delta-rs load_cdf."""
    if delta_spark_problem(spark) is not None:
        return read_feed_delta_rs(table, versions), "delta-rs load_cdf"
    frame = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", versions[0])
        .option("endingVersion", versions[1])
        .load(str(table))
    )
    return frame.select(*FEED.names).toArrow().cast(FEED), "delta-spark readChangeFeed"


def read_feed_delta_rs(table: Path, versions: tuple[int, int]) -> pa.Table:
    stream = DeltaTable(str(table)).load_cdf(
        starting_version=versions[0], ending_version=versions[1]
    )
    return pa.RecordBatchReader.from_stream(stream).read_all().select(FEED.names).cast(FEED)


def check_feed(spark, table: Path, versions: tuple[int, int], pre: Checksum, post: Checksum) -> str:
    """The feed of `versions` holds exactly an update_preimage and an update_postimage per
    updated key, summing to `pre` and `post` (empty ones: an empty feed); the reader."""
    feed, reader = read_feed(spark, table, versions)
    kinds = feed.group_by("_change_type").aggregate([("id", "count")])
    found = dict(zip(kinds["_change_type"].to_pylist(), kinds["id_count"].to_pylist(), strict=True))
    expected = {kind: pre.rows for kind in UPDATE_TYPES} if pre.rows else {}
    assert found == expected, f"{table.name}: change types {found}, expected {expected}"
    per_key = feed.group_by("id").aggregate(
        [("_change_type", "count"), ("_change_type", "count_distinct")]
    )
    odd = per_key.filter(
        (pc.field("_change_type_count") != 2) | (pc.field("_change_type_count_distinct") != 2)
    )
    assert odd.num_rows == 0, f"{table.name}: {odd.num_rows} keys without exactly 2 feed rows"
    for kind, want in zip(UPDATE_TYPES, (pre, post), strict=True):
        got = checksum(feed.filter(pc.field("_change_type") == kind))
        assert got == want, f"{table.name}: {kind} rows {got}, expected {want}"
    return reader
