"""Kafka ingestion benchmark: the records of a topic into a bucket-indexed table, beside
Spark's own Kafka source writing them as plain parquet (the floor) and delta-rs writing them
from a Python consumer.

    python -m bench --only kafka [--rows 1000000] [--repeats 3] [--buckets 16]

Setup, untimed: a Kafka 3.9.1 broker (tests/kafka_server.py, the tests' own: one KRaft node
on 127.0.0.1, its jars from Maven Central), a topic of 8 partitions, and --rows records
produced to it with confluent-kafka (batched, lingering, one flush at the end): the bench's
rows (bench/write.py's make_rows: id, city, ts, amount, note) as JSON objects, keyed by id
(Kafka's murmur2 spreads them over the partitions), uncompressed.

Systems, each a whole process (Python and JVM start included, as a user runs it), each run
reading the whole topic into a fresh table, all on local[2]:
- the runner: `python -m runner SPEC --summary-json FILE`, a kafka source with incremental
  {since: last} (no checkpoint yet: from the earliest offsets) into an upsert target, record
  key id, precombine ts, partitioned by city, --buckets buckets (BUCKET_HASH_INDEX). Upsert,
  not insert: it is what a Kafka feed is ingested with (HoodieStreamer's default; a record
  delivered twice stays one row), and the heavier of the two (the batch is de-duplicated by
  key, where insert appends it). A transform keeps the value's columns: without one the
  runner would also store Kafka's _kafka_* columns, which the peers do not write.
- Spark's floor: `python -m bench.kafka spark-parquet BOOTSTRAP OUT`: a session started as
  the runner starts its own (runner.jvm.session.spark_session: same master and defaults, Spark's
  Kafka connector jars), Spark's Kafka batch read of the whole topic (earliest to latest),
  from_json with the same schema, `partitionBy("city").parquet()`: no key, no index, no
  de-duplication, no commit.
- delta-rs: `python -m bench.kafka delta-rs BOOTSTRAP OUT`: a confluent-kafka Consumer
  assigned the 8 partitions from the beginning, polled in batches of up to 100,000 records
  until each partition's end offset, each batch json-decoded by pyarrow.json (the schema
  given) and streamed into one `deltalake.write_deltalake(mode="append",
  partition_by=["city"])`: one commit, as the runner's, memory bounded.

Reported, medians over --repeats: each system's wall time (the whole process) and its job
time: the runner's stage_seconds without "start" (Spark's session start), the peers' own
time after their session (or consumer) was made. Rounds are interleaved (runner, Spark,
delta-rs, then again), after one untimed round unless --no-warmup. The issue's target, the
runner within 1.5x of Spark's plain write, is noted for both times.

Checks, after every run, before anything is reported: the table holds --rows rows, --rows
distinct ids, and the id and amount sums of the records produced (bench.write.Checksum); the
runner's summary counts --rows rows read and inserted, and its commit's checkpoint holds the
topic's end offsets.
"""

from __future__ import annotations

import io
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from runner.errors import EnvironmentProblem

# The peers' processes import only what they use: bench.write brings the runner and its
# dependencies (about 0.9 s), a cost of neither peer. The bench's side imports it in place.

ROOT = Path(__file__).resolve().parents[1]
MASTER = "local[2]"  # the bench's own session's
TOPIC = "bench-rows"
PARTITIONS = 8
SOURCE = "records"  # the runner's source (and view) name
SEED = 41
COLUMNS = ("id", "city", "ts", "amount", "note")
DDL = "id bigint, city string, ts bigint, amount double, note string"
ARROW_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("city", pa.string()),
        ("ts", pa.int64()),
        ("amount", pa.float64()),
        ("note", pa.string()),
    ]
)
PRODUCER = {
    "acks": "all",
    "linger.ms": 50,  # full batches (batch.size 1 MB), not one request per record
    "queue.buffering.max.messages": 1_000_000,
    "delivery.report.only.error": True,
}
CONSUME_BATCH = 100_000  # records per poll of the delta-rs peer
STALL_S = 60  # a peer's consumer that gets nothing for this long fails
RUNNER = "runner upsert (whole process)"
SPARK = "Spark Kafka source -> partitionBy().parquet (whole process)"
DELTA_RS = "delta-rs write_deltalake from a Python consumer (whole process)"
TARGET_RATIO = 1.5  # the issue's: the runner's time within 1.5x of Spark's plain write


@dataclass(frozen=True)
class Run:
    """One run: the whole process's seconds, its job's, and the runner's summary."""

    wall_s: float
    job_s: float
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Setup:
    """What every run shares: the broker, the records produced and where tables go."""

    work: Path
    bootstrap: str
    rows: int
    buckets: int
    ends: dict[int, int]  # {partition: end offset} after producing
    expected: Any  # bench.write.Checksum of the records produced


def run_kafka_benchmarks(
    work: Path, rows: int, repeats: int, buckets: int, warmup: bool = True
) -> list[dict]:
    """The Kafka scenario: two results (wall and job seconds); [] with a printed reason when
    no broker (Java, Maven, confluent-kafka) or no Spark Kafka connector can be had."""
    jars = bench_broker_jars("kafka")
    if jars is None:
        return []
    from tests.kafka_server import running_broker

    work.mkdir(parents=True, exist_ok=True)
    with running_broker(jars) as broker:
        broker.create_topic(TOPIC, partitions=PARTITIONS)
        start = time.perf_counter()
        expected = produce(broker.bootstrap, rows)
        produce_s = time.perf_counter() - start
        ends = broker.end_offsets(TOPIC)
        assert sum(ends.values()) == rows, f"the topic holds {ends}, {rows} records produced"
        setup = Setup(work, broker.bootstrap, rows, buckets, ends, expected)
        runs = _measure(setup, repeats, warmup)
    return _results(setup, runs, produce_s)


def bench_broker_jars(scenario: str) -> Path | None:
    """The broker's jars, with Spark's Kafka connector fetched (once here, not in a timed
    run); None, the reason printed, when Java, Maven, confluent-kafka or the jars cannot be
    had."""
    try:
        import confluent_kafka  # noqa: F401  (the dev extra)

        from runner.jvm.spark_connectors import kafka
        from tests.kafka_server import broker_jars

        kafka().jars(f"the {scenario} bench", False)
        jars, problem = broker_jars()
    except (ImportError, EnvironmentProblem) as exc:
        jars, problem = None, str(exc)
    if jars is None:
        print(f"{scenario}: skipped ({problem})")
    return jars


def json_values(rows: pa.Table) -> pa.ChunkedArray:
    """Each row as a JSON object, built by Arrow (Arrow's shortest round-trip doubles)."""
    import pyarrow.compute as pc

    def text(name: str) -> Any:
        column = rows[name]
        return column if pa.types.is_string(column.type) else pc.cast(column, pa.string())

    parts: list[Any] = []
    for i, name in enumerate(COLUMNS):
        quote = '"' if pa.types.is_string(rows[name].type) else ""
        parts += [("{" if i == 0 else ",") + f'"{name}":{quote}', text(name)]
        parts.append(quote + ("}" if i == len(COLUMNS) - 1 else ""))
    return pc.binary_join_element_wise(*parts, "")


def produce(bootstrap: str, rows: int) -> Any:
    """`rows` records of make_rows' rows to TOPIC, keyed by id; their Checksum."""
    import numpy as np
    import pyarrow.compute as pc
    from confluent_kafka import Producer

    from bench.write import CHUNK_ROWS, Checksum, checksum, make_rows

    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            **PRODUCER,
            "on_delivery": lambda err, _msg: errors.append(str(err)),
        }
    )
    total = Checksum()
    for i, start in enumerate(range(0, rows, CHUNK_ROWS)):
        chunk = make_rows(0, seed=(SEED, i), ids=np.arange(start, min(start + CHUNK_ROWS, rows)))
        total += checksum(chunk)
        keys = pc.cast(chunk["id"], pa.string()).to_pylist()
        send(producer, TOPIC, zip(keys, json_values(chunk).to_pylist(), strict=True))
    left = producer.flush(120)
    if errors or left:
        raise RuntimeError(f"producing to {TOPIC} failed: {errors[:5] or f'{left} unsent'}")
    return total


def send(producer: Any, topic: str, messages: Iterable[tuple[Any, Any]]) -> None:
    """Queue (key, value) messages to `topic`, waiting while the local queue is full."""
    for key, value in messages:
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.05)
    producer.poll(0)


def _measure(setup: Setup, repeats: int, warmup: bool) -> dict[str, list[Run]]:
    """Interleaved rounds of every system, each run into a fresh table and checked; the
    timed runs by system."""
    systems: dict[str, tuple[Callable[[Path], Run], Callable[[Path, Run], None]]] = {
        RUNNER: (lambda out: _runner(setup, out), lambda out, run: _check_runner(setup, out, run)),
        SPARK: (lambda out: _peer("spark-parquet", setup, out), _checker(setup, "parquet")),
        DELTA_RS: (lambda out: _peer("delta-rs", setup, out), _checker(setup, "delta")),
    }
    runs: dict[str, list[Run]] = {name: [] for name in systems}
    for timed in [False] * int(warmup) + [True] * repeats:
        for name, (run, check) in systems.items():
            out = setup.work / "table"
            shutil.rmtree(out, ignore_errors=True)
            done = run(out)
            check(out, done)
            shutil.rmtree(out)
            if timed:
                runs[name].append(done)
    return runs


def _runner(setup: Setup, table: Path) -> Run:
    """`python -m runner SPEC --summary-json FILE`, timed as a whole process."""
    return runner_process(setup.work / "kafka.yaml", runner_spec(setup, table))


def runner_process(spec_file: Path, spec: dict[str, Any]) -> Run:
    """`python -m runner SPEC --summary-json FILE` of `spec` written to `spec_file`, timed
    as a whole process; its job seconds are its stages' but Spark's start."""
    summary_file = spec_file.with_suffix(".summary.json")
    spec_file.write_text(json.dumps(spec))  # JSON is YAML
    command = [sys.executable, "-m", "runner", str(spec_file), "--summary-json", str(summary_file)]
    wall, _ = timed(command, "runner")
    summary = json.loads(summary_file.read_text())
    job = sum(s for stage, s in summary["stage_seconds"].items() if stage != "start")
    return Run(wall, job, summary)


def runner_spec(setup: Setup, table: Path) -> dict:
    return {
        "name": "kafka",
        "spark": {"master": MASTER},
        "sources": [
            {
                "name": SOURCE,
                "format": "kafka",
                "schema": DDL,
                "incremental": {"since": "last"},
                "kafka": {"bootstrap_servers": setup.bootstrap, "topics": [TOPIC]},
            }
        ],
        "transform": {"sql": f"SELECT {', '.join(COLUMNS)} FROM {SOURCE}"},
        "target": {
            "path": str(table),
            "operation": "upsert",
            "record_key": "id",
            "precombine_field": "ts",
            "key_generator": {"partition_fields": "city"},
            "index": {"type": "BUCKET_HASH_INDEX", "buckets": setup.buckets},
        },
    }


def _peer(kind: str, setup: Setup, out: Path) -> Run:
    """`python -m bench.kafka KIND BOOTSTRAP OUT`, timed as a whole process; its job seconds
    are the last line it prints."""
    wall, out_text = timed(
        [sys.executable, "-m", "bench.kafka", kind, setup.bootstrap, str(out)], kind
    )
    return Run(wall, float(out_text.split()[-1]))


def timed(command: list[str], what: str) -> tuple[float, str]:
    """A whole process's wall seconds and its stdout; RuntimeError when it fails."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode:
        from bench.write import error_text  # only on failure (see the imports above)

        raise RuntimeError(f"{what} exited {done.returncode}:\n{error_text(done.stderr)}")
    return wall, done.stdout


def _check_table(setup: Setup, dataset: Any, system: str) -> None:
    """The table holds the records produced: row count, distinct ids, id and amount sums."""
    import pyarrow.compute as pc

    from bench.write import checksum

    got = checksum(dataset)
    assert got == setup.expected, f"{system}: {got}, produced {setup.expected}"
    distinct = pc.count_distinct(dataset.to_table(columns=["id"])["id"]).as_py()
    assert distinct == setup.rows, f"{system}: {distinct} distinct ids, {setup.rows} produced"


def _checker(setup: Setup, kind: str) -> Callable[[Path, Run], None]:
    def check(out: Path, _run: Run) -> None:
        from bench.write import delta_dataset, parquet_dataset

        dataset = parquet_dataset(out) if kind == "parquet" else delta_dataset(out)
        _check_table(setup, dataset, f"{kind} table")

    return check


def _check_runner(setup: Setup, table: Path, run: Run) -> None:
    """The table's rows, the summary's counts and the offsets the commit recorded."""
    from deltalake import DeltaTable

    from bench.write import delta_dataset

    _check_table(setup, delta_dataset(table), "runner table")
    counts = run.summary["rows_read"], run.summary["inserted"], run.summary["updated"]
    assert counts == (setup.rows, setup.rows, 0), f"runner: read, inserted, updated {counts}"
    checkpoint = DeltaTable(str(table)).history(1)[0]["runner"]["checkpoint"][SOURCE]
    ends = {TOPIC: {str(p): end for p, end in setup.ends.items()}}
    assert checkpoint == ends, f"runner: checkpoint {checkpoint}, end offsets {ends}"


def _results(setup: Setup, runs: dict[str, list[Run]], produce_s: float) -> list[dict]:
    """The wall and the job results (bench/__main__.py's table), the runs beside them."""
    wall = {name: statistics.median(r.wall_s for r in rs) for name, rs in runs.items()}
    job = {name: statistics.median(r.job_s for r in rs) for name, rs in runs.items()}
    stages = list(dict.fromkeys(s for r in runs[RUNNER] for s in r.summary["stage_seconds"]))
    stages_median = {
        s: round(statistics.median(r.summary["stage_seconds"].get(s, 0.0) for r in runs[RUNNER]), 3)
        for s in stages
    }
    ratios = {"wall": wall[RUNNER] / wall[SPARK], "job": job[RUNNER] / job[SPARK]}
    target = ", ".join(
        f"{what} {ratio:.2f}x ({'met' if ratio <= TARGET_RATIO else 'MISSED'})"
        for what, ratio in ratios.items()
    )
    what = (
        f"kafka: {setup.rows:,} JSON records, {PARTITIONS} partitions, into an upsert table of "
        f"{setup.buckets} buckets"
    )
    notes = [
        f"target, runner / Spark's plain write <= {TARGET_RATIO}x: {target}",
        f"checked after every run: {setup.rows:,} rows and distinct ids, id and amount sums; "
        "runner: rows read, inserted, checkpoint = end offsets",
        f"setup (untimed): {setup.rows:,} records produced in {produce_s:.1f} s",
    ]
    detail = {
        name: {"wall_s": [round(r.wall_s, 3) for r in rs], "job_s": [round(r.job_s, 3) for r in rs]}
        for name, rs in runs.items()
    }
    return [
        {
            "scenario": f"{what}, whole processes (wall s, JVM start included)",
            "runner_s": wall[RUNNER],
            "peers": {name: s for name, s in wall.items() if name != RUNNER},
            "notes": notes,
            "kafka": {"runs": detail, "ratios_to_spark": ratios, "produce_s": produce_s},
        },
        {
            "scenario": f"{what}, job s (runner: its stages without Spark's start; peers: after "
            "their session or consumer was made)",
            "runner_s": job[RUNNER],
            "peers": {name: s for name, s in job.items() if name != RUNNER},
            "runner_stages_median": stages_median,
        },
    ]


# ---------------------------------------------------------------- the peers' processes


def spark_parquet(bootstrap: str, out: str) -> float:
    """Spark's Kafka batch read of TOPIC, from_json, partitionBy("city").parquet(out); the
    seconds after the session started."""
    from pyspark.sql import functions as F

    from runner.jvm.session import spark_session
    from runner.jvm.spark_connectors import kafka
    from runner.spec.model import SparkSettings

    jars = kafka().jars("bench", False)
    spark = spark_session(SparkSettings(master=MASTER), "bench-kafka", jars=jars)
    start = time.perf_counter()
    records = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    rows = records.select(F.from_json(F.col("value").cast("string"), DDL).alias("v"))
    rows.select("v.*").write.partitionBy("city").parquet(out)
    seconds = time.perf_counter() - start
    spark.stop()
    return seconds


def delta_rs(bootstrap: str, out: str) -> float:
    """A Python consumer of TOPIC's partitions, from the beginning to their end offsets,
    streamed into one write_deltalake append; the seconds after the consumer was made."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    from deltalake import write_deltalake

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-delta-rs",  # assign() uses none, but the client wants one
            "enable.auto.commit": False,
        }
    )
    start = time.perf_counter()
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
        for p in range(PARTITIONS)
    }
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    batches = pa.RecordBatchReader.from_batches(ARROW_SCHEMA, _consumed(consumer, ends))
    write_deltalake(out, batches, mode="append", partition_by=["city"])
    seconds = time.perf_counter() - start
    consumer.close()
    return seconds


def _consumed(consumer: Any, ends: dict[int, int]) -> Iterator[pa.RecordBatch]:
    """The records before `ends` ({partition: end offset}), polled in batches, decoded."""
    import pyarrow.json as pj

    options = pj.ParseOptions(explicit_schema=ARROW_SCHEMA)
    left = {p for p, end in ends.items() if end > 0}
    last = time.monotonic()
    while left:
        values = []
        for message in consumer.consume(CONSUME_BATCH, timeout=1.0):
            if message.error():
                raise RuntimeError(f"consuming {TOPIC}: {message.error()}")
            partition, offset = message.partition(), message.offset()
            if offset < ends[partition]:
                values.append(message.value())
            if offset + 1 >= ends[partition]:
                left.discard(partition)
        if values:
            last = time.monotonic()
            decoded = pj.read_json(io.BytesIO(b"\n".join(values)), parse_options=options)
            yield from decoded.to_batches()
        elif time.monotonic() - last > STALL_S:
            raise RuntimeError(f"no record of {TOPIC} for {STALL_S} s; partitions left {left}")


if __name__ == "__main__":
    peer = {"spark-parquet": spark_parquet, "delta-rs": delta_rs}[sys.argv[1]]
    print(peer(sys.argv[2], sys.argv[3]))
