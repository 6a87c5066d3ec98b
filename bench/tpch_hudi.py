"""Hudi's side of the TPC-H scenario (bench/tpch.py): the four steps in Hudi 1.1.1 tables
with the bucket index, the runner's table types, one bench/hudi_job.py process for
all of them (bench/hudi.py runs it; bench/hudi_env.py makes its side environment once).

Hudi's settings are bench/hudi_settings.py's with lineitem's: record key (l_orderkey,
l_linenumber) hashed into the same bucket count, no partitions, no precombine field (a
later write wins, as the runner's spec without one says). Each step's runs start from a
fresh copy of the step before's table; its seconds are job seconds in one warm session.
"""

from __future__ import annotations

import statistics

from bench.hudi import run_hudi_job
from bench.hudi_env import SideEnvironmentProblem, side_environment
from bench.hudi_settings import hudi_options
from bench.tpch import STEPS, Measured, Tpch, check
from bench.tpch_data import KEY, SPARK_SUMS, TpchSum

OPERATIONS = {"bulk_insert": "bulk_insert", "upsert": "upsert", "delete": "delete"}


def hudi_options_tpch(buckets: int, parallelism: int) -> dict[str, str]:
    options = hudi_options(buckets, parallelism)
    del options["hoodie.datasource.write.precombine.field"]
    key = ",".join(KEY)
    options.update(
        {
            "hoodie.table.name": "tpch_lineitem",
            "hoodie.datasource.write.recordkey.field": key,
            "hoodie.datasource.write.partitionpath.field": "",
            "hoodie.datasource.write.keygenerator.class": (
                "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
            ),
            "hoodie.bucket.index.hash.field": key,
        }
    )
    return options


def hudi_side(tpch: Tpch) -> dict[str, dict[str, Measured]]:
    """Hudi's measures by table type and step, each table checked after each step."""
    try:
        env = side_environment()
    except SideEnvironmentProblem as exc:
        raise SystemExit(f"tpch: Hudi's side environment cannot be made: {exc}") from exc
    spark, hudi = tpch.spark, tpch.work / "hudi"
    hudi.mkdir()
    parallelism = int(spark.conf.get("spark.sql.shuffle.partitions") or "8")
    steps = []
    for table_type in tpch.run.table_types:
        previous = None
        for step in STEPS:
            name = f"{table_type.lower()}_{step.name}"
            steps.append(
                {"op": OPERATIONS[step.operation], "name": name, "table_type": table_type,
                 "source": str(tpch.data.sources[step.name]), "table": str(hudi / name),
                 **({"base": str(previous)} if previous else {})}
            )  # fmt: skip
            previous = hudi / name
    plan = {
        "jar": str(env.jar),
        "events": str(tpch.work / "hudi_events"),
        "master": "local[2]",
        "conf": {"spark.sql.shuffle.partitions": str(parallelism)},
        "options": hudi_options_tpch(tpch.buckets, parallelism),
        "repeats": tpch.run.repeats,
        "warmup": tpch.run.warmup,
        "checksum": SPARK_SUMS,
        "steps": steps,
    }
    print(f"tpch: Hudi's side, pyspark {env.pyspark} (log: {tpch.work / 'hudi_job.log'})")
    answer = run_hudi_job(plan, env, tpch.work)["steps"]
    out: dict[str, dict[str, Measured]] = {}
    for table_type in tpch.run.table_types:
        out[table_type] = {}
        for step in STEPS:
            found = answer[f"{table_type.lower()}_{step.name}"]
            sums = TpchSum(*found["checksum"])
            check(f"Hudi {table_type}", step, sums, tpch.data.expected[step.name])
            written = found["bytes_data"] + found["bytes_meta"]
            out[table_type][step.name] = Measured(
                statistics.median(found["seconds"]), written, sums
            )
    return out
