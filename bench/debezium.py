"""Debezium benchmark: a database table's change events (kafka.value_format debezium) into
an upsert table, beside the same changes as plain JSON upserts into another.

    python -m bench --only debezium [--rows 1000000] [--repeats 3] [--buckets 16]
        [--debezium-batches 3]

Setup, untimed: a Kafka 3.9.1 broker (tests/kafka_server.py, as bench/kafka.py's), two topics
of 8 partitions, and a table `orders` of --rows rows of 8 columns (bench/debezium_events.py:
a numeric(12,2), two timestamps, text and integers), changed step by step. Each step's
changes are produced to both topics before the step runs: to one as the Debezium PostgreSQL
connector writes them (Kafka Connect's JsonConverter with schemas, about 3.6 KB a message,
keyed by the primary key's struct; a tombstone after each delete), to the other as plain
JSON records (the row, `seq` and `deleted`, about 0.2 KB, keyed by the id). The steps: the
snapshot (every row, op r) into new tables, then --debezium-batches batches of 1 % of the
rows updated and 0.1 % deleted (a row may be updated and deleted in one batch).

Systems, each a whole `python -m runner SPEC --summary-json FILE` process (Python and JVM
start included, as a user runs it), local[2], --buckets buckets, not partitioned:
- Debezium: a kafka source with value_format debezium and nothing else: the record key is
  the message key's field, the change feed's settings are implied (ordered by the LSN,
  deletes by op d), the envelope's metadata and Kafka's columns are not stored;
- plain: a kafka source of JSON values with the row's schema, a transform keeping the row's
  columns, record key id, precombine_field seq, delete_marker deleted.

Each step is run --repeats times per system (after one untimed round at the snapshot unless
--no-warmup), rounds interleaved, each run from an untimed copy of the table the step starts
from, so each reads the same records. Reported, medians per step and system: the whole
process's wall seconds and its job seconds (the stages but Spark's start), and the ratio
Debezium / plain of each.

Checks, before anything is reported: after every run, the table's rows are the database's
(count, and the sums of the ids, amounts, quantities and update times), the summary's
inserted, updated and deleted are the step's, and the commit's checkpoint holds the topic's
end offsets; after each step, the two tables hold the same rows, column for column.
"""

from __future__ import annotations

import secrets
import shutil
import statistics
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.debezium_events import (
    COLUMNS,
    DDL,
    Message,
    Orders,
    Step,
    changes,
    debezium_messages,
    plain_messages,
    snapshot,
)
from bench.kafka import MASTER, PARTITIONS, PRODUCER, Run, bench_broker_jars, runner_process, send
from bench.scale import Scale

DEBEZIUM = "runner, Debezium events"
PLAIN = "runner, plain JSON upserts"
SYSTEMS = (DEBEZIUM, PLAIN)
SOURCE = "orders"
SEED = 54
UPDATES, DELETES = 0.01, 0.001  # of the table's rows, per batch
RunRunner = Callable[[Path, dict[str, Any]], Run]  # a run of a spec, written to the file


@dataclass(frozen=True)
class Setup:
    """What every run shares: the broker, a topic per system, where tables go."""

    work: Path
    broker: Any  # tests.kafka_server.KafkaBroker
    buckets: int
    topics: dict[str, str]
    runner: RunRunner


@dataclass
class StepRuns:
    """One step's timed runs by system, and what was produced for it."""

    step: str
    changes: int
    rows_after: int
    bytes: dict[str, int]
    messages: dict[str, int]
    runs: dict[str, list[Run]] = field(default_factory=dict)


def run_debezium_benchmarks(
    work: Path,
    scale: Scale,
    batches: int,
    broker: Any | None = None,
    runner: RunRunner = runner_process,
) -> list[dict]:
    """The Debezium scenario: a result per step; [] with a printed reason when no broker can
    be had. `broker`: a running tests.kafka_server.KafkaBroker to use instead of starting
    one; `runner`: how a spec is run (the bench's smoke test runs it in its session)."""
    if broker is not None:
        return _run(Setup(work, broker, scale.buckets, {}, runner), scale, batches)
    jars = bench_broker_jars("debezium")
    if jars is None:
        return []
    from tests.kafka_server import running_broker

    with running_broker(jars) as started:
        return _run(Setup(work, started, scale.buckets, {}, runner), scale, batches)


def _run(setup: Setup, scale: Scale, batches: int) -> list[dict]:
    setup.work.mkdir(parents=True, exist_ok=True)
    tag = secrets.token_hex(3)  # a broker shared with others holds no topic of these names
    setup.topics.update({DEBEZIUM: f"bench-debezium-{tag}", PLAIN: f"bench-plain-{tag}"})
    for topic in setup.topics.values():
        setup.broker.create_topic(topic, partitions=PARTITIONS)
    orders = Orders.made(scale.rows, SEED)
    steps: list[StepRuns] = []
    for number in range(batches + 1):
        step = snapshot(orders) if number == 0 else changes(orders, number, SEED, UPDATES, DELETES)
        produced = _produce(setup, step, orders)
        rounds = [False] * int(scale.warmup and number == 0) + [True] * scale.repeats
        produced.runs = _measure(setup, _counts(step, orders), orders, rounds)
        _check_same_rows(setup)
        steps.append(produced)
    return [_result(setup, s) for s in steps]


def _produce(setup: Setup, step: Step, orders: Orders) -> StepRuns:
    """The step's changes to both topics, written two ways; what was written."""
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": setup.broker.bootstrap,
            **PRODUCER,
            "on_delivery": lambda err, _msg: errors.append(str(err)),
        }
    )
    sizes = {system: 0 for system in SYSTEMS}
    counts = {system: 0 for system in SYSTEMS}
    made = {DEBEZIUM: debezium_messages(step, orders), PLAIN: plain_messages(step, orders)}
    for system, messages in made.items():
        send(producer, setup.topics[system], _counted(messages, system, sizes, counts))
    left = producer.flush(300)
    if errors or left:
        raise RuntimeError(f"producing the {step.name} failed: {errors[:5] or f'{left} unsent'}")
    return StepRuns(step.name, len(step.ids), int(orders.alive.sum()), sizes, counts)


def _counted(
    messages: Iterable[Message], system: str, sizes: dict[str, int], counts: dict[str, int]
) -> Iterator[Message]:
    for key, value in messages:
        sizes[system] += len(key) + len(value or b"")
        counts[system] += 1
        yield key, value


def _counts(step: Step, orders: Orders) -> tuple[int, int, int]:
    """The inserted, updated and deleted rows the step makes."""
    if step.name == "snapshot":
        return len(step.ids), 0, 0
    deleted = step.ids[step.ops == "d"]
    updated = np.setdiff1d(step.ids[step.ops == "u"], deleted)
    assert not orders.alive[deleted - 1].any()
    return 0, len(updated), len(deleted)


def _measure(
    setup: Setup, counts: tuple[int, int, int], orders: Orders, rounds: list[bool]
) -> dict[str, list[Run]]:
    """Interleaved rounds of both systems, each from a copy of the table the step starts
    from (none for the snapshot) and checked; the timed runs by system. The last run's
    table is where the next step starts."""
    runs: dict[str, list[Run]] = {system: [] for system in SYSTEMS}
    for timed in rounds:
        for system in SYSTEMS:
            table, before = _tables(setup, system)
            shutil.rmtree(table, ignore_errors=True)
            if before.exists():
                shutil.copytree(before, table)
            spec_file = setup.work / f"{_slug(system)}.yaml"
            run = setup.runner(spec_file, runner_spec(setup, system, table))
            _check_run(setup, system, run, counts, orders)
            if timed:
                runs[system].append(run)
    for system in SYSTEMS:
        table, before = _tables(setup, system)
        shutil.rmtree(before, ignore_errors=True)
        table.rename(before)
    return runs


def _slug(system: str) -> str:
    return "debezium" if system == DEBEZIUM else "plain"


def _tables(setup: Setup, system: str) -> tuple[Path, Path]:
    """The system's table, and the table its step starts from."""
    return setup.work / _slug(system) / "table", setup.work / _slug(system) / "before"


def runner_spec(setup: Setup, system: str, table: Path) -> dict[str, Any]:
    kafka = {"bootstrap_servers": setup.broker.bootstrap, "topics": [setup.topics[system]]}
    source: dict[str, Any] = {
        "name": SOURCE,
        "format": "kafka",
        "incremental": {"since": "last"},
        "kafka": kafka,
    }
    target: dict[str, Any] = {
        "path": str(table),
        "operation": "upsert",
        "index": {"type": "BUCKET_HASH_INDEX", "buckets": setup.buckets},
    }
    spec: dict[str, Any] = {"name": _slug(system), "spark": {"master": MASTER}}
    if system == DEBEZIUM:
        kafka["value_format"] = "debezium"
    else:
        source["schema"] = DDL
        spec["transform"] = {"sql": f"SELECT {', '.join(COLUMNS)}, seq, deleted FROM {SOURCE}"}
        target.update(record_key="id", precombine_field="seq", delete_marker="deleted")
    return {**spec, "sources": [source], "target": target}


def _rows(table: Path) -> pa.Table:
    from deltalake import DeltaTable

    rows = DeltaTable(str(table)).to_pyarrow_table(columns=list(COLUMNS))
    return rows.sort_by("id")


def _check_run(
    setup: Setup, system: str, run: Run, counts: tuple[int, int, int], orders: Orders
) -> None:
    """The table holds the database's rows, the summary counts the step's changes, and the
    commit's checkpoint is the topic's end."""
    from deltalake import DeltaTable

    table, _ = _tables(setup, system)
    rows = _rows(table)
    alive = np.flatnonzero(orders.alive)
    wanted = (
        len(alive),
        int(alive.sum() + len(alive)),  # ids are indexes + 1
        int(orders.cents[alive].sum()),
        int(orders.quantity[alive].sum()),
        int(orders.updated_us[alive].sum()),
    )
    got = (
        rows.num_rows,
        pc.sum(rows["id"]).as_py() or 0,
        int((pc.sum(rows["amount"]).as_py() or 0) * 100),
        pc.sum(rows["quantity"]).as_py() or 0,
        pc.sum(pc.cast(rows["updated_at"], pa.int64())).as_py() or 0,
    )
    assert got == wanted, f"{system}: rows, sums of id, cents, quantity, updated {got} != {wanted}"
    summary = tuple(run.summary[k] for k in ("inserted", "updated", "deleted"))
    assert summary == counts, f"{system}: inserted, updated, deleted {summary} != {counts}"
    checkpoint = DeltaTable(str(table)).history(1)[0]["runner"]["checkpoint"][SOURCE]
    topic = setup.topics[system]
    ends = {topic: {str(p): end for p, end in setup.broker.end_offsets(topic).items()}}
    assert checkpoint == ends, f"{system}: checkpoint {checkpoint}, end offsets {ends}"


def _check_same_rows(setup: Setup) -> None:
    """Both tables hold the same rows, column for column."""
    debezium, plain = (_rows(_tables(setup, s)[1]) for s in SYSTEMS)
    assert debezium.schema == plain.schema, f"{debezium.schema} != {plain.schema}"
    assert debezium.equals(plain), "the Debezium table and the plain one hold other rows"


def _result(setup: Setup, step: StepRuns) -> dict:
    """A step's result: bench/__main__.py's table has its wall seconds; render_debezium
    both and their ratios."""
    wall = {s: statistics.median(r.wall_s for r in rs) for s, rs in step.runs.items()}
    job = {s: statistics.median(r.job_s for r in rs) for s, rs in step.runs.items()}
    stages = {
        system: {
            name: round(statistics.median(r.summary["stage_seconds"].get(name, 0.0) for r in rs), 3)
            for name in dict.fromkeys(n for r in rs for n in r.summary["stage_seconds"])
        }
        for system, rs in step.runs.items()
    }
    return {
        "scenario": f"debezium: {step.step}, {step.changes:,} changes -> {step.rows_after:,} "
        f"rows, {setup.buckets} buckets, whole processes (wall s)",
        "runner_s": wall[DEBEZIUM],
        "peers": {PLAIN: wall[PLAIN]},
        "debezium": {
            "step": step.step,
            "changes": step.changes,
            "rows_after": step.rows_after,
            "messages": step.messages,
            "bytes": step.bytes,
            "wall_s": wall,
            "job_s": job,
            "ratios": {"wall": wall[DEBEZIUM] / wall[PLAIN], "job": job[DEBEZIUM] / job[PLAIN]},
            "stages_median": stages,
            "runs": {
                s: {
                    "wall_s": [round(r.wall_s, 3) for r in rs],
                    "job_s": [round(r.job_s, 3) for r in rs],
                }
                for s, rs in step.runs.items()
            },
        },
    }


def render_debezium(results: list[dict]) -> str:
    """A line per step: both systems' wall and job seconds and the ratios."""
    from bench.write import size_text

    lines = [
        "| step | changes | Debezium wall / job (s) | plain wall / job (s) | Debezium / plain: "
        "wall, job | topic bytes: Debezium, plain |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        d = r.get("debezium")
        if d is None:
            continue
        wall, job, ratios, size = d["wall_s"], d["job_s"], d["ratios"], d["bytes"]
        lines.append(
            f"| {d['step']} | {d['changes']:,} | {wall[DEBEZIUM]:.2f} / {job[DEBEZIUM]:.2f} | "
            f"{wall[PLAIN]:.2f} / {job[PLAIN]:.2f} | {ratios['wall']:.2f}x, {ratios['job']:.2f}x "
            f"| {size_text(size[DEBEZIUM])}, {size_text(size[PLAIN])} |"
        )
    for r in results:
        if "debezium" in r:
            for system, stages in r["debezium"]["stages_median"].items():
                text = ", ".join(f"{k} {v:.2f}" for k, v in stages.items())
                lines.append(f"\n{r['debezium']['step']}, {system}: stages (s, median) {text}")
    return "\n".join(lines)
