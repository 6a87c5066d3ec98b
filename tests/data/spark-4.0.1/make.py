"""Makes this directory's table with the runner of the interpreter that runs it: a load,
then an upsert (deletion vectors). Its inputs are made here too, and the tests' own upsert.

Made with pyspark 4.0.1 by the runner of commit 1aba17f (the last on that line), run by a
venv of that commit from outside the checkout, so that the venv's runner is the one imported:
`cd /tmp && RUNNER_JAVA_CDS=0 VENV/bin/python CHECKOUT/tests/data/spark-4.0.1/make.py`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
CITIES = ("ams", "bcn", "são paulo", "new york/ny")
AMOUNTS = (0.1, -0.0, 1e-7, 123456789.125, 1e21, 3.0, -2.5e-5, 7.0e15)


def rows(ids: range, version: int) -> pa.Table:
    """Rows with keys of every type Spark turns into text; `version` orders the updates."""
    base = dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=dt.UTC)
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "name": [f"n{i % 7}-ü{'é' * (i % 3)}" for i in ids],
            "amount": [AMOUNTS[i % len(AMOUNTS)] * (1 + i % 5) for i in ids],
            "price": pa.array(
                [decimal.Decimal(i * 37 % 100000) / 100 for i in ids], pa.decimal128(10, 2)
            ),
            "ts": pa.array(
                [base - dt.timedelta(seconds=i * 3607.25) for i in ids], pa.timestamp("us", "UTC")
            ),
            "day": [dt.date(1969, 12, 31) + dt.timedelta(days=i * 11) for i in ids],
            "flag": [i % 3 == 0 for i in ids],
            "city": [CITIES[i % len(CITIES)] for i in ids],
            "version": pa.array([version] * len(ids), pa.int64()),
            "value": [f"v{version}-{i}" for i in ids],
        }
    )


def write_inputs() -> None:
    for name, table in {
        "load": rows(range(0, 160), 1),
        "upsert1": rows(range(120, 200), 2),  # 40 updates, 40 new rows
        "upsert2": rows(range(60, 240), 3),  # the tests' upsert: 140 updates, 40 new
    }.items():
        (HERE / "inputs" / name).mkdir(parents=True, exist_ok=True)
        pq.write_table(table, HERE / "inputs" / name / "part-0.parquet")


def main() -> None:
    from runner.pipeline.run import run_pipeline
    from runner.spec import load_spec

    shutil.rmtree(HERE / "table", ignore_errors=True)
    write_inputs()
    for name in ("load", "upsert1"):
        shutil.rmtree(HERE / "incoming", ignore_errors=True)
        shutil.copytree(HERE / "inputs" / name, HERE / "incoming")
        run_pipeline(load_spec(HERE / "spec.yaml"))
    shutil.rmtree(HERE / "incoming")


if __name__ == "__main__":
    main()
