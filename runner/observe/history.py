"""The run history: one record per run, expansion, compaction, clean and restore of a
pipeline, in an append-only Delta table beside the target (never in it), that any Delta
reader can query.

Committed runs also carry their figures in the target's own commits; the history is what
keeps the others too: nothing new, already committed, failed (error class, one line, the
stage), and interrupted (a process killed mid-write, found by the next one from its
heartbeat: it committed nothing, see runner/storage/in_flight.py).

Writing the history is never a reason to fail: a run that committed stays committed when
its record cannot be written, and says so in a warning.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import structlog
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from runner.errors import UserError
from runner.observe.record import Kind, RunRecord
from runner.spec.model import PipelineSpec
from runner.storage.in_flight import Heartbeat, heartbeats
from runner.storage.location import locate, scheme, storage_options

log = structlog.get_logger(__name__)

HISTORY_DIR = "_runner_history"  # beside the target; Spark and Hive skip names starting with _
HISTORY_FORMAT = "runner.history.format"  # the history table's own configuration key
MAINTAIN_EVERY = 100  # versions: the one-file-per-record table is compacted this often
RETAIN_HOURS = 168  # what the maintenance leaves to readers of older versions

SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("kind", pa.string()),
        ("pipeline", pa.string()),
        ("table", pa.string()),
        ("spec_hash", pa.string()),
        ("operation", pa.string()),
        ("batch_id", pa.string()),
        ("instant", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("ended_at", pa.timestamp("us", tz="UTC")),
        ("seconds", pa.float64()),
        ("outcome", pa.string()),
        ("version", pa.int64()),
        ("error_class", pa.string()),
        ("error_message", pa.string()),
        ("failed_stage", pa.string()),
        ("rows_read", pa.int64()),
        ("inserted", pa.int64()),
        ("updated", pa.int64()),
        ("deleted", pa.int64()),
        ("unchanged", pa.int64()),
        ("rows_dropped", pa.int64()),
        ("rows_quarantined", pa.int64()),
        ("rejected_by_rule", pa.map_(pa.string(), pa.int64())),
        ("files_added", pa.int64()),
        ("files_removed", pa.int64()),
        ("bytes_written", pa.int64()),
        ("stage_seconds", pa.map_(pa.string(), pa.float64())),
        ("checkpoints_before", pa.string()),  # JSON: source name -> checkpoint
        ("checkpoints_after", pa.string()),
        ("sources", pa.list_(pa.string())),
        ("catalog", pa.string()),  # target.catalog: the registration after the commit
    ]
)
_MAPS = ("rejected_by_rule", "stage_seconds")
_JSON = ("checkpoints_before", "checkpoints_after")


def history_path(table: str) -> str:
    """Where a table's history lives unless its spec names a place: `_runner_history/<name>`
    in the table's parent directory (a relative path's parent may be the working directory:
    `orders` and `./orders` have the same history)."""
    path = table.rstrip("/")
    if scheme(path) == "" and os.path.basename(path) in (".", ".."):
        path = os.path.abspath(path)  # `runner history .` from inside the table
    elif scheme(path) == "" and path and "/" not in path:
        path = f"./{path}"
    parent, _, name = path.rpartition("/")
    if not name or not parent or parent.endswith(":/"):
        raise UserError(
            f"the table {table} has no parent directory to keep its history beside it; "
            "set history.path in the spec"
        )
    return f"{parent}/{HISTORY_DIR}/{name}"


def spec_history_path(spec: PipelineSpec) -> str | None:
    """The spec's history table, None when the spec turns the history off."""
    if not spec.history.enabled:
        return None
    return spec.history.path or history_path(spec.target.path)


def append(path: str, records: Sequence[RunRecord]) -> bool:
    """Append records to the history; a failure is a warning (`history_not_written`) and
    False, never an error: the work the records describe is done either way."""
    if not records:
        return True
    try:
        table = _open_or_create(path)
        # merge: a history written before a column was added gets it
        write_deltalake(table, _rows(records), mode="append", schema_mode="merge")
        _maintain(table)
    except Exception as failure:  # a read-only or full store, a permission, a network
        log.warning(
            "history_not_written",
            history=path,
            runs=[r.run_id for r in records],
            error=f"{type(failure).__name__}: {failure}",
        )
        return False
    log.info("history_written", history=path, runs=[r.run_id for r in records])
    return True


def read(path: str) -> list[dict[str, Any]]:
    """Every record of a history, newest first, as plain values (maps as dicts, checkpoints
    decoded)."""
    try:
        table = DeltaTable(path, storage_options=storage_options(path))
    except TableNotFoundError:
        raise UserError(
            f"no run history at {path}: no run has recorded one yet, or the spec names "
            "another place (history.path)"
        ) from None
    if HISTORY_FORMAT not in table.metadata().configuration:
        raise UserError(f"{path} is a Delta table but not a run history")
    rows = table.to_pyarrow_table().to_pylist()
    for row in rows:
        for name in _MAPS:
            row[name] = dict(row[name] or [])
        for name in _JSON:
            row[name] = json.loads(row[name]) if row[name] else {}
    return sorted(rows, key=lambda r: r["started_at"], reverse=True)


def recorded_instants(path: str, instants: Sequence[str]) -> set[str]:
    """Which of these instants the history already holds."""
    try:
        table = DeltaTable(path, storage_options=storage_options(path))
    except TableNotFoundError:
        return set()
    found = table.to_pyarrow_table(columns=["instant"])["instant"]
    return set(found.filter(pc.is_in(found, pa.array(list(instants)))).to_pylist())


def interrupted(spec: PipelineSpec, path: str, spec_hash: str, now: dt.datetime) -> list[RunRecord]:
    """Records for the table's writers that were killed: their heartbeat is under the
    table but their process is gone, and the history does not hold their instant yet."""
    try:
        dead = [b for b in heartbeats(locate(spec.target.path)) if not b.alive and b.what]
        if not dead:
            return []
        known = recorded_instants(path, [b.instant for b in dead])
        committed = _committed_instants(spec.target.path)
    except Exception as failure:  # the history is best effort: the run goes on
        log.warning("history_heartbeats_unread", error=f"{type(failure).__name__}: {failure}")
        return []
    return [
        _interrupted(spec, beat, spec_hash, now, committed.get(beat.instant))
        for beat in dead
        if beat.instant not in known
    ]


_KINDS: dict[str, Kind] = {
    "run": "run",
    "expansion": "expansion",
    "compaction": "compaction",
    "restore": "restore",
}
LOOK_BACK = 100  # commits searched for a killed writer's instant


def _committed_instants(table: str) -> dict[str, int]:
    """The instants of the table's latest commits, with their versions."""
    history = DeltaTable(table, storage_options=storage_options(table)).history(LOOK_BACK)
    found = {}
    for commit in history:
        ours = commit.get("runner")  # the run's identity and figures (commit_stage.py)
        if isinstance(ours, dict) and isinstance(ours.get("instant"), str):
            found[ours["instant"]] = commit["version"]
    return found


def _interrupted(
    spec: PipelineSpec, beat: Heartbeat, spec_hash: str, now: dt.datetime, version: int | None
) -> RunRecord:
    kind = _KINDS.get(beat.what, "run")
    started = dt.datetime.strptime(beat.instant, "%Y%m%d%H%M%S%f").replace(tzinfo=dt.UTC)
    what = (
        f"killed after its commit (version {version} holds its changes; its summary, "
        "services and cleanup did not run)"
        if version is not None
        else "killed before its commit (or its machine went away): nothing of it was committed"
    )
    return RunRecord(
        run_id=beat.run_id or beat.instant,
        kind=kind,
        pipeline=beat.pipeline or spec.name,
        table=spec.target.path,
        spec_hash=spec_hash if not beat.pipeline or beat.pipeline == spec.name else "",
        operation=spec.target.operation if kind == "run" else kind,
        started_at=started,
        ended_at=now - dt.timedelta(seconds=beat.age_seconds),  # its last heartbeat
        outcome="interrupted",
        instant=beat.instant,
        version=version,
        error_message=what,
    )


def _open_or_create(path: str) -> DeltaTable:
    options = storage_options(path)
    try:
        return DeltaTable(path, storage_options=options)
    except TableNotFoundError:
        pass
    try:
        return DeltaTable.create(
            path,
            SCHEMA,
            mode="ignore",  # another writer created it meanwhile: use theirs
            configuration={HISTORY_FORMAT: "1"},
            raise_if_key_not_exists=False,
            storage_options=options,
        )
    except Exception:
        return DeltaTable(path, storage_options=options)


def _maintain(table: DeltaTable) -> None:
    """Every MAINTAIN_EVERY versions, fold the small files (one per record) and remove the
    ones no reader of the last RETAIN_HOURS needs."""
    if table.version() % MAINTAIN_EVERY:
        return
    table.optimize.compact()
    table.vacuum(retention_hours=RETAIN_HOURS, dry_run=False)


def _rows(records: Sequence[RunRecord]) -> pa.Table:
    rows = []
    for r in records:
        figures = r.figures()
        row: dict[str, Any] = {
            name: figures[name] if name in figures else getattr(r, name, None)
            for name in SCHEMA.names
            if name != "seconds"
        }
        row["seconds"] = round(r.seconds, 3)
        for name in _MAPS:
            row[name] = list(row[name].items())
        for name in _JSON:
            row[name] = json.dumps(row[name], default=str, sort_keys=True)
        row["sources"] = list(r.sources)
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=SCHEMA)
