"""What a bucket write changes, row by row: the rows Delta's change data feed records for it,
and the incoming rows that change nothing and are left alone (target.skip_unchanged).

Both compare the stored rows a write drops (`before`: whole rows of the keys it replaces or
deletes) with the rows it writes (`after`), by record key, on every column but the meta
columns (a rewrite gives a row a new `_commit_time` and `_commit_seqno`, which is not a
change of the row). Values compare as a reader would tell them apart: nulls equal nulls,
floating-point numbers by their bits (a NaN equals the same NaN; 0.0 and -0.0 differ).

The change feed of a bucket write, as the Delta protocol names its rows (`_change_type`):
- a key only in `after`: `insert`; only in `before`: `delete`;
- a key with one row on each side: `update_preimage` and `update_postimage`;
- a key with several rows on a side (an SCD type 2 history rewritten whole, an insert that
  kept duplicates): rows equal on both sides changed nothing and are left out; the others
  pair up in order as updates, and the rest are deletes or inserts.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runner.storage.meta_columns import CHANGE_TYPE, META_COLUMNS, RECORD_KEY
from runner.storage.parquet_file import conform


def change_schema(file_schema: pa.Schema) -> pa.Schema:
    """A change data file's columns: the table's, and `_change_type`."""
    return file_schema.append(pa.field(CHANGE_TYPE, pa.string()))


def compared_columns(schema: pa.Schema) -> list[str]:
    return [n for n in schema.names if n not in META_COLUMNS]


# Up to this many rows, rows compare as Python values: a spread upsert updates a few rows
# per bucket, and five or six Arrow calls per column cost it more than the values do.
_FEW_ROWS = 64


def equal_rows(a: pa.Table, b: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """Whether row i of `a` equals row i of `b` in every one of `columns`."""
    if a.num_rows <= _FEW_ROWS:
        pairs = zip(a.select(columns).to_pylist(), b.select(columns).to_pylist(), strict=True)
        return np.array([_key(x) == _key(y) for x, y in pairs], dtype=bool)
    same = np.ones(a.num_rows, dtype=bool)
    for name in columns:
        same &= equal_values(a.column(name), b.column(name))
    return same


def equal_values(x: pa.ChunkedArray, y: pa.ChunkedArray) -> np.ndarray:
    x, y = x.combine_chunks(), y.combine_chunks()
    x_null = x.is_null().to_numpy(zero_copy_only=False)
    y_null = y.is_null().to_numpy(zero_copy_only=False)
    typ = x.type
    if pa.types.is_floating(typ) and typ == y.type:
        bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[typ.byte_width]
        xs = pc.fill_null(x, 0).to_numpy(zero_copy_only=False).view(bits)
        ys = pc.fill_null(y, 0).to_numpy(zero_copy_only=False).view(bits)
        values = xs == ys
    elif pa.types.is_nested(typ) or typ != y.type:
        values = np.array(
            [_key(v) == _key(w) for v, w in zip(x.to_pylist(), y.to_pylist(), strict=True)]
        )
        values = values.astype(bool) if len(values) else np.zeros(0, dtype=bool)
    else:
        values = pc.fill_null(pc.equal(x, y), False).to_numpy(zero_copy_only=False)
    same: np.ndarray = np.where(x_null | y_null, x_null & y_null, values)
    return same


def _key(value: object) -> object:
    """A Python value with its floats as bits, so that equal bits compare equal."""
    if isinstance(value, float):
        return struct.pack("<d", value)
    if isinstance(value, dict):
        return tuple((k, _key(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return tuple(_key(v) for v in value)
    return value


def counted_by_key(rows: pa.Table, maxima: Sequence[str] = ()) -> pa.Table:
    """Per key of `rows`: its count (`_record_key_count`) and the greatest of each of
    `maxima` (`<name>_max`), as `group_by(...).aggregate` names them; without the grouping
    when no key is there twice (the usual table and batch), each row then its own group."""
    keys = rows.column(RECORD_KEY)
    if len(pc.unique(keys)) == len(keys):
        counted = {RECORD_KEY: keys, f"{RECORD_KEY}_count": pa.array(np.ones(len(keys), np.int64))}
        return pa.table({**counted, **{f"{m}_max": rows.column(m) for m in maxima}})
    aggregations = [(RECORD_KEY, "count"), *((m, "max") for m in maxima)]
    return rows.group_by(RECORD_KEY).aggregate(aggregations)


def one_each(before: pa.Table, after: pa.Table) -> pa.Array:
    """The keys with exactly one row in `before` and one in `after`."""
    single = []
    for side in (before, after):
        counted = counted_by_key(side)
        once = pc.equal(counted.column(f"{RECORD_KEY}_count"), 1)
        single.append(counted.column(RECORD_KEY).filter(once).combine_chunks())
    return pc.filter(single[0], pc.is_in(single[0], value_set=single[1]))


def aligned(side: pa.Table, keys: pa.Array) -> pa.Table:
    """The rows of `side` holding `keys` (one each), in key order."""
    rows = side.filter(pc.is_in(side.column(RECORD_KEY), value_set=keys))
    return rows.sort_by(RECORD_KEY)


def unchanged_keys(before: pa.Table, after: pa.Table) -> pa.Array:
    """Keys whose one stored row equals the one row the write would put in its place."""
    keys = one_each(before, after)
    if not len(keys):
        return keys
    old = aligned(before, keys)
    new = conform(aligned(after, keys), before.schema)  # as it would be written
    same = equal_rows(old, new, compared_columns(before.schema))
    return old.column(RECORD_KEY).combine_chunks().filter(pa.array(same))


def without_keys(rows: pa.Table, keys: pa.Array) -> pa.Table:
    if not len(keys) or not rows.num_rows:
        return rows
    return rows.filter(pc.invert(pc.is_in(rows.column(RECORD_KEY), value_set=keys)))


def change_rows(before: pa.Table, after: pa.Table, schema: pa.Schema) -> pa.Table:
    """The change feed's rows of one bucket write (`schema`: the files' columns)."""
    before, after = before.select(schema.names), after.select(schema.names)
    in_after = pc.is_in(before.column(RECORD_KEY), value_set=after.column(RECORD_KEY))
    in_before = pc.is_in(after.column(RECORD_KEY), value_set=before.column(RECORD_KEY))
    parts = [
        _typed(before.filter(pc.invert(in_after)), "delete"),
        _typed(after.filter(pc.invert(in_before)), "insert"),
    ]
    old, new = before.filter(in_after), after.filter(in_before)
    single = one_each(old, new)
    if len(single):
        parts += [
            _typed(aligned(old, single), "update_preimage"),
            _typed(aligned(new, single), "update_postimage"),
        ]
    parts += _histories(without_keys(old, single), without_keys(new, single), schema)
    return pa.concat_tables(parts).cast(change_schema(schema))


def _typed(rows: pa.Table, change_type: str) -> pa.Table:
    return rows.append_column(CHANGE_TYPE, pa.array([change_type] * rows.num_rows, pa.string()))


def _histories(old: pa.Table, new: pa.Table, schema: pa.Schema) -> list[pa.Table]:
    """Keys with several rows on a side: equal rows left out, the others paired in order
    (row by row in Python: such keys are few, and their rows fewer)."""
    if not old.num_rows and not new.num_rows:
        return []
    compared = compared_columns(schema)
    taken: dict[str, list[list[int]]] = {"update_preimage": [], "delete": []}
    given: dict[str, list[list[int]]] = {"update_postimage": [], "insert": []}
    old_rows, new_rows = _by_key(old, compared), _by_key(new, compared)
    for key, befores in old_rows.items():
        afters = new_rows.get(key, [])
        for index, value in list(befores):
            match = next((a for a in afters if a[1] == value), None)
            if match is not None:  # the same row again: no change
                befores.remove((index, value))
                afters.remove(match)
        pairs = min(len(befores), len(afters))
        taken["update_preimage"].append([i for i, _ in befores[:pairs]])
        given["update_postimage"].append([i for i, _ in afters[:pairs]])
        taken["delete"].append([i for i, _ in befores[pairs:]])
        given["insert"].append([i for i, _ in afters[pairs:]])
    out = []
    for rows, chosen in ((old, taken), (new, given)):
        for change_type, groups in chosen.items():
            indices = [i for group in groups for i in group]
            if indices:
                out.append(_typed(rows.take(pa.array(indices, pa.int64())), change_type))
    return out


def _by_key(rows: pa.Table, compared: list[str]) -> dict[str, list[tuple[int, object]]]:
    """Each key's rows: their index in `rows` and their compared values."""
    grouped: dict[str, list[tuple[int, object]]] = {}
    keys = rows.column(RECORD_KEY).to_pylist()
    values = rows.select(compared).to_pylist()
    for index, (key, value) in enumerate(zip(keys, values, strict=True)):
        grouped.setdefault(key, []).append((index, _key(value)))
    return grouped
