"""SCD type 2 from a change feed: a batch of updates to 1 % of the keys of a history table.

    python -m bench --only scd2 [--rows 1000000] [--repeats 3] [--buckets 16]

The runner (target.cdc + target.scd type 2, copy-on-write and merge-on-read) beside Spark
SQL's usual SCD2 on a plain parquet table partitioned like it: read the whole history, join
it with the batch to close the current versions of the batch's keys, add the new versions,
and overwrite the table (into a new directory, as Spark cannot overwrite what it reads).
Every timed run starts from a fresh copy of its base table (copied untimed); each result is
checked (versions, current versions, closed versions) before it is reported. Runner times
are job seconds (the run's stage seconds without "start"); Spark's is the wall time of its
read, join and write. Bytes written: the new data files (and deletion vectors).
"""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import yaml

from bench.scale import Scale
from bench.write import CITIES, dir_bytes, fresh_copy, timed
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.helpers import CHANGE_FEED_SCHEMA, read_table  # read_table: DVs applied

SPARK_SQL = "Spark SQL join + overwrite (wall)"
HISTORY = ["valid_from", "valid_to", "is_current"]


def _events(ids: np.ndarray, lsn: int, op: str) -> pa.Table:
    return pa.table(
        {
            "id": ids,
            "city": pa.array(np.array(CITIES, dtype=object)[ids % len(CITIES)], pa.string()),
            "name": pc.binary_join_element_wise(
                f"n{lsn}-", pc.cast(pa.array(ids), pa.string()), ""
            ),
            "amount": (ids % 1000).astype(np.float64) + lsn,
            "lsn": np.full(len(ids), lsn, dtype=np.int64),
            "op": pa.array([op] * len(ids), pa.string()),
        },
        schema=CHANGE_FEED_SCHEMA,
    )


def _spec(work: Path, name: str, source: Path, table: Path, buckets: int, table_type: str):
    spec = {
        "name": name,
        "sources": [{"name": "feed", "format": "parquet", "path": str(source)}],
        "target": {
            "path": str(table),
            "operation": "upsert",
            "table_type": table_type,
            "record_key": "id",
            "key_generator": {"partition_fields": "city"},
            "cdc": {"sequence_by": "lsn", "operation_column": "op"},
            "scd": {"type": 2},
            "index": {"buckets": buckets},
        },
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return load_spec(path)


def _check(rows: pa.Table, keys: int, changed: int, what: str) -> None:
    current = pc.sum(rows.column("is_current")).as_py()
    closed = rows.num_rows - current
    if (rows.num_rows, current, closed) != (keys + changed, keys, changed):
        raise AssertionError(
            f"{what}: {rows.num_rows} versions, {current} current, {closed} closed; expected "
            f"{keys + changed}, {keys}, {changed}"
        )


def run_scd2_benchmarks(spark, work: Path, scale: Scale):
    work.mkdir(parents=True, exist_ok=True)
    rows = scale.rows
    rng = np.random.default_rng(7)
    ids = np.arange(rows, dtype=np.int64)
    changed = np.sort(rng.choice(ids, size=max(1, rows // 100), replace=False))
    load, batch = work / "load", work / "batch"
    for directory, table in ((load, _events(ids, 1, "c")), (batch, _events(changed, 2, "u"))):
        directory.mkdir()
        pq.write_table(table, directory / "part-0.parquet")

    results = []
    peer_base = work / "spark-base"
    for table_type in ("COPY_ON_WRITE", "MERGE_ON_READ"):
        base = work / f"base-{table_type}"
        run_pipeline(_spec(work, "load", load, base, scale.buckets, table_type), spark=spark)
        if not peer_base.exists():  # the same history as plain parquet, for Spark SQL
            _plain_copy(base, peer_base)
        results.append(_scd2_batch(spark, work, scale, (base, batch, table_type), len(changed)))

    out = work / "spark-out"
    peer_times = timed(
        scale.repeats,
        lambda: shutil.rmtree(out, ignore_errors=True),
        lambda: _spark_scd2(spark, peer_base, batch, out),
        warmup=scale.warmup,
    )
    _check(ds.dataset(out, partitioning="hive").to_table(), rows, len(changed), "Spark SQL")
    for result in results:
        result["peers"][SPARK_SQL] = statistics.median(peer_times)
        result["bytes_written"][SPARK_SQL] = dir_bytes(out)
    return results


def _plain_copy(base: Path, peer_base: Path) -> None:
    """The runner table's history as plain parquet partitioned by city, for Spark SQL."""
    columns = ["id", "city", "name", "amount", "lsn", *HISTORY]
    plain = pa.Table.from_pandas(read_table(base)[columns], preserve_index=False)
    ds.write_dataset(
        plain,
        peer_base,
        format="parquet",
        partitioning=ds.partitioning(pa.schema([("city", pa.string())]), flavor="hive"),
    )


def _scd2_batch(
    spark, work: Path, scale: Scale, inputs: tuple[Path, Path, str], changed: int
) -> dict:
    """The SCD2 batch of `changed` keys into a fresh copy of the loaded table, timed; `inputs`:
    the loaded table, the batch's directory, the table type."""
    base, batch, table_type = inputs
    table = work / f"table-{table_type}"
    spec = _spec(work, f"scd2-{table_type}", batch, table, scale.buckets, table_type)
    summaries: list = []
    times = timed(
        scale.repeats,
        lambda: fresh_copy(base, table),
        lambda: run_pipeline(spec, spark=spark),
        summaries,
        scale.warmup,
    )
    _check(pa.Table.from_pandas(read_table(table)), scale.rows, changed, table_type)
    job = [sum(v for k, v in s.stage_seconds.items() if k != "start") for s in summaries]
    return {
        "scenario": f"SCD2 batch of {changed:,} keys into {scale.rows:,} ({table_type})",
        "runner_s": statistics.median(job),
        "peers": {},
        "bytes_written": {"runner": summaries[-1].bytes_written},
        "wall_s": {"runner": statistics.median(times)},
        "runner_stages_median": {
            k: statistics.median(s.stage_seconds.get(k, 0) for s in summaries)
            for k in summaries[-1].stage_seconds
        },
    }


def _spark_scd2(spark, history: Path, batch: Path, out: Path) -> None:
    """SCD2 as it is usually written in Spark SQL: the whole table joined with the batch,
    the matched current versions closed, the new versions added, all written again."""
    spark.read.parquet(str(history)).createOrReplaceTempView("history")
    spark.read.parquet(str(batch)).createOrReplaceTempView("changes")
    spark.sql(
        """
        SELECT h.id, h.name, h.amount, h.lsn, h.valid_from,
               CASE WHEN h.is_current AND c.id IS NOT NULL THEN c.lsn ELSE h.valid_to END
                 AS valid_to,
               h.is_current AND c.id IS NULL AS is_current, h.city
        FROM history h LEFT JOIN changes c ON h.id = c.id AND h.is_current
        UNION ALL
        SELECT id, name, amount, lsn, lsn AS valid_from, CAST(NULL AS BIGINT) AS valid_to,
               true AS is_current, city
        FROM changes
        """
    ).write.partitionBy("city").mode("overwrite").parquet(str(out))
