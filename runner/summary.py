"""The run summary: printed at the end of a run and written by --summary-json.

Its fields are filled from the run's stages (runner/pipeline/figures.py says where each
counter comes from); this module only holds and renders them."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

SHOWN_SKIPPED = 5

# How a run or table action ended, as its record in the history says:
# committed: a new table version; done: a clean that removed files (it commits nothing);
# nothing_new: no source had anything new (no commit, or only
# the chosen checkpoints); nothing_to_do: the batch changed no row, or a service found no
# work; already_committed: the --batch-id was committed before; failed: an error ended it
# (the table is as it was); interrupted: it was killed, found later by its heartbeat (it
# committed nothing).
Outcome = Literal[
    "committed",
    "done",
    "nothing_new",
    "nothing_to_do",
    "already_committed",
    "failed",
    "interrupted",
]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)

# Told of each stage as it starts (True) and ends (False): runner/progress.py shows the
# stage a long run is in. A listener must not raise: it runs inside the run's stages.
StageListener = Callable[[str, bool], None]


@dataclass(frozen=True)
class StageFailure:
    """The error a stage of a run failed with, and the stage: what the run's record in the
    history, its metrics and its `stage_failed` log event say. The error itself is raised
    on as it is, not wrapped: its class is what the CLI's exit code and message, continuous
    mode and every caller of `run_pipeline` go by."""

    stage: str
    cause: BaseException

    @property
    def error_class(self) -> str:
        return type(self.cause).__name__


@dataclass
class Stages:
    """Wall-clock seconds per stage of a run, in the order the stages ran. A stage run
    inside another (a re-merge inside the commit) is counted as itself only, so the
    seconds add up to the run's time."""

    seconds: dict[str, float] = field(default_factory=dict)
    listeners: list[StageListener] = field(default_factory=list, repr=False, compare=False)
    failure: StageFailure | None = None  # the innermost stage's, of the error the run ends with
    _nested: list[float] = field(default_factory=list, repr=False)  # per open stage

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        self.seconds.setdefault(name, 0.0)  # in the order the stages started
        self._nested.append(0.0)
        self._tell(name, True)
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            inner = self._nested.pop()
            self.seconds[name] = round(self.seconds.get(name, 0.0) + elapsed - inner, 3)
            if self._nested:
                self._nested[-1] += elapsed
            self._tell(name, False)

    def _tell(self, name: str, started: bool) -> None:
        for listener in tuple(self.listeners):  # one may leave as the stage ends
            listener(name, started)


@dataclass(frozen=True)
class ActionFigures:
    """What a table action's result gives its record in the run history, and so its
    Prometheus metrics and OpenLineage events: each action's summary says it once
    (`record()`), and runner/observe reads nothing else of it."""

    outcome: Outcome
    version: int | None = None  # the version committed
    instant: str | None = None
    rows_read: int = 0
    files_added: int = 0
    files_removed: int = 0
    bytes_written: int = 0

    @staticmethod
    def committed_or_not(version: int | None) -> Outcome:
        return "committed" if version is not None else "nothing_to_do"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunSummary:
    pipeline: str
    run_id: str
    table: str
    operation: str
    instant: str
    version: int | None = None  # None: nothing committed
    batch_id: str | None = None
    batch_already_committed: bool = False
    dry_run: bool = False  # counted as the run would have; nothing written, nothing committed
    nothing_new: bool = False  # every incremental source had nothing new: no Spark, no commit
    checkpoint_origin: str | None = None
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    rows_read: int = 0
    rows_dropped: int = 0  # by expectations with action drop
    rows_quarantined: int = 0
    rejected_by_rule: dict[str, int] = field(default_factory=dict)
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0  # equal to their stored row: left alone (target.skip_unchanged)
    deleted: int = 0
    duplicates_dropped: int = 0
    stale_skipped: int = 0
    deletes_missing: int = 0
    scd_type: int | None = None  # a change feed's (target.cdc), else None
    late_events: int = 0  # a change feed's events older than the key's stored state
    superseded_events: int = 0  # SCD type 1: events a later one of the batch replaced
    versions_closed: int = 0  # SCD type 2: versions given an end by this batch
    files_added: int = 0
    files_removed: int = 0
    bytes_written: int = 0
    change_data_files: int = 0  # Delta's change data feed: files of this commit's changes
    buckets_touched: int = 0
    partitions_touched: int = 0
    table_type: str = "COPY_ON_WRITE"
    buckets_rewritten: int = 0  # MERGE_ON_READ: stored buckets past the thresholds, rewritten
    buckets_with_deletion_vectors: int = 0  # MERGE_ON_READ: buckets whose files got DVs
    # the schema changes the run made: new columns (`note`), new nested fields
    # (`address.zip`), widened types (`amount: integer -> long`)
    columns_added: list[str] = field(default_factory=list)
    # schema_evolution full: the table's files rewritten in a new schema (renames, drops,
    # widenings), each a version of its own before the run's commit
    schema_rewrites: list[dict[str, Any]] = field(default_factory=list)
    files_skipped: list[dict[str, Any]] = field(
        default_factory=list
    )  # unreadable, on_bad_file: skip
    compaction: dict[str, Any] | None = None  # target.compaction.after_commit, if it folded any
    expansion: dict[str, Any] | None = None  # the automatic expansion after the commit, if one ran
    files_cleaned: int | None = None  # by target.cleaning.after_commit
    stage_seconds: dict[str, float] = field(default_factory=dict)
    # bulk_insert: "the source files" when the writers read the rows themselves, else
    # "Spark (why)": the rows then cross the slower Arrow hand-off
    rows_from: str | None = None
    merged_on: str | None = None  # the driver, or Spark executors (and why)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        if self.batch_already_committed:
            return (
                f"{self.pipeline}: batch {self.batch_id} was already committed to {self.table}; "
                "nothing to do"
            )
        if self.nothing_new:
            return (
                f"{self.pipeline}: nothing new in {', '.join(self.sources)}{self._recorded()} "
                f"({self._stage_times()})"
            )
        lines = self._write_lines() + self._merge_lines() + self._input_lines()
        if self.dry_run:
            lines.append("  dry run      nothing was written under the table, no checkpoint moved")
        lines += self._after_commit_lines()
        total = sum(self.stage_seconds.values())
        lines.append(f"  time         {self._stage_times()}  (total {total:.1f}s)")
        return "\n".join(lines)

    def _recorded(self) -> str:
        """What a run that read nothing recorded: nothing, or its starting points."""
        if self.version is None:
            return "; nothing to do"
        if any(info.get("start") == "latest" for info in self.sources.values()):
            return (
                "; no records after the latest offsets; starting points recorded in version "
                f"{self.version}: the next run reads what arrives after them"
            )
        return f"; the chosen checkpoints are recorded in version {self.version}"

    def _stage_times(self) -> str:
        return "  ".join(f"{k} {v:.1f}s" for k, v in self.stage_seconds.items())

    def _write_lines(self) -> list[str]:
        """What the commit holds: rows by outcome, files and bytes."""
        changed = self.files_added or self.files_removed or self.buckets_with_deletion_vectors
        if self.dry_run:
            head = "would commit a new version" if changed else "would commit nothing"
        elif self.version is not None:
            head = f"committed version {self.version}"
        else:
            head = "nothing to commit (no row changed)"
        return [
            f"{self.pipeline}: {self.operation} {head} of {self.table}",
            f"  instant      {self.instant}   run {self.run_id}",
            f"  rows read    {self.rows_read:,}",
            f"  inserted     {self.inserted:,}   updated {self.updated:,}   "
            + (f"unchanged {self.unchanged:,}   " if self.unchanged else "")
            + f"deleted {self.deleted:,}",
            f"  dropped      {self.duplicates_dropped:,} duplicates in the batch, "
            f"{self.stale_skipped:,} older than stored, {self.deletes_missing:,} deletes of "
            "missing keys",
            f"  files        +{self.files_added} -{self.files_removed}   "
            + (f"+{self.change_data_files} change data   " if self.change_data_files else "")
            + f"{human_size(self.bytes_written)} written   {self.buckets_touched} bucket(s) in "
            f"{self.partitions_touched} partition(s) "
            + ("rewritten" if self.table_type == "COPY_ON_WRITE" else "changed"),
        ]

    def _merge_lines(self) -> list[str]:
        """How the batch was merged: a change feed's events, deletion vectors, the place."""
        lines = []
        if self.scd_type == 1:
            lines.append(
                f"  changes      SCD type 1: {self.late_events:,} late event(s) skipped (the "
                f"table holds a newer state), {self.superseded_events:,} replaced by a later "
                "event of the batch"
            )
        elif self.scd_type == 2:
            lines.append(
                f"  changes      SCD type 2: {self.late_events:,} late event(s) put in their "
                f"place in the history, {self.versions_closed:,} version(s) closed"
            )
        if self.table_type == "MERGE_ON_READ":
            lines.append(
                f"  merge        {self.buckets_with_deletion_vectors} bucket(s) got deletion "
                f"vectors, {self.buckets_rewritten} rewritten whole (past the "
                "target.compaction thresholds)"
            )
        if self.rows_from:
            lines.append(f"  rows from    {self.rows_from}")
        if self.merged_on:
            lines.append(f"  merged on    {self.merged_on}")
        return lines

    def _input_lines(self) -> list[str]:
        """What the batch was read from: rejected rows, sources, checkpoints, skipped files."""
        lines = []
        if self.rejected_by_rule:
            rules = ", ".join(f"{k} {v:,}" for k, v in sorted(self.rejected_by_rule.items()))
            lines.append(
                f"  rejected     {self.rows_quarantined:,} quarantined, {self.rows_dropped:,} "
                f"dropped   by rule: {rules}"
            )
        for name, info in self.sources.items():
            if "since" in info:
                lines.append(f"  source       {name}: {_source_line(info)}")
        if self.checkpoint_origin:
            lines.append(f"  checkpoints  {self.checkpoint_origin}")
        if self.files_skipped:
            lines.append(f"  skipped      {len(self.files_skipped)} unreadable file(s):")
            lines += [f"    {f['path']}: {f['reason']}" for f in self.files_skipped[:SHOWN_SKIPPED]]
            if len(self.files_skipped) > SHOWN_SKIPPED:
                lines.append(f"    ... and {len(self.files_skipped) - SHOWN_SKIPPED} more")
        return lines

    def _after_commit_lines(self) -> list[str]:
        """New columns, and the table services run after the commit."""
        lines = []
        for r in self.schema_rewrites:
            lines.append(
                f"  rewritten    {', '.join(r['changes'])}: version {r['version']}, "
                f"{r['files_read']} file(s) rewritten as {r['files_written']} "
                f"({human_size(r['bytes_written'])}, {r['seconds']:.1f}s)"
            )
        if self.columns_added:  # new columns and fields, widened types
            lines.append(f"  schema       {', '.join(self.columns_added)}")
        if self.compaction:
            c = self.compaction
            lines.append(
                f"  compacted    {c['buckets']} bucket(s) past target.compaction thresholds "
                f"into one file each, version {c['version']}"
            )
        if self.expansion:
            e = self.expansion
            what = (
                f"split {e['buckets_split']} bucket(s) alone"
                if e.get("buckets_split")
                else f"{e['partitions']} partition(s) by {e['policy']}"
            )
            lines.append(
                f"  expanded     {what} in version {e['version']} (a bucket passed "
                "index.expansion.max_bucket_bytes)"
            )
        if self.files_cleaned is not None:
            lines.append(f"  cleaned      {self.files_cleaned} file(s) no reader needs")
        return lines


def _source_line(info: dict[str, Any]) -> str:
    parts = []
    if "files" in info:
        parts.append(f"{info['files']} file(s)")
    if "bytes" in info:
        parts.append(human_size(info["bytes"]))
    if "version" in info:
        parts.append(f"version {info['version']}")
    if info.get("versions_skipped"):
        skipped = ", ".join(str(v) for v in info["versions_skipped"])
        parts.append(f"versions {skipped} skipped (a restore and the versions it undid)")
    return ", ".join(parts) + f"   checkpoint -> {_checkpoint_text(info.get('until'))}"


def _checkpoint_text(value: object) -> str:
    """A checkpoint as a person reads it: a file time and name, a version, a column value."""
    if isinstance(value, dict) and "mtime_ns" in value:
        moment = dt.datetime.fromtimestamp(value["mtime_ns"] / 1e9, dt.UTC)
        names = value.get("names") or []
        shown = f" ({names[0]}{f' and {len(names) - 1} more' if len(names) > 1 else ''})"
        return f"files modified up to {moment:%Y-%m-%d %H:%M:%S} UTC" + (shown if names else "")
    if isinstance(value, dict) and "version" in value:
        return f"version {value['version']}"
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
