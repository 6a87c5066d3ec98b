"""`runner read`: incremental pulls and point-in-time reads of a runner table, without Spark.

`--since A [--until B]` on a table with Delta's change data feed (target.change_data_feed)
returns the changes of the commits whose instant is in (A, B]: inserted rows, updated rows
before and after, deleted rows, with `_change_type`, `_commit_version` and
`_commit_timestamp` as delta-spark's readChangeFeed names them (runner.delta.change_feed).
On a table without one it returns the rows whose `_commit_time` is in (A, B], as Hudi's
incremental query does: the rows each commit in that range wrote, in their latest state (a
row deleted since is missing, which a note on stderr says). Only files whose `_commit_time`
statistics can hold such rows are opened. `--as-of` reads the table as it was: a version
number, or an instant (the newest commit whose instant is at or before it). `--key` reads
a few record keys from the files that can hold them (runner/commands/key_lookup.py).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from runner.delta.arrow_read import read_live
from runner.delta.change_feed import (
    CHANGE_COLUMNS,
    has_change_feed,
    plan_changes,
    read_changes,
    versions_for_instants,
)
from runner.delta.directory import canonical, missing_files, walk
from runner.delta.log_replay import deletion_vectors
from runner.delta.snapshot import add_actions
from runner.delta.versions import is_instant, version_named
from runner.errors import UserError
from runner.storage.location import TableLocation, locate
from runner.storage.meta_columns import CHANGE_TYPE, COMMIT_TIME


@dataclass(frozen=True)
class ReadResult:
    rows: pa.Table
    version: int  # the version read; of a change feed read, the latest version of the table
    files_read: int
    files_total: int
    note: str | None = None  # to say once, beside the count
    # a change feed read: the first and last versions whose changes were read (None: none)
    changes: tuple[int, int] | None = None
    change_feed: bool = False  # the rows are changes (read_changes' columns)

    def describe(self, path: str) -> str:
        if self.change_feed:
            return self._describe_changes(path)
        return (
            f"{self.rows.num_rows:,} row(s) of {path} at version {self.version}, from "
            f"{self.files_read} of {self.files_total} file(s)"
        )

    def _describe_changes(self, path: str) -> str:
        if self.changes is None:
            return f"0 change row(s) of {path}: no commit in that range"
        counts = {
            str(row["values"]): int(row["counts"])
            for row in pc.value_counts(self.rows.column(CHANGE_TYPE)).to_pylist()
        }
        first, last = self.changes
        return (
            f"{self.rows.num_rows:,} change row(s) of {path} in versions {first}..{last} "
            f"({counts.get('insert', 0):,} inserted, {counts.get('update_postimage', 0):,} "
            f"updated with a row before and after each, {counts.get('delete', 0):,} deleted), "
            f"from {self.files_read} file(s)"
        )


def read_rows(
    path: str,
    since: str | None = None,
    until: str | None = None,
    as_of: str | None = None,
    as_of_business_time: str | None = None,
) -> ReadResult:
    location = locate(path)
    try:
        table = DeltaTable(path, storage_options=location.storage_options())
    except TableNotFoundError:
        raise UserError(f"no Delta table at {path}") from None
    since, until = instant_of("--since", since), instant_of("--until", until)
    pull = since is not None or until is not None
    point_in_time = as_of is not None or as_of_business_time is not None
    if pull and not point_in_time and has_change_feed(table):
        return _read_changes(location, table, since, until)
    note = None
    if pull and not has_change_feed(table):
        note = (
            f"note: deletes are not included: {path} has no change data feed, so "
            "--since/--until return the rows committed in that range in their current "
            "state, and a row deleted since is missing; set target.change_data_feed: true "
            "in its spec to read inserts, updates and deletes (kept from the next run on)"
        )
    if as_of is not None:
        load_as_of(location, table, as_of)
    result = _read_state(location, table, since, until, as_of_business_time)
    return replace(result, note=note)


def instant_of(option: str, value: str | None) -> str | None:
    """The instant (yyyyMMddHHmmssSSS, UTC) of --since or --until: given as one, or as
    `runner history --since` takes a moment (7d, 24h, 30m ago; a date or time)."""
    from runner.commands.history import moment_of

    if value is None or is_instant(value):
        return value
    moment = moment_of(value, dt.datetime.now(dt.UTC))
    if moment is None:
        raise UserError(
            f"{option} {value!r} is not an instant; write yyyyMMddHHmmssSSS, e.g. "
            "20261122093000000 (the _commit_time of a row, or a run summary's instant), a "
            "time ago (30m, 24h, 7d) or a UTC date or time (2026-11-25, 2026-11-25T10:00)"
        )
    utc = moment.astimezone(dt.UTC)
    return f"{utc:%Y%m%d%H%M%S}{utc.microsecond // 1000:03d}"


def _read_changes(
    location: TableLocation, table: DeltaTable, since: str | None, until: str | None
) -> ReadResult:
    """The change feed of the commits whose instant is in (since, until]."""
    span = versions_for_instants(location, table, since, until)
    if span is None:
        schema = pa.schema([*pa.schema(table.schema().to_arrow()), *CHANGE_COLUMNS])
        return ReadResult(schema.empty_table(), table.version(), 0, 0, change_feed=True)
    plan = plan_changes(location, table, *span).between_instants(since, until)
    files = len(plan.files)
    rows = read_changes(location, plan)
    return ReadResult(rows, table.version(), files, files, changes=span, change_feed=True)


def _read_state(
    location: TableLocation,
    table: DeltaTable,
    since: str | None,
    until: str | None,
    as_of_business_time: str | None,
) -> ReadResult:
    """The rows of the loaded version, those committed in (since, until] if given."""
    path = location.uri
    actions = add_actions(table).to_pylist()
    schema = pa.schema(table.schema().to_arrow())
    wanted = None
    if since is not None or until is not None:
        if COMMIT_TIME not in schema.names:
            raise UserError(
                f"{path} has no {COMMIT_TIME} column: --since/--until need a runner table"
            )
        wanted = pc.field(COMMIT_TIME).is_valid()
        if since is not None:
            wanted &= pc.field(COMMIT_TIME) > since
        if until is not None:
            wanted &= pc.field(COMMIT_TIME) <= until
    keep = [row for row in actions if _may_hold(row, since, until)]
    # a MERGE_ON_READ table: each file's deletion vector, from the log at this version
    vectors = deletion_vectors(location, table)
    # delta-rs reads any Delta table, partitioned too, but refuses one whose protocol
    # allows deletion vectors (a MERGE_ON_READ table, also once compacted and without any)
    # or type widening (older files may hold a column in a narrower type: read_live casts)
    features = table.protocol().reader_features or []
    delta_rs_refuses = "deletionVectors" in features or "typeWidening" in features
    if as_of_business_time is not None:
        valid = _valid_at(path, table.metadata().configuration, schema, as_of_business_time)
        wanted = valid if wanted is None else wanted & valid
    if wanted is None and not vectors and not delta_rs_refuses:
        return ReadResult(table.to_pyarrow_table(), table.version(), len(keep), len(actions))
    files = [(unquote(row["path"]), vectors.get(unquote(row["path"]))) for row in keep]
    rows = read_live(location, schema, files, wanted)
    return ReadResult(rows, table.version(), len(keep), len(actions))


def _valid_at(
    path: str, configuration: dict[str, str], schema: pa.Schema, moment: str
) -> pc.Expression:
    """SCD type 2: the versions valid at `moment`, a value of the table's sequence column
    (start <= moment < end, or no end)."""
    if configuration.get("runner.scd.type") != "2":
        raise UserError(
            f"--as-of-business-time reads the history of an SCD type 2 table (target.scd.type "
            f"2); {path} keeps no history"
        )
    start = configuration["runner.scd.start_column"]
    end = configuration["runner.scd.end_column"]
    typ = schema.field(start).type
    try:
        value = pa.scalar(moment).cast(typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise UserError(
            f"--as-of-business-time {moment!r} is not a {typ} like the table's "
            f"{configuration['runner.cdc.sequence_by']} (the sequence its history is kept in)"
        ) from None
    return (pc.field(start) <= value) & (pc.field(end).is_null() | (pc.field(end) > value))


def load_as_of(location: TableLocation, table: DeltaTable, as_of: str) -> None:
    """Load the version `as_of` names (a version number, or an instant: the newest commit at
    or before it); refused when `runner clean` removed its files."""
    latest = table.version()
    table.load_as_version(version_named(table, as_of, "--as-of"))
    _check_files_kept(location, table, latest)


def _check_files_kept(location: TableLocation, table: DeltaTable, latest: int) -> None:
    """An older version whose files `runner clean` removed cannot be read: say so, and which
    versions can, instead of failing on the first missing file."""
    version = table.version()
    gone = missing_files(location, _files_of(location, table))
    if not gone:
        return
    present = {canonical(f.path) for f in walk(location)}
    oldest_whole = None
    for older in range(latest, version, -1):
        table.load_as_version(older)
        if not {canonical(p) for p in _files_of(location, table)} <= present:
            break
        oldest_whole = older
    readable = (
        f"versions {oldest_whole}..{latest} can be read"
        if oldest_whole is not None
        else "no later version has all its files either"
    )
    raise UserError(
        f"version {version} of {location.uri} cannot be read: {len(gone)} of its files are "
        f"gone (e.g. {gone[0]}), removed by `runner clean`, which keeps the files of the "
        f"last target.cleaning.retain_commits versions; {readable}"
    )


def _files_of(location: TableLocation, table: DeltaTable) -> list[str]:
    """The data and deletion vector files of the loaded version, table-relative."""
    paths = [unquote(p) for p in table.get_add_actions(flatten=True).column("path").to_pylist()]
    vectors = deletion_vectors(location, table).values()
    return paths + [dv.relative_path for dv in vectors if dv.relative_path]


def _may_hold(row: dict[str, Any], since: str | None, until: str | None) -> bool:
    low, high = row.get(f"min.{COMMIT_TIME}"), row.get(f"max.{COMMIT_TIME}")
    if low is None or high is None:
        return True
    return (since is None or high > since) and (until is None or low <= until)


def write_rows(rows: pa.Table, fmt: str, out: str | None) -> None:
    """Rows as JSON lines, CSV or parquet, to `out` or (json and csv) to stdout."""
    if fmt == "parquet":
        pq.write_table(rows, out)
        return
    target = open(out, "w", encoding="utf-8") if out else sys.stdout  # noqa: SIM115
    try:
        if fmt == "csv":
            sink = pa.BufferOutputStream()
            pacsv.write_csv(rows, sink)
            text = sink.getvalue().to_pybytes().decode()
            target.write(text if text.endswith("\n") else text + "\n")
        else:
            for batch in rows.to_batches():
                for record in batch.to_pylist():
                    target.write(json.dumps(record, default=str) + "\n")
    finally:
        if out:
            target.close()
