"""What the runner tells Prometheus about a pipeline: every metric declared once, the values
one run gives them, and the target table's shape after it.

Names follow Prometheus' conventions: the `runner_` prefix, base units (seconds, bytes),
`_total` on counters. Every metric has the labels `pipeline` and `table`; a metric's own
label, if any, takes its values from a fixed vocabulary (row outcomes, run outcomes, stage
names) or from the spec (expectation names), never from the data. runner/observe/metrics.py
accumulates runs and sends them out; docs/operating.md explains them to users.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from runner.delta.snapshot import TableSnapshot, open_table
from runner.index.layout import BucketLayout
from runner.observe.record import RunRecord, one_line
from runner.spec.secrets import scrub
from runner.summary import OUTCOMES

log = structlog.get_logger(__name__)

MetricType = Literal["counter", "gauge"]
LABELS = ("pipeline", "table")  # on every metric


@dataclass(frozen=True)
class MetricDef:
    name: str  # as queried: a counter's ends in _total
    type: MetricType
    help: str
    label: str | None = None  # its own label, beside pipeline and table


ROWS = MetricDef(
    "runner_rows_total",
    "counter",
    "Rows of the runs by outcome: read from the sources; inserted, updated, deleted or "
    "unchanged in the table; dropped or quarantined by expectations.",
    "outcome",
)
REJECTED = MetricDef(
    "runner_rejected_rows_total",
    "counter",
    "Rows an expectation dropped or quarantined, by expectation (key_generator: rows that "
    "could not be keyed, malformed_record: records that did not parse); a row breaking two "
    "counts for both.",
    "expectation",
)
BYTES = MetricDef("runner_written_bytes_total", "counter", "Bytes of data files written.")
FILES_ADDED = MetricDef("runner_files_added_total", "counter", "Data files added to the table.")
FILES_REMOVED = MetricDef(
    "runner_files_removed_total", "counter", "Data files removed from the table (rewritten)."
)
RUNS = MetricDef("runner_runs_total", "counter", "Runs by outcome.", "outcome")
STAGE_SECONDS = MetricDef(
    "runner_stage_duration_seconds",
    "gauge",
    "Seconds each stage of the last run took (0: the stage did not run).",
    "stage",
)
RUN_SECONDS = MetricDef("runner_run_duration_seconds", "gauge", "Seconds the last run took.")
LAST_RUN = MetricDef(
    "runner_last_run_timestamp_seconds", "gauge", "When the last run ended (Unix time)."
)
LAST_SUCCESS = MetricDef(
    "runner_last_success_timestamp_seconds",
    "gauge",
    "When the last run that did not fail ended (Unix time); a failed run leaves it as it was.",
)
LAST_OUTCOME = MetricDef(
    "runner_last_run_outcome",
    "gauge",
    "The last run's outcome: 1 for it, 0 for the others.",
    "outcome",
)
TABLE_VERSION = MetricDef("runner_table_version", "gauge", "The target table's version.")
TABLE_BUCKETS = MetricDef(
    "runner_table_buckets",
    "gauge",
    "Buckets of the target table: the bucket counts of its partitions that hold data.",
)
TABLE_SKEW = MetricDef(
    "runner_table_skew_ratio",
    "gauge",
    "The target table's skew, as runner inspect computes it: the largest bucket's bytes over "
    "the mean bucket's in its most skewed partition (1: even).",
)
TABLE_BYTES = MetricDef("runner_table_bytes", "gauge", "Bytes of the target table's data files.")
TABLE_FILES = MetricDef("runner_table_files", "gauge", "Data files of the target table.")
TABLE_ROWS = MetricDef("runner_table_rows", "gauge", "Live rows of the target table.")

METRICS = (
    ROWS,
    REJECTED,
    BYTES,
    FILES_ADDED,
    FILES_REMOVED,
    RUNS,
    STAGE_SECONDS,
    RUN_SECONDS,
    LAST_RUN,
    LAST_SUCCESS,
    LAST_OUTCOME,
    TABLE_VERSION,
    TABLE_BUCKETS,
    TABLE_SKEW,
    TABLE_BYTES,
    TABLE_FILES,
    TABLE_ROWS,
)
NAMES = tuple(m.name for m in METRICS)  # every metric name the runner emits

ROW_OUTCOMES = ("read", "inserted", "updated", "deleted", "unchanged", "dropped", "quarantined")
# The stages of a run (runner/pipeline: ctx.stage(...)); tests/unit/test_metrics.py keeps
# the list whole. Each is reported, 0 when it did not run, so that a push replaces the
# seconds of every stage an earlier run reported: the Pushgateway keeps any it is not sent.
RUN_STAGES = (
    "start",
    "sources",
    "rewrite",
    "plan",
    "keys",
    "quarantine",
    "write",
    "remerge",
    "commit",
    "compact",
    "clean",
    "catalog",
)
# The rules runner/pipeline/quality.py rejects rows by besides the spec's expectations
# (KEY_RULE, MALFORMED_RULE, MISMATCH_RULE); reported at 0 for the same reason.
BUILT_IN_RULES = ("key_generator", "malformed_record", "schema_mismatch")

# A metric's values by its own label's value ("" for a metric without one).
Values = dict[MetricDef, dict[str, float]]


def counter_zeros(expectations: Sequence[str] = ()) -> Values:
    """Every counter at 0, with each label value it can take that is known before a run."""
    return {
        ROWS: dict.fromkeys(ROW_OUTCOMES, 0.0),
        REJECTED: dict.fromkeys((*BUILT_IN_RULES, *expectations), 0.0),
        BYTES: {"": 0.0},
        FILES_ADDED: {"": 0.0},
        FILES_REMOVED: {"": 0.0},
        RUNS: dict.fromkeys(OUTCOMES, 0.0),
    }


def run_values(
    record: RunRecord, table: TableState | None, expectations: Sequence[str] = ()
) -> Values:
    """One run's values: a counter's are what the run adds to it, a gauge's what it reads
    after the run. No last-success time after a failed run; no table metrics without
    `table`."""
    verdicts, write = record.verdicts, record.write
    rows = (
        verdicts.rows_read,
        write.inserted,
        write.updated,
        write.deleted,
        write.unchanged,
        verdicts.rows_dropped,
        verdicts.rows_quarantined,
    )
    values = counter_zeros(expectations)
    values[ROWS] = {outcome: float(n) for outcome, n in zip(ROW_OUTCOMES, rows, strict=True)}
    values[REJECTED].update({rule: float(n) for rule, n in verdicts.rejected_by_rule.items()})
    values[BYTES] = {"": float(write.bytes_written)}
    values[FILES_ADDED] = {"": float(write.files_added)}
    values[FILES_REMOVED] = {"": float(write.files_removed)}
    values[RUNS] = {outcome: float(outcome == record.outcome) for outcome in OUTCOMES}
    values[STAGE_SECONDS] = {**dict.fromkeys(RUN_STAGES, 0.0), **record.stage_seconds}
    values[RUN_SECONDS] = {"": record.seconds}
    values[LAST_RUN] = {"": record.ended_at.timestamp()}
    values[LAST_OUTCOME] = dict(values[RUNS])
    if record.succeeded:
        values[LAST_SUCCESS] = {"": record.ended_at.timestamp()}
    if table is not None:
        values.update(table.values())
    return values


def families(values: Values, pipeline: str, table: str) -> list[Metric]:
    """The values as Prometheus metric families, in METRICS' order, labels sorted."""
    out: list[Metric] = []
    for metric in METRICS:
        if metric not in values:
            continue
        own = [metric.label] if metric.label else []
        kind = CounterMetricFamily if metric.type == "counter" else GaugeMetricFamily
        family = kind(metric.name, metric.help, labels=[*LABELS, *own])
        for value_of_label, value in sorted(values[metric].items()):
            family.add_metric([pipeline, table, *([value_of_label] if own else [])], value)
        out.append(family)
    return out


@dataclass(frozen=True)
class TableState:
    """The target table after a run, from its Delta log alone (no data file is read)."""

    version: int
    buckets: int
    skew: float
    bytes: int
    files: int
    rows: int

    def values(self) -> Values:
        return {
            TABLE_VERSION: {"": float(self.version)},
            TABLE_BUCKETS: {"": float(self.buckets)},
            TABLE_SKEW: {"": self.skew},
            TABLE_BYTES: {"": float(self.bytes)},
            TABLE_FILES: {"": float(self.files)},
            TABLE_ROWS: {"": float(self.rows)},
        }


def table_state(uri: str) -> TableState | None:
    """The table's state, or None when there is no runner table at `uri` or it cannot be
    read: a run's metrics never fail for the table's."""
    try:
        snapshot = open_table(uri)
        if snapshot is None or "runner.format.version" not in snapshot.configuration:
            return None
        return _state(snapshot)
    except Exception as exc:  # whatever the store says: no table metrics this time
        log.warning("metrics_table_unread", table=uri, error=scrub(one_line(exc)))
        return None


def _state(snapshot: TableSnapshot) -> TableState:
    """Buckets and skew as runner/commands/inspect.py counts them: per partition holding
    data, its buckets are its layout's (its count, plus one per bucket split alone), and
    its skew is the largest bucket's bytes over the mean of its buckets (empty ones count)."""
    layout = BucketLayout.from_configuration(snapshot.configuration)
    files = snapshot.files()
    sizes: dict[str, dict[int, int]] = {}
    for f in files:
        by_bucket = sizes.setdefault(f.partition_path, {})
        by_bucket[f.bucket] = by_bucket.get(f.bucket, 0) + f.size
    buckets, skew = 0, 0.0
    for partition, by_bucket in sizes.items():
        count = len({b for b, _ in layout.leaves(partition)} | set(by_bucket))
        buckets += count
        mean = sum(by_bucket.values()) / count
        if mean:
            skew = max(skew, round(max(by_bucket.values()) / mean, 3))
    return TableState(
        version=snapshot.version,
        buckets=buckets,
        skew=skew,
        bytes=sum(f.size for f in files),
        files=len(files),
        rows=sum(f.live_records for f in files),
    )
