"""Hudi's side of bench/hudi.py, run by the side environment's Python (pyspark 3.5):

    <side venv>/bin/python -I bench/hudi_job.py < plan.json

It imports only pyspark and the standard library: the runner and Spark 4 are not in this
environment. One local SparkSession with Hudi's bundle (started once, its JVM start left
out of every timing) runs the plan's steps in order, each on the bench's own files; a step's
seconds are measured around its write, read or compaction call only (source read included,
as the runner's stages include theirs), copies of base tables are made untimed. Prints one
JSON object, the results of every step by name, as stdout's last line.

The plan (JSON): jar, events (a directory for Spark's event log, from which each step's
seconds are split by Spark job: data files, Hudi's metadata table, the rest), master, conf
(Spark settings), options (Hudi write options shared by every write: key, partition,
precombine field, bucket index, parallelism), repeats, warmup, optionally checksum (the
SQL aggregates a table is checked by, integers; default: rows, sum of ids, sum of amounts in
cents), and steps: {op: bulk_insert | upsert | delete | upserts | read | compact, name,
table, ...}.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

# Hudi's quickstart settings for Spark 3.5; Kryo is required by Hudi's writer
SESSION = {
    "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
    "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
    "spark.sql.extensions": "org.apache.spark.sql.hudi.HoodieSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.hudi.catalog.HoodieCatalog",
    # Hudi sizes records with JOL, which attaches to its own JVM: Java 17 refuses unless told
    "spark.driver.extraJavaOptions": "-Djdk.attach.allowAttachSelf=true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}
TABLE_TYPE = "hoodie.datasource.write.table.type"
OPERATION = "hoodie.datasource.write.operation"
META = ".hoodie"


def start_session(plan: dict):
    """The one SparkSession of the job, and the seconds its start took."""
    from pyspark.sql import SparkSession

    start = time.perf_counter()
    Path(plan["events"]).mkdir(parents=True, exist_ok=True)
    events = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": plan["events"]}
    builder = SparkSession.builder.master(plan["master"]).appName("bench-hudi")
    for key, value in {**SESSION, **events, "spark.jars": plan["jar"], **plan["conf"]}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, time.perf_counter() - start


def checksum(frame, sums: list[str] | None = None) -> list[int]:
    """[rows, sum of ids, sum of amounts in cents] (bench.write.Checksum), or the SQL
    aggregates `sums`, computed by Spark."""
    from pyspark.sql import functions as F

    if sums:
        return [int(v or 0) for v in frame.selectExpr(*sums).collect()[0]]
    cents = F.bround(F.col("amount") * 100).cast("long")
    row = frame.agg(F.count(F.lit(1)), F.sum("id"), F.sum(cents)).collect()[0]
    return [int(row[0]), int(row[1] or 0), int(row[2] or 0)]


def sizes(table: Path) -> dict[str, int]:
    """Every file under a table, by relative path: what a step's bytes are counted from."""
    return {str(p.relative_to(table)): p.stat().st_size for p in table.rglob("*") if p.is_file()}


def written(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Bytes added under the table (new files, or grown ones): data files (base parquet and
    log files) apart from the rest (.hoodie: timeline and metadata table; Hadoop's .crc
    files; partition metadata)."""
    out = {"data": 0, "meta": 0}
    for path, size in after.items():
        added = size - before.get(path, 0)
        if added <= 0:
            continue
        name = Path(path).name
        meta = path.startswith(META) or name.endswith(".crc") or name.startswith(".hoodie")
        out["meta" if meta else "data"] += added
    return out


def data_files(table: Path) -> dict[str, int]:
    """Base (parquet) and log files outside .hoodie, every version still on disk."""
    files = [p for p in table.rglob("*") if p.is_file() and META not in p.relative_to(table).parts]
    return {
        "base": sum(1 for p in files if p.name.endswith(".parquet")),
        "log": sum(1 for p in files if ".log." in p.name and not p.name.endswith(".crc")),
    }


def spark_jobs(events: Path, window: tuple[float, float]) -> dict[str, float]:
    """Seconds of the Spark jobs started within `window` (epoch seconds), by what they did,
    from the session's event log (flushed at each job's start and end): Hudi describes
    each job it runs. The rest of the window is the driver's alone."""
    starts, ends = {}, {}
    for path in events.iterdir():
        with path.open() as lines:
            for line in lines:
                if not line.startswith('{"Event":"SparkListenerJob'):
                    continue
                event = json.loads(line)
                if event["Event"] == "SparkListenerJobStart":
                    what = event.get("Properties", {}).get("spark.job.description") or ""
                    starts[event["Job ID"]] = (event["Submission Time"] / 1000, what)
                elif event["Event"] == "SparkListenerJobEnd":
                    ends[event["Job ID"]] = event["Completion Time"] / 1000
    out = {"metadata table": 0.0, "data files": 0.0, "other jobs": 0.0}
    for job, (start, what) in starts.items():
        if window[0] <= start <= window[1] and job in ends:
            out[_kind(what)] += ends[job] - start
    out["driver, no Spark job"] = window[1] - window[0] - sum(out.values())
    return {k: round(v, 3) for k, v in out.items()}


def _kind(description: str) -> str:
    # the metadata table is the table "<name>_metadata", written by Hudi's MetadataWriter
    if "_metadata" in description or "MetadataWrite" in description:
        return "metadata table"
    # the jobs that run the lazy write DAG, and compaction's
    if "Committing stats" in description or "Preparing compaction" in description:
        return "data files"
    return "other jobs"


class Job:
    """The session, the plan's shared settings, and one method per kind of step."""

    def __init__(self, spark, plan: dict) -> None:
        self.spark = spark
        self.options = plan["options"]
        self.repeats = plan["repeats"]
        self.warmup = plan["warmup"]
        self.events = Path(plan["events"])
        self.sums = plan.get("checksum")
        self.window = (0.0, 0.0)  # epoch seconds of the last timed run of a step

    def write(self, step: dict, source: str, table: Path, operation: str) -> float:
        """One Hudi datasource write of the parquet files in `source`; its seconds."""
        start = time.perf_counter()
        frame = self.spark.read.parquet(source)
        (
            frame.write.format("hudi")
            .options(**self.options)
            .option(TABLE_TYPE, step["table_type"])
            .option(OPERATION, operation)
            .mode("overwrite" if operation == "bulk_insert" else "append")
            .save(str(table))
        )
        return time.perf_counter() - start

    def repeated(self, step: dict, act: Callable[[Path], float]) -> tuple[list[float], dict]:
        """`act` on a fresh table (a copy of step["base"], or none) per run: a warm-up run
        unless told otherwise, then `repeats` timed ones; each run on a path of its own so
        no listing cached by an earlier run serves a later one. The last run's table
        becomes step["table"]; the bytes it added are returned beside the seconds.
        step["once"]: a single run, timed (a base table, not a scenario)."""
        table = Path(step["table"])
        runs = 1 if step.get("once") else self.repeats + (1 if self.warmup else 0)
        times, last = [], None
        for i in range(runs):
            path = table.with_name(f"{table.name}.run{i}")
            if last is not None:
                shutil.rmtree(last)
            if step.get("base"):
                shutil.copytree(step["base"], path)
            before = sizes(path) if path.exists() else {}
            started = time.time()
            seconds = act(path)
            self.window = (started, time.time())
            if i >= runs - self.repeats or step.get("once"):
                times.append(round(seconds, 3))
            last = path
        added = written(before, sizes(last))
        shutil.rmtree(table, ignore_errors=True)
        last.rename(table)
        return times, added

    def snapshot(self, table: Path, **read_options: str) -> list[int]:
        frame = self.spark.read.format("hudi").options(**read_options).load(str(table))
        return checksum(frame, self.sums)

    def bulk_insert(self, step: dict) -> dict:
        times, added = self.repeated(
            step, lambda path: self.write(step, step["source"], path, "bulk_insert")
        )
        return self.result(step, times, added)

    def upsert(self, step: dict) -> dict:
        times, added = self.repeated(
            step, lambda path: self.write(step, step["source"], path, "upsert")
        )
        return self.result(step, times, added)

    def delete(self, step: dict) -> dict:
        """Hudi's `delete` of the keys of the rows in step["source"]."""
        times, added = self.repeated(
            step, lambda path: self.write(step, step["source"], path, "delete")
        )
        return self.result(step, times, added)

    def upserts(self, step: dict) -> dict:
        """Successive upserts of step["sources"] into one copy of step["base"], once each."""
        table = Path(step["table"])
        shutil.rmtree(table, ignore_errors=True)
        shutil.copytree(step["base"], table)
        before, started = sizes(table), time.time()
        times = [round(self.write(step, s, table, "upsert"), 3) for s in step["sources"]]
        self.window = (started, time.time())  # the spark_jobs of the whole series
        return self.result(step, times, written(before, sizes(table)))

    def read(self, step: dict) -> dict:
        """Hudi's snapshot query (base and log files merged) of step["table"], timed."""
        table = Path(step["table"])
        runs = self.repeats + (1 if self.warmup else 0)
        results = []
        for _ in range(runs):
            start = time.perf_counter()
            found = self.snapshot(table)
            results.append((round(time.perf_counter() - start, 3), found))
        timed = results[runs - self.repeats :]
        return {"seconds": [s for s, _ in timed], "checksum": timed[-1][1]}

    def compact(self, step: dict) -> dict:
        """`CALL run_compaction` (schedule and execute) on fresh copies of step["base"]."""
        outcome: list = []
        options = ",".join(f"{k}={v}" for k, v in step["compaction_options"].items())

        def run(path: Path) -> float:
            start = time.perf_counter()
            rows = self.spark.sql(
                f"CALL run_compaction(op => 'scheduleAndExecute', path => '{path}', "
                f"options => '{options}')"
            ).collect()
            seconds = time.perf_counter() - start
            outcome[:] = [(r["timestamp"], r["operation_size"], r["state"]) for r in rows]
            return seconds

        times, added = self.repeated(step, run)
        result = self.result(step, times, added)
        # every file group folded: a read of the base files alone finds the whole table
        result["read_optimized_checksum"] = self.snapshot(
            Path(step["table"]), **{"hoodie.datasource.query.type": "read_optimized"}
        )
        result["compactions"] = outcome
        return result

    def result(self, step: dict, times: list[float], added: dict) -> dict:
        table = Path(step["table"])
        return {
            "seconds": times,
            "bytes_data": added["data"],
            "bytes_meta": added["meta"],
            "checksum": self.snapshot(table),
            "files": data_files(table),
            "spark_jobs": spark_jobs(self.events, self.window),
        }


def main() -> None:
    plan = json.loads(sys.argv[1] if len(sys.argv) > 1 else sys.stdin.read())
    spark, start_s = start_session(plan)
    job = Job(spark, plan)
    import pyspark

    out = {"spark": pyspark.__version__, "session_start_s": round(start_s, 3), "steps": {}}
    for step in plan["steps"]:
        print(f"hudi_job: {step['op']} {step['name']}", file=sys.stderr, flush=True)
        out["steps"][step["name"]] = getattr(job, step["op"])(step)
    spark.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
