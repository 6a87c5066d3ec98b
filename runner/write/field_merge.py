"""Merges that build a key's new row from fields of its stored and incoming rows, not by
picking one of them whole: Hudi's partial-update payloads and the user's merger class.

Vectorized pyarrow over one bucket: the field-merge rule (runner/write/merge_rules.py)
that every write handle calls alike (runner/write/handles.py); the result replaces the
key's stored rows.

The bucket's incoming rows arrive in runs of one key, each run newest first (greatest
precombine value, nulls last, ties to the later input row): Spark sorts them so
(runner/pipeline/winners.py), and so does the merge on the driver (runner/write/driver_merge.py).
A key whose newest row carries the delete marker is deleted, whatever the mode.

- partial_update (Hudi's PartialUpdateAvroPayload): the batch's rows of a key fold into
  the newest, each null filled from the next newest row that has the field; then against
  the stored row, the one with the greater precombine value is the base (ties: the
  incoming) and its nulls are filled from the other.
- overwrite_non_defaults (OverwriteNonDefaultsWithLatestAvroPayload): the newest row of
  the batch; its non-null fields replace the stored ones, whatever the precombine values
  (a null is the Avro default of a runner column, so it keeps the stored value).
- custom: the user's Merger gets the stored rows and the batch's rows of the keys and
  returns the rows to keep for them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runner.errors import UserError
from runner.spec.model import MergerSpec
from runner.storage.meta_columns import (
    BUCKET,
    COMMIT_SEQNO,
    COMMIT_TIME,
    META_COLUMNS,
    PARTITION_PATH,
    RECORD_KEY,
)
from runner.storage.parquet_file import conform
from runner.user_code import import_user_class
from runner.write.bucket_merge import DELETE, BucketMerge, MergeSettings, run_bounds


class Merger:
    """Base of your own merge (target.merge_mode: custom, target.merger.class).

    `merge` runs once per touched bucket, on the executors (or driver threads), with:
    - stored: the table's live rows whose key the batch holds, every column of the table
      (the `_record_key`, `_partition_path`, ... meta columns first);
    - incoming: every row of the batch for those keys, in the same columns, in runs of one
      key, each run newest first (greatest precombine value, ties to the later input row).
    It returns the rows the table keeps for those keys (any number per key, none deletes
    the key), with `_record_key` and every data column; the other meta columns are the
    runner's. Keys whose newest incoming row is a delete are deleted before the call.
    Work on whole columns (pyarrow.compute), not row by row: it runs for every bucket.
    """

    def __init__(self, properties: Mapping[str, str]) -> None:
        self.properties = dict(properties)  # target.merger.properties

    def merge(self, stored: pa.Table, incoming: pa.Table) -> pa.Table:
        raise NotImplementedError(f"{type(self).__name__} must implement merge()")


class MergerError(UserError):
    """The user's merger failed or returned rows the table cannot take."""


def merger_error_in(failure: BaseException) -> MergerError | None:
    """The MergerError a Spark task raised, from the failure the driver sees (the task's
    traceback is in its text), so that the run reports it as the user's error."""
    found = re.search(rf"{MergerError.__name__}: (.+)", str(failure))
    return MergerError(found.group(1).strip()) if found else None


def load_merger(spec: MergerSpec) -> Merger:
    try:
        cls: type[Merger] = import_user_class(
            spec.class_path, spec.search_path, "target.merger.class", Merger
        )
    except UserError as exc:
        raise MergerError(str(exc)) from exc
    try:
        return cls(spec.properties)
    except Exception as exc:
        raise MergerError(
            f"target.merger.class {spec.class_path}: its constructor failed: {exc!r}"
        ) from exc


def merge_fields(
    rows: pa.Table,
    stored: pa.Table,
    settings: MergeSettings,
    schema: pa.Schema,
    merger: Merger | None = None,
) -> BucketMerge:
    """The bucket's new rows for the keys of `rows` (every incoming row, in key runs newest
    first) given `stored` (the live stored rows of those keys, in `schema`)."""
    starts = np.array([start for start, _ in run_bounds(rows.column(RECORD_KEY))], dtype=np.int64)
    newest = rows.take(starts)
    keys = newest.column(RECORD_KEY)
    deletes = pc.fill_null(newest.column(DELETE), False).to_numpy(zero_copy_only=False)
    per_key = stored.group_by(RECORD_KEY).aggregate([(RECORD_KEY, "count")])
    position = pc.index_in(keys, value_set=per_key.column(RECORD_KEY))
    has_stored = position.is_valid().to_numpy(zero_copy_only=False)
    stored_rows = pc.fill_null(pc.take(per_key.column(f"{RECORD_KEY}_count"), position), 0)
    stored_rows = stored_rows.to_numpy(zero_copy_only=False)
    drop_keys = pc.filter(keys, pa.array(has_stored))
    deleted = int(stored_rows[has_stored & deletes].sum())
    delete_missing = int(np.count_nonzero(~has_stored & deletes))

    if settings.merge_mode == "custom":
        assert merger is not None, "merge_mode custom loads the user's merger"
        live = pc.filter(keys, pa.array(~deletes))
        kept = _custom(merger, settings, rows, stored, live, schema)
        written = pc.is_in(live, value_set=kept.column(RECORD_KEY)).to_numpy(zero_copy_only=False)
        live_stored = has_stored[~deletes]
        live_rows = stored_rows[~deletes]
        counts = {
            "insert": int(np.count_nonzero(written & ~live_stored)),
            "update": int(np.count_nonzero(written & live_stored)),
            "deleted": deleted + int(live_rows[~written].sum()),
            "delete_missing": delete_missing,
        }
        return BucketMerge(drop_keys, kept, counts)

    base = _fold_batch(rows, starts, schema) if settings.merge_mode == "partial_update" else None
    incoming = base if base is not None else conform(newest, schema)
    latest = _latest_stored(stored, settings.precombine_field)
    on_stored = latest.take(pc.index_in(keys, value_set=latest.column(RECORD_KEY)))
    stored_base = _stored_is_base(incoming, on_stored, settings)
    merged = pa.Table.from_arrays(
        [
            incoming.column(name)
            if name in META_COLUMNS
            else _first_valid(incoming.column(name), on_stored.column(name), stored_base)
            for name in schema.names
        ],
        schema=schema,
    )
    counts = {
        "insert": int(np.count_nonzero(~has_stored & ~deletes)),
        "update": int(np.count_nonzero(has_stored & ~deletes)),
        "deleted": deleted,
        "delete_missing": delete_missing,
    }
    return BucketMerge(drop_keys, merged.filter(pa.array(~deletes)), counts)


def _fold_batch(rows: pa.Table, starts: np.ndarray, schema: pa.Schema) -> pa.Table:
    """partial_update within the batch: per key, the newest row with each null field taken
    from the next newest row that has it (Hudi's preCombine, applied down the run)."""
    table = conform(rows, schema)
    lengths = np.diff(np.append(starts, table.num_rows))
    run_of_row = np.repeat(np.arange(len(starts)), lengths)
    columns = []
    for name in schema.names:
        column = table.column(name)
        if name in META_COLUMNS:
            columns.append(column.take(pa.array(starts)))
            continue
        valid = np.flatnonzero(column.is_valid().to_numpy(zero_copy_only=False))
        runs, first = np.unique(run_of_row[valid], return_index=True)  # rows are in run order
        pick = np.full(len(starts), -1, dtype=np.int64)
        pick[runs] = valid[first]
        columns.append(column.take(pa.array(pick, mask=pick < 0)))
    return pa.Table.from_arrays(columns, schema=schema)


def _latest_stored(stored: pa.Table, precombine_field: str | None) -> pa.Table:
    """One stored row per key (a key holds several only after inserts): the greatest
    precombine value, ties to the row read last."""
    if stored.num_rows == 0:
        return stored
    order = "__runner_order"
    ranked = stored.append_column(order, pa.array(np.arange(stored.num_rows)))
    sort_keys = [(RECORD_KEY, "ascending", "at_end")]
    if precombine_field:
        sort_keys.append((precombine_field, "descending", "at_end"))
    sort_keys.append((order, "descending", "at_end"))
    ranked = ranked.take(pc.sort_indices(ranked, sort_keys=sort_keys))
    starts = [start for start, _ in run_bounds(ranked.column(RECORD_KEY))]
    return ranked.take(pa.array(starts, pa.int64())).drop_columns([order])


def _stored_is_base(incoming: pa.Table, stored: pa.Table, settings: MergeSettings) -> np.ndarray:
    """Per key, whether the stored row is the base whose non-null fields win: partial_update
    with a stored precombine value greater than the incoming one."""
    field = settings.precombine_field
    if settings.merge_mode != "partial_update" or not field:
        return np.zeros(incoming.num_rows, dtype=bool)
    ours, theirs = incoming.column(field), stored.column(field)
    greater = pc.fill_null(pc.greater(theirs, ours), False)
    only_stored = pc.and_(pc.is_null(ours), pc.is_valid(theirs))
    base: np.ndarray = pc.or_(greater, only_stored).to_numpy(zero_copy_only=False)
    return base


def _first_valid(
    incoming: pa.ChunkedArray, stored: pa.ChunkedArray, stored_first: np.ndarray
) -> pa.ChunkedArray:
    """Per row, the first non-null of (incoming, stored), or of (stored, incoming) where
    `stored_first`. By index into both columns, so that every type works, nested ones too."""
    rows = len(incoming)
    ours = incoming.is_valid().to_numpy(zero_copy_only=False)
    theirs = stored.is_valid().to_numpy(zero_copy_only=False)
    take_stored = np.where(stored_first, theirs, ~ours & theirs)
    index = np.arange(rows) + np.where(take_stored, rows, 0)
    both = pa.chunked_array([*incoming.chunks, *stored.chunks], type=incoming.type)
    return both.take(pa.array(index))


def _custom(
    merger: Merger,
    settings: MergeSettings,
    rows: pa.Table,
    stored: pa.Table,
    keys: pa.Array,
    schema: pa.Schema,
) -> pa.Table:
    """The user's rows for `keys` (the batch's keys that are not deleted), checked and
    given the runner's meta columns."""
    name = settings.merger.class_path if settings.merger else "the merger"
    live = pc.and_(
        pc.is_in(rows.column(RECORD_KEY), value_set=keys),
        pc.invert(pc.fill_null(rows.column(DELETE), False)),
    )
    if not len(keys):
        return schema.empty_table()
    incoming = conform(rows.filter(live), schema)
    theirs = stored.filter(pc.is_in(stored.column(RECORD_KEY), value_set=keys))
    try:
        result = merger.merge(theirs, incoming)
    except UserError:
        raise
    except Exception as exc:
        raise MergerError(f"target.merger.class {name} failed: {exc!r}") from exc
    if isinstance(result, pa.RecordBatch):
        result = pa.Table.from_batches([result])
    if not isinstance(result, pa.Table):
        raise MergerError(
            f"target.merger.class {name} returned {type(result).__name__}; "
            "merge() must return a pyarrow.Table"
        )
    data = [n for n in schema.names if n not in META_COLUMNS]
    missing = [n for n in (RECORD_KEY, *data) if n not in result.column_names]
    if missing:
        raise MergerError(
            f"target.merger.class {name} returned rows without the column(s) {missing}; "
            f"return _record_key and every data column: {data}"
        )
    strangers = pc.invert(pc.is_in(result.column(RECORD_KEY), value_set=keys))
    if pc.any(strangers).as_py():
        stranger = pc.filter(result.column(RECORD_KEY), strangers)[0].as_py()
        raise MergerError(
            f"target.merger.class {name} returned a row with key {stranger!r}, which the "
            "batch does not hold for this bucket; a merger keeps rows of the keys it is given"
        )
    # the runner's meta columns: this bucket's, this commit's; the writer numbers the rows
    theirs_meta = [n for n in result.column_names if n in META_COLUMNS and n != RECORD_KEY]
    result = result.drop_columns(theirs_meta)
    for column in (COMMIT_TIME, PARTITION_PATH, BUCKET):
        result = result.append_column(column, pa.repeat(incoming.column(column)[0], len(result)))
    result = result.append_column(COMMIT_SEQNO, pa.nulls(result.num_rows, pa.string()))
    try:
        return conform(result, schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise MergerError(
            f"target.merger.class {name} returned columns of other types than the table's "
            f"({exc}); the table's columns: " + ", ".join(f"{f.name} {f.type}" for f in schema)
        ) from exc
