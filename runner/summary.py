"""The run summary: printed at the end of a run and written by --summary-json.

It is assembled from one typed value per stage's result (`SourceFigures`, `VerdictFigures`,
`WriteFigures`; runner/pipeline/figures.py says where each counter comes from), which the
run's record in the history, its metrics and its lineage events read too
(runner/observe/record.py); this module only holds and renders them."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, get_args

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
class SourceFigures:
    """What the sources stage found (runner/pipeline/inputs.py): each source's read (its
    files, bytes or versions, and its checkpoint `since` and `until`), and where the
    checkpoints came from."""

    checkpoint_origin: str | None = None
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)

    def checkpoints(self, end: Literal["since", "until"]) -> dict[str, Any]:
        """Each source's checkpoint at the start (`since`) or the end (`until`) of the run."""
        return {name: read[end] for name, read in self.sources.items() if end in read}


@dataclass(frozen=True)
class VerdictFigures:
    """The batch's rows as the verdicts left them (runner/pipeline/judge.py)."""

    rows_read: int = 0
    rows_dropped: int = 0  # by expectations with action drop
    rows_quarantined: int = 0
    rejected_by_rule: dict[str, int] = field(default_factory=dict)  # rule -> rows


@dataclass(frozen=True)
class WriteFigures:
    """What the written buckets hold (runner/pipeline/figures.py `write_figures`, from the
    bucket writers' result rows): rows by outcome, files, bytes, buckets."""

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
    bytes_written: int = 0  # data files, change data files and deletion vectors
    change_data_files: int = 0  # Delta's change data feed: files of this commit's changes
    buckets_touched: int = 0
    partitions_touched: int = 0
    table_type: str = "COPY_ON_WRITE"
    buckets_rewritten: int = 0  # MERGE_ON_READ: stored buckets past the thresholds, rewritten
    buckets_with_deletion_vectors: int = 0  # MERGE_ON_READ: buckets whose files got DVs
    stored_files_searched: int = 0  # stored files the batch's keys were looked for in
    stored_files_ruled_out: int = 0  # of those, not read: their key filters ruled out every key

    @property
    def rows_changed(self) -> int:
        """The rows the write changed in the table: inserted, updated or deleted."""
        return self.inserted + self.updated + self.deleted


class Rewritten(Protocol):
    """The summary of an action that replaces files by new ones (a compaction, an expansion)."""

    version: int | None
    rows: int
    files_read: int
    files_written: int
    bytes_written: int


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

    @classmethod
    def rewrite(cls, done: Rewritten, instant: str | None = None) -> ActionFigures:
        """A rewrite's figures: the rows it moved, the files it read and replaced, the ones
        it wrote."""
        return cls(
            cls.committed_or_not(done.version),
            done.version,
            instant,
            rows_read=done.rows,
            files_added=done.files_written,
            files_removed=done.files_read,
            bytes_written=done.bytes_written,
        )

    def record_fields(self) -> dict[str, Any]:
        """Its record's fields (runner/observe/record.py `RunRecord`): the rows it read and
        the files it wrote, in the typed figures a run's record holds them in."""
        files = WriteFigures(
            files_added=self.files_added,
            files_removed=self.files_removed,
            bytes_written=self.bytes_written,
        )
        return {
            "outcome": self.outcome,
            "version": self.version,
            "instant": self.instant,
            "verdicts": VerdictFigures(rows_read=self.rows_read),
            "write": files,
        }


# The run summary's parts that are figures, by their field in RunSummary: their own fields
# are the summary's, in its `to_dict()` and as its attributes (`summary.inserted`).
FIGURE_PARTS = ("inputs", "verdicts", "write")


@dataclass
class RunSummary:
    """A run's summary, assembled from the typed figures of its stages (the same values its
    record in the history is made from: runner/observe/record.py)."""

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
    inputs: SourceFigures = field(default_factory=SourceFigures)
    verdicts: VerdictFigures = field(default_factory=VerdictFigures)
    write: WriteFigures = field(default_factory=WriteFigures)
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
    # target.catalog: the table's entry after the commit (runner/catalog/ Registration)
    catalog: dict[str, Any] | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)
    # bulk_insert: "the source files" when the writers read the rows themselves, else
    # "Spark (why)": the rows then cross the slower Arrow hand-off
    rows_from: str | None = None
    merged_on: str | None = None  # the driver, or Spark executors (and why)

    def __getattr__(self, name: str) -> Any:
        """A figure by its own name (`summary.inserted`, `summary.rows_read`), as callers
        of `run_pipeline` have always read it; only called for a name that is not a field."""
        if not name.startswith("_"):
            for part in FIGURE_PARTS:
                value = self.__dict__.get(part)
                if value is not None and name in value.__dataclass_fields__:
                    return getattr(value, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def to_dict(self) -> dict[str, Any]:
        """Flat, as --summary-json writes it: each figure part's fields in its place."""
        flat: dict[str, Any] = {}
        for name, value in asdict(self).items():
            if name in FIGURE_PARTS:
                flat.update(value)
            else:
                flat[name] = value
        return flat

    def render(self) -> str:
        if self.batch_already_committed:
            return (
                f"{self.pipeline}: batch {self.batch_id} was already committed to {self.table}; "
                "nothing to do"
            )
        if self.nothing_new:
            sources = ", ".join(self.inputs.sources)
            return (
                f"{self.pipeline}: nothing new in {sources}{self._recorded()} "
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
        if any(info.get("start") == "latest" for info in self.inputs.sources.values()):
            return (
                "; no records after the latest offsets; starting points recorded in version "
                f"{self.version}: the next run reads what arrives after them"
            )
        return f"; the chosen checkpoints are recorded in version {self.version}"

    def _stage_times(self) -> str:
        return "  ".join(f"{k} {v:.1f}s" for k, v in self.stage_seconds.items())

    def _write_lines(self) -> list[str]:
        """What the commit holds: rows by outcome, files and bytes."""
        w = self.write
        changed = w.files_added or w.files_removed or w.buckets_with_deletion_vectors
        if self.dry_run:
            head = "would commit a new version" if changed else "would commit nothing"
        elif self.version is not None and self.batch_id and not changed:
            head = f"recorded batch {self.batch_id} in version {self.version} (no row changed)"
        elif self.version is not None:
            head = f"committed version {self.version}"
        else:
            head = "nothing to commit (no row changed)"
        return [
            f"{self.pipeline}: {self.operation} {head} of {self.table}",
            f"  instant      {self.instant}   run {self.run_id}",
            f"  rows read    {self.verdicts.rows_read:,}",
            f"  inserted     {w.inserted:,}   updated {w.updated:,}   "
            + (f"unchanged {w.unchanged:,}   " if w.unchanged else "")
            + f"deleted {w.deleted:,}",
            f"  dropped      {w.duplicates_dropped:,} duplicates in the batch, "
            f"{w.stale_skipped:,} older than stored, {w.deletes_missing:,} deletes of "
            "missing keys",
            f"  files        +{w.files_added} -{w.files_removed}   "
            + (f"+{w.change_data_files} change data   " if w.change_data_files else "")
            + f"{human_size(w.bytes_written)} written   {w.buckets_touched} bucket(s) in "
            f"{w.partitions_touched} partition(s) "
            + ("rewritten" if w.table_type == "COPY_ON_WRITE" else "changed"),
        ]

    def _merge_lines(self) -> list[str]:
        """How the batch was merged: a change feed's events, deletion vectors, the place."""
        w = self.write
        lines = []
        if w.scd_type == 1:
            lines.append(
                f"  changes      SCD type 1: {w.late_events:,} late event(s) skipped (the "
                f"table holds a newer state), {w.superseded_events:,} replaced by a later "
                "event of the batch"
            )
        elif w.scd_type == 2:
            lines.append(
                f"  changes      SCD type 2: {w.late_events:,} late event(s) put in their "
                f"place in the history, {w.versions_closed:,} version(s) closed"
            )
        if w.table_type == "MERGE_ON_READ":
            lines.append(
                f"  merge        {w.buckets_with_deletion_vectors} bucket(s) got deletion "
                f"vectors, {w.buckets_rewritten} rewritten whole (past the "
                "target.compaction thresholds)"
            )
        if w.table_type == "MERGE_ON_READ" and w.stored_files_searched:  # its files have filters
            read = w.stored_files_searched - w.stored_files_ruled_out
            lines.append(
                f"  keys read    from {read:,} of {w.stored_files_searched:,} stored file(s) "
                f"the batch's buckets hold; {w.stored_files_ruled_out:,} ruled out by their "
                "key filters"
            )
        if self.rows_from:
            lines.append(f"  rows from    {self.rows_from}")
        if self.merged_on:
            lines.append(f"  merged on    {self.merged_on}")
        return lines

    def _input_lines(self) -> list[str]:
        """What the batch was read from: rejected rows, sources, checkpoints, skipped files."""
        v = self.verdicts
        lines = []
        if v.rejected_by_rule:
            rules = ", ".join(f"{k} {v:,}" for k, v in sorted(v.rejected_by_rule.items()))
            lines.append(
                f"  rejected     {v.rows_quarantined:,} quarantined, {v.rows_dropped:,} "
                f"dropped   by rule: {rules}"
            )
        for name, info in self.inputs.sources.items():
            if "since" in info:
                lines.append(f"  source       {name}: {_source_line(info)}")
        if self.inputs.checkpoint_origin:
            lines.append(f"  checkpoints  {self.inputs.checkpoint_origin}")
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
        if self.catalog:
            lines.append(f"  catalog      {catalog_line(self.catalog)}")
        return lines


def catalog_line(catalog: dict[str, Any]) -> str:
    """A registration in the catalog on one line (the summary's, the history's)."""
    where = f"{catalog['type']} {catalog['name']}"
    if catalog.get("error"):
        return (
            f"{where}: not registered: {catalog['error']} (the commit stands; the next run "
            "registers, or `runner sync`)"
        )
    created = f" (database {catalog['name'].split('.')[0]} created)"
    return (
        f"{where}: {catalog['done']}{created if catalog['database_created'] else ''}, "
        f"version {catalog['version']}"
    )


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
