"""Key generator throughput: Spark column expressions vs a plain Python UDF of the same generator.

    .venv/bin/python -m bench.keygen_throughput [--rows 200000] [--repeats 3]

Each generator keys the same cached rows both ways; the work is forced with Spark's `noop`
sink. Before timing, both versions' outputs are compared on every row, so the table only
reports generators that agree. Prints rows per second (medians over repeats) as markdown.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from runner.jvm.session import spark_session
from runner.keygen import build_key_generator
from runner.spec.keygen_settings import resolve_key_generator
from runner.spec.model import KeyGenSpec, SparkSettings

NULL, EMPTY, DEFAULT = "__null__", "__empty__", "__HIVE_DEFAULT_PARTITION__"
PARIS = ZoneInfo("Europe/Paris")
Row = tuple[str | None, ...]


def _spec(keygen: dict, record_key: str) -> KeyGenSpec:
    problems: list[str] = []
    spec = resolve_key_generator(
        {"record_key": record_key, "key_generator": keygen}, lambda p, m: problems.append(m)
    )
    assert spec is not None, problems
    return spec


def _simple_key(v: str | None) -> str | None:
    return v if v else None


def _complex_key(names: list[str], values: Row) -> str | None:
    if all(not v for v in values):
        return None
    parts = [
        f"{n}:{NULL if v is None else (v or EMPTY)}" for n, v in zip(names, values, strict=True)
    ]
    return ",".join(parts)


def _part(name: str, v: str | None) -> str:
    return f"{name}={v or DEFAULT}"


def _ms_path(ms: int | None) -> str:
    instant = datetime.fromtimestamp((1 if ms is None else ms) / 1000, tz=UTC)
    return instant.astimezone(PARIS).strftime("%Y/%m/%d/%H")


def _string_path(text: str | None) -> str | None:
    for fmt in ("%Y-%m-%dT%H:%M:%S%z", "%Y%m%d"):
        try:
            parsed = datetime.strptime(text or "", fmt)
        except ValueError:
            continue
        aware = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        return aware.astimezone(UTC).strftime("%Y%m%d")
    return None


# name -> (structured key_generator, record_key, python version over (id, city, ms, day, ts))
CASES: dict[str, tuple[dict, str, Callable[..., tuple[str | None, str | None]]]] = {
    "SIMPLE": (
        {"type": "SIMPLE", "partition_fields": "city", "hive_style_partitioning": True},
        "id",
        lambda i, c, ms, d, t: (_simple_key(i), _part("city", c)),
    ),
    "COMPLEX": (
        {"type": "COMPLEX", "partition_fields": "city,day", "hive_style_partitioning": True},
        "id,city",
        lambda i, c, ms, d, t: (
            _complex_key(["id", "city"], (i, c)),
            f"{_part('city', c)}/{_part('day', d)}",
        ),
    ),
    "NON_PARTITIONED": ({"type": "NON_PARTITIONED"}, "id", lambda i, c, ms, d, t: (i, "")),
    "GLOBAL_DELETE": (
        {"type": "GLOBAL_DELETE"},
        "id",
        lambda i, c, ms, d, t: (_complex_key(["id"], (i,)), ""),
    ),
    "TIMESTAMP epoch ms": (
        {
            "type": "TIMESTAMP",
            "partition_fields": "ms",
            "timestamp": {
                "type": "EPOCHMILLISECONDS",
                "output_format": "yyyy/MM/dd/HH",
                "timezone": "Europe/Paris",
            },
        },
        "id",
        lambda i, c, ms, d, t: (i, _ms_path(ms)),
    ),
    "TIMESTAMP 2 input formats": (
        {
            "type": "TIMESTAMP",
            "partition_fields": "ts",
            "timestamp": {
                "type": "DATE_STRING",
                "input_formats": ["yyyy-MM-dd'T'HH:mm:ssZ", "yyyyMMdd"],
                "output_format": "yyyyMMdd",
                "output_timezone": "UTC",
            },
        },
        "id",
        lambda i, c, ms, d, t: (i, _string_path(t)),
    ),
    "CUSTOM simple + timestamp": (
        {
            "type": "CUSTOM",
            "partition_fields": ["city:SIMPLE", "ms:TIMESTAMP"],
            "timestamp": {
                "type": "EPOCHMILLISECONDS",
                "output_format": "yyyy/MM/dd/HH",
                "timezone": "Europe/Paris",
            },
        },
        "id",
        lambda i, c, ms, d, t: (i, f"{c or DEFAULT}/{_ms_path(ms)}"),
    ),
}


def rows(spark: SparkSession, n: int) -> DataFrame:
    """n seeded rows: ids, a few cities (some null/empty), epoch ms, days, ISO strings."""
    r = F.col("id")
    cities = F.array(*[F.lit(c) for c in ("paris", "lyon", "a/b c", "")])
    first = F.lit("2020-01-01").cast("date")
    return (
        spark.range(n)
        .select(
            r.cast("string").alias("id"),
            F.element_at(cities, (r % 4 + 1).cast("int")).alias("city"),
            (F.lit(1_578_283_932_000) + r * 7_919_000).alias("ms"),
            F.date_format(F.date_add(first, (r % 400).cast("int")), "yyyy-MM-dd").alias("day"),
            F.when(r % 2 == 0, F.lit("2020-04-01T13:01:33-05:00"))
            .otherwise(F.lit("20200401"))
            .alias("ts"),
        )
        .withColumn("city", F.when(r % 97 == 0, F.lit(None)).otherwise(F.col("city")))
        .cache()
    )


def spark_columns(df: DataFrame, spec: KeyGenSpec) -> list[Column]:
    cols = build_key_generator(spec).columns(df.schema)
    return [
        F.when(cols.error.isNull(), cols.record_key).alias("k"),
        F.when(cols.error.isNull(), cols.partition_path).alias("p"),
    ]


def udf_columns(fn: Callable[..., tuple[str | None, str | None]]) -> list[Column]:
    out = StructType([StructField("k", StringType()), StructField("p", StringType())])
    keyed = F.udf(fn, out)("id", "city", "ms", "day", "ts")
    return [keyed["k"].alias("k"), keyed["p"].alias("p")]


def seconds(df: DataFrame, cols: list[Column], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        df.select(*cols).write.format("noop").mode("overwrite").save()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spark = spark_session(
        SparkSettings(master="local[2]", conf={"spark.ui.enabled": "false"}),
        "keygen-bench",
    )
    df = rows(spark, args.rows)
    df.count()
    print(f"{args.rows} rows, local[2], medians of {args.repeats}\n")
    print("| generator | Spark expressions (rows/s) | Python UDF (rows/s) | speed-up |")
    print("|---|---|---|---|")
    for name, (keygen, record_key, fn) in CASES.items():
        expr_cols = spark_columns(df, _spec(keygen, record_key))
        py_cols = udf_columns(fn)
        mismatches = (
            df.select(*[c.alias(f"e{i}") for i, c in enumerate(expr_cols)],
                      *[c.alias(f"u{i}") for i, c in enumerate(py_cols)])
            .where(~F.col("e0").eqNullSafe(F.col("u0")) | ~F.col("e1").eqNullSafe(F.col("u1")))
            .limit(3)
            .collect()
        )  # fmt: skip
        assert not mismatches, f"{name}: expressions and UDF disagree: {mismatches}"
        expr_s = seconds(df, expr_cols, args.repeats)
        udf_s = seconds(df, py_cols, args.repeats)
        print(
            f"| {name} | {args.rows / expr_s:,.0f} | {args.rows / udf_s:,.0f} | "
            f"{udf_s / expr_s:.1f}x |"
        )
    spark.stop()


if __name__ == "__main__":
    main()
