"""`runner history`: the last runs, expansions, compactions, cleans and restores of a
pipeline's table, from its run history (runner/observe/history.py). Reads one small Delta
table; no JVM."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from runner.errors import UserError
from runner.observe.history import HISTORY_FORMAT, history_path, read, spec_history_path
from runner.storage.location import storage_options
from runner.summary import human_size

_AGO = re.compile(r"^(\d+)([mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


def history_of(target: str) -> str:
    """The history table of a spec file, of a runner table, or a history table itself."""
    if target.endswith((".yaml", ".yml")) and Path(target).is_file():
        from runner.spec import load_spec

        spec = load_spec(target, parse_transform=False)
        path = spec_history_path(spec)
        if path is None:
            raise UserError(f"{target} turns its history off (history.enabled: false)")
        return path
    try:
        table = DeltaTable(target, storage_options=storage_options(target))
    except TableNotFoundError:
        raise UserError(
            f"{target} is neither a spec file nor a Delta table; give the spec, the target "
            "table or the history table"
        ) from None
    if HISTORY_FORMAT in table.metadata().configuration:
        return target
    return history_path(target)


def since_moment(text: str, now: dt.datetime) -> dt.datetime:
    """--since: 30m, 24h, 7d ago, or a UTC date or time (2026-11-25, 2026-11-25T10:00)."""
    moment = moment_of(text, now)
    if moment is None:
        raise UserError(
            f"--since {text!r}: give a time ago (30m, 24h, 7d) or a UTC date or time "
            "(2026-11-25, 2026-11-25T10:00)"
        )
    return moment


def moment_of(text: str, now: dt.datetime) -> dt.datetime | None:
    """The moment `text` names, as --since takes it (a time ago: 30m, 24h, 7d; or a date
    or time, UTC unless it gives its zone), or None when it names none."""
    ago = _AGO.match(text.strip())
    if ago:
        return now - dt.timedelta(**{_UNITS[ago.group(2)]: int(ago.group(1))})
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def select(
    records: list[dict[str, Any]], limit: int, failed: bool, since: dt.datetime | None
) -> list[dict[str, Any]]:
    """The newest `limit` records (newest first) that match the filters."""
    chosen = [
        r
        for r in records
        if (not failed or r["outcome"] in ("failed", "interrupted"))
        and (since is None or r["started_at"] >= since)
    ]
    return chosen[:limit]


def history_records(target: str) -> tuple[str, list[dict[str, Any]]]:
    path = history_of(target)
    return path, read(path)


COLUMNS: tuple[str, ...] = (
    *("started (UTC)", "pipeline", "kind", "outcome", "version", "read", "ins", "upd"),
    *("del", "quar", "written", "seconds", "run"),
)


def render(path: str, records: list[dict[str, Any]], total: int) -> str:
    """The records as a table, newest first; an error's line under its record."""
    if not records:
        return f"{path}: no record matches ({total} in all)"
    rows: list[tuple[str, ...]] = [COLUMNS]
    notes: dict[int, str] = {}
    for i, r in enumerate(records, start=1):
        rows.append(
            (
                f"{r['started_at']:%Y-%m-%d %H:%M:%S}",
                r["pipeline"],
                r["kind"],
                r["outcome"],
                "" if r["version"] is None else str(r["version"]),
                f"{r['rows_read']:,}",
                f"{r['inserted']:,}",
                f"{r['updated']:,}",
                f"{r['deleted']:,}",
                f"{r['rows_quarantined']:,}",
                human_size(r["bytes_written"]),
                f"{r['seconds']:.1f}",
                r["run_id"],
            )
        )
        if r["error_message"]:
            stage = f" in stage {r['failed_stage']}" if r["failed_stage"] else ""
            notes[i] = f"  {r['error_class'] or 'error'}{stage}: {r['error_message']}"
        elif "not registered" in (r.get("catalog") or ""):  # no column: an older history
            notes[i] = f"  catalog {r['catalog']}"
    widths = [max(len(row[c]) for row in rows) for c in range(len(COLUMNS))]
    lines = []
    for i, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if i in notes:
            lines.append(notes[i])
    lines.append(f"{len(records)} of {total} record(s) in {path}")
    return "\n".join(lines)
