"""`runner read TABLE --key VALUE`: the live rows of a few record keys, without Spark.

For each key: its bucket from the key itself (runner/commands/key_bucket.py and the table's
bucket layout), then in each partition only the files of that bucket whose `_record_key`
range (Delta's statistics) holds the key, so one file per partition in a bucket of many
file groups. In a file, only the row groups whose statistics can hold a key are read, the
key column first; the other columns only where a live row matches. Deletion vectors are
honoured: a key whose old row a merge-on-read write deleted returns its new row only.

A table whose keys cannot be hashed outside Spark (a user's key generator class) is pruned
by the key ranges alone: every bucket of each partition, the files whose range holds a key.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import arro3.core as arro3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import structlog

from runner.commands.key_bucket import KeyHasher, key_hasher
from runner.commands.read import load_as_of
from runner.delta.deletion_vectors import keep_mask
from runner.delta.snapshot import DataFile, TableSnapshot, open_table
from runner.errors import UserError
from runner.index.layout import BucketLayout
from runner.storage.key_filter import footer_filter, key_hashes
from runner.storage.meta_columns import PARTITION_PATH, RECORD_KEY, RESERVED_PREFIX
from runner.storage.parquet_file import conform

log = structlog.get_logger(__name__)

BY_BUCKET = "bucket and key range"
SHOWN_MISSING = 10  # keys named in the "not found" line; the rest are counted
_PLACE = f"{RESERVED_PREFIX}place"  # a key's place among the keys asked, while sorting


@dataclass(frozen=True)
class KeyLookup:
    """What a lookup found, and what it opened to find it."""

    rows: pa.Table  # the live rows of the keys, in the order the keys were asked
    keys: tuple[str, ...]  # the keys asked, each once
    version: int
    files_total: int  # the table's live data files
    opened: Mapping[str, int]  # per partition path: the data files opened, where any
    row_groups_read: int
    pruning: str  # BY_BUCKET, or why only key ranges could be used
    # what the table's keys look like, when a key asked is not of that form (a bare value
    # where keys are `order_id:1,customer_id:7`)
    form: KeyHasher | None = None

    @property
    def files_opened(self) -> int:
        return sum(self.opened.values())

    @property
    def missing(self) -> tuple[str, ...]:
        found = set(self.rows.column(RECORD_KEY).to_pylist())
        return tuple(k for k in self.keys if k not in found)

    def describe(self, path: str) -> str:
        """Two lines for stderr: the keys found and missing, then what was opened."""
        missing = self.missing
        head = f"{len(self.keys) - len(missing)} of {len(self.keys)} key(s) found"
        if missing:
            shown = ", ".join(json.dumps(k, ensure_ascii=False) for k in missing[:SHOWN_MISSING])
            more = (
                f" and {len(missing) - SHOWN_MISSING} more" if len(missing) > SHOWN_MISSING else ""
            )
            head += f"; not found: {shown}{more}{self._form_hint(missing)}"
        counts = set(self.opened.values())
        if not counts:
            per = "none"
        elif len(counts) == 1:
            per = f"{counts.pop()} in each of {len(self.opened)} partition(s)"
        else:
            per = f"at most {max(counts)} per partition, in {len(self.opened)} partition(s)"
        how = "" if self.pruning == BY_BUCKET else "; chosen by key range only"
        return (
            f"{head}\n{self.rows.num_rows:,} row(s) of {path} at version {self.version}, from "
            f"{self.files_opened} of {self.files_total} file(s) opened ({per}), "
            f"{self.row_groups_read} row group(s) read{how}"
        )

    def _form_hint(self, missing: Sequence[str]) -> str:
        """How the table's keys are written, when a key not found is not written so."""
        form = self.form
        unformed = [k for k in missing if form is not None and form.field_values(k) is None]
        if form is None or not unformed:
            return ""
        example = f"{form.record_key[0]}:{unformed[0]}"
        if len(form.record_key) > 1:
            example += "," + ",".join(f"{name}:..." for name in form.record_key[1:])
        return f" (a key of this table is {form.key_form()}, e.g. {example})"


def read_keys(table: str, keys: Iterable[str], as_of: str | None = None) -> pa.Table:
    """The live rows of a runner table whose `_record_key` is one of `keys`, meta columns
    first as `runner read` returns them; no JVM. A key absent from the table has no row.

        >>> read_keys("warehouse/trips", ["t-17", "t-18"]).to_pylist()

    `table` is a path or URI (s3://... with the AWS_* settings in the environment);
    `as_of` a version number or an instant (yyyyMMddHHmmssSSS). A partitioned table
    returns a key's row in every partition that holds one. lookup_keys returns the same
    rows with what was opened to find them."""
    return lookup_keys(table, keys, as_of).rows


def lookup_keys(table: str, keys: Iterable[str], as_of: str | None = None) -> KeyLookup:
    """read_keys' rows, the keys not found, and the files opened per partition."""
    wanted = tuple(dict.fromkeys(keys))
    if not wanted:
        raise UserError("no key to look up: give one or more (--key VALUE, --keys-from FILE)")
    snapshot = open_table(table)
    if snapshot is None:
        raise UserError(f"no Delta table at {table}")
    if as_of is not None:
        load_as_of(snapshot.location, snapshot.table, as_of)
    conf = snapshot.configuration
    if conf.get("runner.format.version") is None:
        raise UserError(
            f"{table} is a Delta table the runner did not write (no runner.* settings): "
            "--key needs its bucket layout; read it whole with `runner read` instead"
        )
    files = snapshot.files()
    chosen, pruning = choose_files(conf, files, wanted)
    rows, opened, groups = _read(snapshot, chosen)
    log.debug(
        "key_lookup_files",
        pruning=pruning,
        opened=dict(opened),
        row_groups=groups,
        total=len(files),
    )
    hasher = key_hasher(conf)
    return KeyLookup(
        _in_key_order(rows, wanted),
        wanted,
        snapshot.version,
        len(files),
        opened,
        groups,
        pruning,
        hasher if isinstance(hasher, KeyHasher) and hasher.composite else None,
    )


def choose_files(
    configuration: Mapping[str, str], files: Sequence[DataFile], keys: Sequence[str]
) -> tuple[dict[str, tuple[DataFile, set[str]]], str]:
    """The files that can hold each key, with the keys each one can hold (by table-relative
    path), and how they were chosen (BY_BUCKET, or why by key range only)."""
    hasher = key_hasher(configuration)
    if isinstance(hasher, str):
        log.debug("key_lookup_by_key_range", reason=hasher)
    layout = BucketLayout.from_configuration(configuration)
    by_partition: dict[str, list[DataFile]] = defaultdict(list)
    by_bucket: dict[tuple[str, int], list[DataFile]] = defaultdict(list)
    for f in files:
        by_partition[f.partition_path].append(f)
        by_bucket[(f.partition_path, f.bucket)].append(f)
    chosen: dict[str, tuple[DataFile, set[str]]] = {}
    for key in keys:
        hashed = hasher.hash_of(key) if isinstance(hasher, KeyHasher) else None
        if hashed is None and isinstance(hasher, KeyHasher):
            log.debug("key_lookup_key_not_formed", key=key, form=hasher.key_form())
        for partition, in_partition in by_partition.items():
            pool = (
                in_partition
                if hashed is None
                else by_bucket.get((partition, layout.bucket_of(partition, hashed)), [])
            )
            for f in pool:
                if _range_holds(f.min_key, f.max_key, key):
                    chosen.setdefault(f.path, (f, set()))[1].add(key)
    return chosen, hasher if isinstance(hasher, str) else BY_BUCKET


def _range_holds(low: str | None, high: str | None, key: str) -> bool:
    """A file (or row group) without bounds can hold any key."""
    return low is None or high is None or low <= key <= high


def _read(
    snapshot: TableSnapshot, chosen: Mapping[str, tuple[DataFile, set[str]]]
) -> tuple[pa.Table, dict[str, int], int]:
    """The live rows of the keys in the chosen files; files opened per partition; row
    groups read."""
    fs, root = snapshot.location.filesystem()
    schema = snapshot.arrow_schema()
    parts: list[pa.Table] = []
    opened: dict[str, int] = defaultdict(int)
    groups = 0
    for f, keys in chosen.values():
        found, read = _read_file(fs, root, f, keys, schema)
        parts += found
        groups += read
        opened[f.partition_path] += 1
    # not schema.empty_table(): it imports pandas (0.2 s of a lookup's 0.5)
    rows = pa.concat_tables(parts) if parts else pa.Table.from_batches([], schema=schema)
    return rows, dict(sorted(opened.items())), groups


def _read_file(
    fs: pafs.FileSystem, root: str, f: DataFile, keys: set[str], schema: pa.Schema
) -> tuple[list[pa.Table], int]:
    """One file's live rows whose key is in `keys`, and how many row groups were read."""
    with pq.ParquetFile(f"{root}/{f.path}", filesystem=fs) as parquet:
        meta = parquet.metadata
        groups = [g for g in range(meta.num_row_groups) if _group_may_hold(meta, g, keys)]
        if not groups:
            return [], 0
        value_set = arrow_strings(sorted(keys))
        key_filter = footer_filter(meta.metadata)
        if key_filter is not None and not key_filter.might_hold(key_hashes(value_set)).any():
            return [], 0  # the file holds none of them
        vector = f.deletion_vector
        keep = keep_mask(fs, root, vector, meta.num_rows) if vector else None
        sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        starts = np.cumsum([0, *sizes])
        found = []
        for g in groups:
            stored = parquet.read_row_group(g, columns=[RECORD_KEY]).column(0)
            match = pc.is_in(stored, value_set=value_set)
            if keep is not None:
                match = pc.and_(match, arrow_mask(keep[starts[g] : starts[g + 1]]))
            if pc.any(match).as_py():  # only then the other columns
                found.append(conform(parquet.read_row_group(g).filter(match), schema))
        return found, len(groups)


# pyarrow imports pandas (0.2 s, a third of a lookup as a whole process) the first time it
# turns Python or numpy values into an array or a scalar; arro3 (delta-rs' Arrow library)
# builds the few small arrays a lookup needs, and pyarrow takes them over the C data interface.


def arrow_strings(values: Sequence[str]) -> pa.Array:
    """A string array of `values`, built without importing pandas."""
    return pa.array(arro3.Array(list(values), arro3.DataType.string()))


def arrow_mask(mask: np.ndarray) -> pa.Array:
    """A boolean array of a numpy mask, built without importing pandas."""
    return pa.array(arro3.Array.from_numpy(np.ascontiguousarray(mask, dtype=bool)))


def _group_may_hold(meta: pq.FileMetaData, group: int, keys: set[str]) -> bool:
    """The row group's `_record_key` statistics can hold one of `keys` (or it has none)."""
    row_group = meta.row_group(group)
    for c in range(row_group.num_columns):
        column = row_group.column(c)
        if column.path_in_schema != RECORD_KEY:
            continue
        stats = column.statistics
        if stats is None or not stats.has_min_max:
            return True
        low, high = (v.decode() if isinstance(v, bytes) else v for v in (stats.min, stats.max))
        return any(_range_holds(low, high, k) for k in keys)
    return True


def _in_key_order(rows: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The rows in the order their keys were asked, a key's partitions in path order."""
    if rows.num_rows < 2:
        return rows
    place = pc.index_in(rows.column(RECORD_KEY), value_set=arrow_strings(keys))
    order = [(_PLACE, "ascending"), (PARTITION_PATH, "ascending")]
    return rows.append_column(_PLACE, place).sort_by(order).drop_columns([_PLACE])
