"""A change feed's events applied to one bucket (target.cdc): SCD type 1 (each key's latest
state) or type 2 (every version, with the sequence values it is valid between).

Vectorized pyarrow and numpy over one bucket: the change-feed merge rule
(runner/write/merge_rules.py) that every write handle calls alike (runner/write/handles.py);
the result replaces the stored rows of the keys the batch changes.

Each key's history is rebuilt from events, in sequence_by order:
- the stored state as events: the live row (type 1) or every version (type 2: an upsert at
  its start, and a delete at its end when no version starts there), and the bucket's
  tombstones (deletes the table remembers, runner/write/tombstones.py);
- the batch's events. Of a key's events at one sequence value the stored one is kept (the
  batch's is a re-delivery), else the batch's last (as a precombine tie), except that the
  batch's delete beats a stored upsert (a change data feed's delete carries the deleted
  row's own sequence value); the others are
  counted as duplicates.
An event older than the key's newest stored one is late: type 1 skips it (the table already
holds a newer state), type 2 puts it in its place in the history. With ignore_null_updates
an upsert's null columns take the values of the key's event before it (until a delete).
Type 1 keeps a key's last event (no row after a delete, and a tombstone); type 2 keeps each
upsert as a version that ends at the key's next event.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runner.spec.model import CdcSpec, ScdSpec
from runner.storage.meta_columns import COMMIT_TIME, META_COLUMNS, RECORD_KEY
from runner.storage.parquet_file import conform
from runner.write import tombstones as tomb
from runner.write.bucket_merge import DELETE, BucketMerge

_SOURCE = "__runner_source"  # 0: the table's state, 1: the batch
_ORDER = "__runner_order"  # among the batch's events at one sequence value: later input last


@dataclass(frozen=True)
class ChangeFeed:
    """What applying a change feed's events to a bucket needs besides the rows."""

    cdc: CdcSpec
    scd: ScdSpec
    schema: pa.Schema  # the table's file schema
    instant: str  # the commit's

    @property
    def history(self) -> bool:
        """SCD type 2: every version is kept."""
        return self.scd.type == 2


@dataclass(frozen=True)
class Applied:
    merge: BucketMerge
    tombstones: pa.Table  # the bucket's whole set after the batch
    tombstones_changed: bool


@dataclass(frozen=True)
class _Events:
    """Each key's events in sequence order, and per event what the outcome turns on."""

    table: pa.Table
    from_batch: np.ndarray
    deletes: np.ndarray
    changed: np.ndarray  # the event's key has an event of the batch
    prev_upsert: np.ndarray  # the key's event before it is an upsert
    last: np.ndarray  # the key's last event

    @classmethod
    def of(cls, events: pa.Table) -> _Events:
        keys = events.column(RECORD_KEY)
        from_batch = _from_batch(events)
        deletes = events.column(DELETE).to_numpy(zero_copy_only=False)
        first = _starts(keys)
        key_number = np.cumsum(first) - 1
        changed_key = np.zeros(int(first.sum()), dtype=bool)
        changed_key[key_number[from_batch]] = True
        prev_upsert = np.zeros(events.num_rows, dtype=bool)
        prev_upsert[1:] = ~first[1:] & ~deletes[:-1]
        last = np.append(first[1:], True) if events.num_rows else first
        return cls(events, from_batch, deletes, changed_key[key_number], prev_upsert, last)


def apply_changes(
    rows: pa.Table, stored: pa.Table, tombstones: pa.Table, feed: ChangeFeed
) -> Applied:
    """The bucket's new rows for the keys of `rows` (every event of the batch, DELETE set
    on deletes), given `stored` (the live stored rows of those keys, in the file schema)
    and the bucket's unexpired `tombstones`."""
    in_batch = pc.is_in(tombstones.column(RECORD_KEY), value_set=rows.column(RECORD_KEY))
    ordered, duplicates, late = _ordered_events(rows, stored, tombstones.filter(in_batch), feed)
    events = _Events.of(ordered)
    if feed.history:
        write, counts, remembered = _history(events, feed)
    else:
        write, counts, remembered = _latest_state(events, stored, feed.schema)
    counts["late"] = late
    counts["duplicate"] = duplicates
    keys = ordered.column(RECORD_KEY)
    changed_keys = pc.unique(pc.filter(keys, pa.array(events.changed)))
    kept_tombstones = tombstones.filter(
        pc.invert(pc.is_in(tombstones.column(RECORD_KEY), value_set=changed_keys))
    )
    fresh = ordered.filter(pa.array(remembered))
    fresh = pa.table(
        {
            RECORD_KEY: fresh.column(RECORD_KEY),
            tomb.SEQUENCE: fresh.column(feed.cdc.sequence_by),
            tomb.DELETED_AT: pc.fill_null(fresh.column(tomb.DELETED_AT), feed.instant),
        }
    ).cast(tombstones.schema)
    return Applied(
        merge=BucketMerge(
            pc.filter(changed_keys, pc.is_in(changed_keys, stored.column(RECORD_KEY))),
            write,
            counts,
        ),
        tombstones=pa.concat_tables([kept_tombstones, fresh]),
        tombstones_changed=fresh.num_rows > 0 or kept_tombstones.num_rows < tombstones.num_rows,
    )


def _ordered_events(
    rows: pa.Table, stored: pa.Table, tombstones: pa.Table, feed: ChangeFeed
) -> tuple[pa.Table, int, int]:
    """The stored state, the tombstones and the batch as events sorted by key and sequence,
    one per (key, sequence value), late ones skipped unless the history keeps them, nulls
    filled with ignore_null_updates; and how many of the batch's were duplicates, and late."""
    seq = feed.cdc.sequence_by
    scd = feed.scd if feed.history else None
    events = _events(rows, stored, tombstones, seq, scd)
    events = events.take(
        pc.sort_indices(
            events,
            sort_keys=[
                (RECORD_KEY, "ascending", "at_end"),
                (seq, "ascending", "at_start"),
                (_SOURCE, "ascending", "at_end"),
                (_ORDER, "ascending", "at_end"),
            ],
        )
    )
    kept = _one_per_sequence(events, seq, deletes_win=scd is None)
    duplicates = _count(_from_batch(events) & ~kept)
    events = events.filter(pa.array(kept))
    late = _late(events, seq)
    if scd is None:  # the table holds a newer state: a late event changes nothing
        events = events.filter(pa.array(~late))
    if feed.cdc.ignore_null_updates:
        skip = {seq, *(scd.history_columns if scd is not None else ())}
        events = _fill_nulls(events, feed.schema, skip)
    return events, duplicates, _count(late)


def _history(events: _Events, feed: ChangeFeed) -> tuple[pa.Table, dict[str, int], np.ndarray]:
    """Type 2: the changed keys' versions, the counts, and the deletes to remember (those
    no version's end records)."""
    from_batch, deletes, prev_upsert = events.from_batch, events.deletes, events.prev_upsert
    write, closed = _versions(events.table, events.changed & ~deletes, events.last, feed)
    counts = {
        "insert": _count(from_batch & ~deletes & ~prev_upsert),
        "update": _count(from_batch & ~deletes & prev_upsert),
        "deleted": _count(from_batch & deletes & prev_upsert),
        "delete_missing": _count(from_batch & deletes & ~prev_upsert),
        "closed": closed,
    }
    return write, counts, events.changed & deletes & ~prev_upsert


def _latest_state(
    events: _Events, stored: pa.Table, schema: pa.Schema
) -> tuple[pa.Table, dict[str, int], np.ndarray]:
    """Type 1: each changed key's last event as its row (none after a delete), the counts,
    and the deletes to remember."""
    final = events.changed & events.last
    deletes = events.deletes
    stored_rows = _rows_per_key(stored, events.table.column(RECORD_KEY))
    had_row = stored_rows > 0
    counts = {
        "insert": _count(final & ~deletes & ~had_row),
        "update": _count(final & ~deletes & had_row),
        "deleted": int(stored_rows[final & deletes].sum()),
        "delete_missing": _count(final & deletes & ~had_row),
        "superseded": _count(events.from_batch & ~events.last),
    }
    write = conform(events.table.filter(pa.array(final & ~deletes)), schema)
    return write, counts, final & deletes


def _events(
    rows: pa.Table,
    stored: pa.Table,
    tombstones: pa.Table,
    seq: str,
    scd: ScdSpec | None,
) -> pa.Table:
    """The stored state and the batch as one table of events: every column of the file, plus
    DELETE, _SOURCE, _ORDER and the tombstones' DELETED_AT."""
    schema = stored.schema
    parts = [_tagged(stored, deletes=False, source=0)]
    if scd is not None:  # a version's end with no version starting there: a delete
        ends = stored.filter(pc.is_valid(stored.column(scd.end_column)))
        ends = pa.table({RECORD_KEY: ends.column(RECORD_KEY), seq: ends.column(scd.end_column)})
        starts = pa.table({RECORD_KEY: stored.column(RECORD_KEY), seq: stored.column(seq)})
        closing = ends.join(starts, keys=[RECORD_KEY, seq], join_type="left anti")
        parts.append(_tagged(conform(closing, schema), deletes=True, source=0))
    remembered = pa.table(
        {RECORD_KEY: tombstones.column(RECORD_KEY), seq: tombstones.column(tomb.SEQUENCE)}
    )
    parts.append(
        _tagged(
            conform(remembered, schema),
            deletes=True,
            source=0,
            at=tombstones.column(tomb.DELETED_AT),
        )
    )
    batch = conform(rows, schema)
    order = pa.array(-np.arange(rows.num_rows, dtype=np.int64))  # rows come newest first
    parts.append(
        _tagged(batch, deletes=pc.fill_null(rows.column(DELETE), False), source=1, order=order)
    )
    return pa.concat_tables(parts)


def _tagged(
    table: pa.Table,
    deletes: bool | pa.ChunkedArray,
    source: int,
    order: pa.Array | None = None,
    at: pa.ChunkedArray | None = None,
) -> pa.Table:
    n = table.num_rows
    flags = pa.array(np.full(n, deletes)) if isinstance(deletes, bool) else deletes
    return (
        table.append_column(DELETE, flags)
        .append_column(_SOURCE, pa.array(np.full(n, source, dtype=np.int8)))
        .append_column(_ORDER, order if order is not None else pa.array(np.zeros(n, np.int64)))
        .append_column(tomb.DELETED_AT, at if at is not None else pa.nulls(n, pa.string()))
    )


def _from_batch(events: pa.Table) -> np.ndarray:
    source: np.ndarray = events.column(_SOURCE).to_numpy() == 1
    return source


def _count(mask: np.ndarray) -> int:
    return int(np.count_nonzero(mask))


def _same_as_previous(values: pa.ChunkedArray) -> np.ndarray:
    """Per row, whether it equals the row before (two nulls are equal)."""
    n = len(values)
    same = np.zeros(n, dtype=bool)
    if n > 1:
        now, before = values.slice(1), values.slice(0, n - 1)
        equal = pc.fill_null(pc.equal(now, before), False)
        both_null = pc.and_(pc.is_null(now), pc.is_null(before))
        same[1:] = pc.or_(equal, both_null).to_numpy(zero_copy_only=False)
    return same


def _starts(keys: pa.ChunkedArray) -> np.ndarray:
    """Where a run of one key starts (keys sorted)."""
    return ~_same_as_previous(keys)


def _one_per_sequence(events: pa.Table, seq: str, deletes_win: bool) -> np.ndarray:
    """One event per (key, sequence value): the stored one if any (sorted first), else the
    batch's last; but a delete of the batch beats a stored upsert at its sequence value: a
    change data feed's delete carries the deleted row, its sequence value included (a
    chained pipeline's source, runner/sources/delta.py)."""
    n = events.num_rows
    if n == 0:
        return np.zeros(0, dtype=bool)
    same = _same_as_previous(events.column(RECORD_KEY)) & _same_as_previous(events.column(seq))
    starts = np.flatnonzero(~same)
    ends = np.append(starts[1:], n)
    from_batch = _from_batch(events)
    deletes = pc.fill_null(events.column(DELETE), False).to_numpy(zero_copy_only=False)
    has_stored = np.maximum.reduceat((~from_batch).astype(np.int8), starts) > 0
    stored_upsert = np.maximum.reduceat((~from_batch & ~deletes).astype(np.int8), starts) > 0
    batch_delete = np.where(from_batch & deletes, np.arange(n), -1)
    last_delete = np.maximum.reduceat(batch_delete, starts)
    chosen = np.where(has_stored, starts, ends - 1)
    if deletes_win:  # type 1 only: a history keeps the version that starts there
        chosen = np.where(stored_upsert & (last_delete >= 0), last_delete, chosen)
    keep = np.zeros(n, dtype=bool)
    keep[chosen] = True
    return keep


def _late(events: pa.Table, seq: str) -> np.ndarray:
    """The batch's events older than their key's newest stored event."""
    stored = events.filter(pc.equal(events.column(_SOURCE), 0))
    newest = stored.group_by(RECORD_KEY).aggregate([(seq, "max")])
    at = pc.index_in(events.column(RECORD_KEY), value_set=newest.column(RECORD_KEY))
    stored_max = pc.take(newest.column(f"{seq}_max"), at)
    mine = events.column(seq)
    older = pc.fill_null(pc.less(mine, stored_max), False)
    unordered = pc.and_(pc.is_null(mine), pc.is_valid(stored_max))  # nulls sort first
    late: np.ndarray = pc.or_(older, unordered).to_numpy(zero_copy_only=False)
    late &= _from_batch(events)
    return late


def _fill_nulls(events: pa.Table, schema: pa.Schema, skip: set[str]) -> pa.Table:
    """ignore_null_updates: each null data column of an event takes the value of the key's
    latest earlier event that has one, back to the key's last delete."""
    n = events.num_rows
    index = np.arange(n)
    deletes = events.column(DELETE).to_numpy(zero_copy_only=False)
    starts = _starts(events.column(RECORD_KEY))
    starts[1:] |= deletes[:-1]
    segment_start = np.maximum.accumulate(np.where(starts, index, 0))
    for name in schema.names:
        if name in META_COLUMNS or name in skip:
            continue
        column = events.column(name)
        valid = column.is_valid().to_numpy(zero_copy_only=False)
        latest = np.maximum.accumulate(np.where(valid, index, -1))
        pick = np.where(latest >= segment_start, latest, -1)
        events = events.set_column(
            events.schema.get_field_index(name), name, column.take(pa.array(pick, mask=pick < 0))
        )
    return events


def _rows_per_key(stored: pa.Table, keys: pa.ChunkedArray) -> np.ndarray:
    """Per entry of `keys`, how many live rows the table stores for it."""
    per_key = stored.group_by(RECORD_KEY).aggregate([(RECORD_KEY, "count")])
    at = pc.index_in(keys, value_set=per_key.column(RECORD_KEY))
    counts: np.ndarray = pc.fill_null(
        pc.take(per_key.column(f"{RECORD_KEY}_count"), at), 0
    ).to_numpy(zero_copy_only=False)
    return counts


def _versions(
    events: pa.Table, is_version: np.ndarray, last: np.ndarray, feed: ChangeFeed
) -> tuple[pa.Table, int]:
    """Type 2: the upserts of the changed keys as versions, each ending at its key's next
    event; and how many versions this batch closed (an end they did not have)."""
    scd, seq, instant = feed.scd, feed.cdc.sequence_by, feed.instant
    values = events.column(seq).combine_chunks()
    following = pa.concat_arrays([values.slice(1), pa.nulls(1, values.type)])
    end = pc.if_else(pa.array(last), pa.nulls(len(values), values.type), following)
    old_end = events.column(scd.end_column)
    kept_end = pc.fill_null(pc.equal(old_end, end), False)
    newly_closed = pc.and_(pc.is_valid(end), pc.invert(kept_end))
    unchanged = pc.or_(kept_end, pc.and_(pc.is_null(old_end), pc.is_null(end)))
    touched = pc.or_(pa.array(_from_batch(events)), pc.invert(unchanged))
    commit_time = pc.if_else(touched, instant, events.column(COMMIT_TIME))
    versions = (
        events.set_column(
            events.schema.get_field_index(scd.start_column), scd.start_column, events.column(seq)
        )
        .set_column(events.schema.get_field_index(scd.end_column), scd.end_column, end)
        .set_column(
            events.schema.get_field_index(scd.current_column), scd.current_column, pc.is_null(end)
        )
        .set_column(events.schema.get_field_index(COMMIT_TIME), COMMIT_TIME, commit_time)
    )
    mask = pa.array(is_version)
    closed = int(pc.sum(pc.filter(newly_closed, mask)).as_py() or 0)
    return conform(versions.filter(mask), feed.schema), closed
