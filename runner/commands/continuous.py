"""`runner run --continuous`: one run after another until stopped.

Each round is an ordinary run: it commits when an incremental source brought something new
and does nothing (no Spark job) when nothing arrived. SIGTERM (what Kubernetes and
`docker stop` send) lets the round in flight finish, commit and print its summary, then the
loop ends with exit code 0. Ctrl-C in a terminal reaches Spark's JVM and workers too, so it
stops a round at once (the table stays as it was: nothing of that round is committed).
A round that fails ends the loop with its error, so a supervisor's restart policy sees it.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from runner.observe.observed import Observer
from runner.pipeline.context import RunOptions
from runner.summary import RunSummary

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Rounds:
    count: int
    commits: int


def run_continuously(
    observer: Observer,
    interval_seconds: float,
    options: RunOptions,
    on_round: Callable[[int, RunSummary], None] = lambda _n, _summary: None,
) -> Rounds:
    """Rounds until SIGTERM or SIGINT; `on_round` gets each round's number and summary.
    `options`' checkpoints apply to the first round only."""
    commits = 0
    spark: SparkSession | None = None
    port = observer.metrics.serve()  # metrics.port: /metrics while the rounds run
    if port is not None:
        log.info("metrics_served", port=port, path="/metrics")

    def one_round(number: int) -> None:
        nonlocal commits, spark
        later = RunOptions(options.console_progress)
        summary = observer.run(spark, options if number == 1 else later)
        spark = spark or _active_session()
        commits += summary.version is not None
        on_round(number, summary)
        log.info("round_done", round=number, version=summary.version)

    count = repeat(interval_seconds, one_round)
    log.info("stopped", rounds=count, commits=commits)
    observer.close()
    if spark is not None:
        spark.stop()
    return Rounds(count, commits)


def repeat(interval_seconds: float, one_round: Callable[[int], None]) -> int:
    """`one_round(number)` until SIGTERM or SIGINT, a round starting at most every
    `interval_seconds`; the number of rounds run. A signal lets the round in flight end."""
    stop = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        stop.set()  # only a flag: logging here could re-enter a write to stderr

    count = 0
    while not stop.is_set():
        # PySpark puts its own SIGINT handler in when it starts: ours goes back every round.
        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        started = time.monotonic()
        count += 1
        one_round(count)
        stop.wait(max(0.0, interval_seconds - (time.monotonic() - started)))
    return count


def _active_session() -> SparkSession | None:
    if "pyspark.sql" not in sys.modules:  # every round so far had nothing new: no JVM yet
        return None
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()
