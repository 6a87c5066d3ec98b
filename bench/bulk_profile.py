"""Where a bulk_insert's write time goes: the same rows through growing prefixes of its plan.

    python -m bench.bulk_profile [--rows 20000000]

Each step runs the runner's own plan up to one point and ends in Spark's `noop` sink or in a
`mapInArrow` that only counts its rows; the figure is the wall time of the second of two runs
(the first warms up). Spark's own `partitionBy().parquet()` of the same rows is the scale.
The full run (plan, keys, write, commit) is `python -m bench --only write`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa


def _seconds(run: Callable[[], object]) -> float:
    run()
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _with_settings(spark, settings: dict[str, str], run: Callable[[], object]) -> object:
    from runner.jvm.session import session_settings

    with session_settings(spark, settings):
        return run()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bulk_profile", description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--buckets", type=int, default=16)
    args = parser.parse_args()

    from bench.write import spec_file, write_source
    from runner import logs
    from runner.jvm.session import spark_session
    from runner.spec.model import SparkSettings

    logs.configure("warning")
    settings = SparkSettings(master="local[2]", conf={"spark.ui.enabled": "false"})
    spark = spark_session(settings, "bulk-profile")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_source(work / "src", args.rows, seed=1)
        spec = spec_file(work / "bulk", "bulk_insert", work / "src", work / "t", args.buckets)
        print(f"| step ({args.rows:,} rows, local[2]) | s |\n|---|---|")
        for name, run in _steps(spark, spec, work):
            print(f"| {name} | {_seconds(run):.2f} |", flush=True)
    spark.stop()


def _steps(spark, spec, work: Path) -> list[tuple[str, Callable[[], object]]]:
    """The bulk load's steps, each a Spark job that stops after it."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from runner.pipeline.batch import plan_table_schema
    from runner.pipeline.key_columns import add_key_columns
    from runner.pipeline.quality import add_verdicts
    from runner.pipeline.winners import bulk_keys, bulk_rows, bulk_verdict
    from runner.pipeline.write_stage import bulk_job_settings
    from runner.storage.meta_columns import BUCKET, PARTITION_PATH, RECORD_KEY

    source = spark.read.parquet(str(work / "src"))
    judged = add_verdicts(add_key_columns(source, spec.target), spec)
    plan = plan_table_schema(source, spec.target, None)
    rows = bulk_rows(judged, plan)
    unsorted = judged.select(RECORD_KEY, PARTITION_PATH, BUCKET, *plan.data_columns, bulk_verdict())

    def noop(frame):
        return lambda: frame.write.format("noop").mode("overwrite").save()

    def to_python(frame):
        return lambda: frame.mapInArrow(_count, from_arrow_schema(COUNTED)).collect()

    def runner_settings(run, keys_only=True):
        settings = bulk_job_settings(judged, keys_only)
        return lambda: _with_settings(spark, settings, run)

    def plain(directory):
        return lambda: source.write.mode("overwrite").partitionBy("city").parquet(directory)

    keys = to_python(bulk_keys(judged))
    return [
        ("read the parquet source", noop(source)),
        ("+ key columns and verdicts", noop(judged)),
        ("+ the local sort by (partition path, bucket) (the rows path)", noop(rows)),
        ("+ the Arrow hand-off of whole rows (the rows path)", to_python(rows)),
        ("  (the hand-off without the sort)", to_python(unsorted)),
        ("the key columns, verdicts and row places only, to Python: Spark's settings", keys),
        ("the same with the runner's bulk job settings", runner_settings(keys)),
        ("Spark partitionBy().parquet(), for scale", plain(str(work / "plain"))),
        (
            "the same with the runner's split of the input",
            runner_settings(plain(str(work / "plain")), False),
        ),
    ]


COUNTED = pa.schema([("rows", pa.int64())])


def _count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield pa.RecordBatch.from_pylist([{"rows": sum(b.num_rows for b in batches)}], schema=COUNTED)


if __name__ == "__main__":
    main()
