"""A bucket's stored side in a write: the live rows of its stored files, read next to the
batch's rows of the bucket, the way Hudi's merge handle reads its base file (stored rows
never cross the shuffle).

First the key (and ordering) columns of every live row (no deletion vector deletes it),
with its file and position in that file; then whole rows only where a merge rule or a
write handle asks for them: the rows of the batch's keys (runner/write/merge_rules.py),
the rows a handle copies into its new file (runner/write/handles.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from runner.delta.arrow_read import kept_batches
from runner.delta.deletion_vectors import read_deleted_rows
from runner.delta.snapshot import DataFile
from runner.storage.key_filter import footer_filter, key_hashes
from runner.storage.meta_columns import RECORD_KEY
from runner.storage.parquet_file import conform
from runner.write import tombstones
from runner.write.change_rows import aligned, compared_columns, equal_values, one_each
from runner.write.task import WriteTask

# A copy-on-write bucket whose stored files hold at most this many bytes is read once,
# whole, and its kept rows taken from memory: reading the key columns first and the whole
# rows again cost a small file a third more than the rewrite itself (two opens, two reads).
# Larger buckets are read twice, the second time row group by row group, so one task never
# holds a large bucket's rows.
WHOLE_READ_MAX_BYTES = 16 * 2**20


def small(files: Sequence[DataFile]) -> bool:
    """Whether a bucket's stored files are small enough to be read whole, at once."""
    return sum(f.size for f in files) <= WHOLE_READ_MAX_BYTES


@dataclass(frozen=True)
class StoredBucket:
    """The live rows of a bucket's stored files: their key columns (`keys`), each row's
    file (index into `files`) and position in it, and which of them hold a key of the
    batch (`matched`). The files in `unread` hold none of the batch's keys, as their key
    filters say (runner/storage/key_filter.py): their keys were not read, and every live
    row of theirs is an unmatched one."""

    task: WriteTask
    files: list[DataFile]
    keys: pa.Table
    file_of: np.ndarray
    positions: np.ndarray
    deleted: list[np.ndarray]  # per file, the positions its current DV deletes
    whole: list[pa.Table] | None  # per file, every row and column, if read whole
    matched: np.ndarray  # mask over keys: the row's key is in the batch
    unread: frozenset[int] = frozenset()

    @classmethod
    def read(
        cls,
        task: WriteTask,
        files: list[DataFile],
        columns: list[str],
        whole: bool,
        batch_keys: pa.ChunkedArray,
    ) -> StoredBucket:
        """The `columns` of the live rows of `files` (every column too, when `whole`), and
        which of them hold one of `batch_keys`: one hash lookup per stored key. A file
        whose key filter rules out every one of `batch_keys` is not read (a bucket read
        whole is: its rows are rewritten anyway)."""
        tables, file_of, positions, deleted, unread = [], [], [], [], []
        key_schema = pa.schema([task.file_schema.field(c) for c in columns])
        read_whole: list[pa.Table] | None = [] if whole else None
        probes = None if whole else key_hashes(batch_keys)
        for index, f in enumerate(files):
            parquet = pq.ParquetFile(f"{task.root}/{f.path}", filesystem=task.fs)
            gone = (
                read_deleted_rows(task.fs, task.root, f.deletion_vector)
                if f.deletion_vector
                else np.empty(0, np.uint64)
            )
            deleted.append(gone)
            if probes is not None and _ruled_out(parquet, probes):
                unread.append(index)
                continue
            table = parquet.read() if read_whole is not None else parquet.read(columns=columns)
            if read_whole is not None:
                read_whole.append(table)
            where = np.arange(table.num_rows, dtype=np.int64)
            if len(gone):
                live = np.ones(table.num_rows, dtype=bool)
                live[gone.astype(np.int64)] = False
                table, where = table.filter(pa.array(live)), where[live]
            # in the table's types: a file written before a widening holds the narrower one
            tables.append(conform(table.select(columns), key_schema))
            file_of.append(np.full(len(where), index, dtype=np.int32))
            positions.append(where)
        if tables:
            keys = pa.concat_tables(tables)
            matched = pc.is_in(keys.column(RECORD_KEY), value_set=batch_keys)
            found = matched.to_numpy(zero_copy_only=False)
            where_from = np.concatenate(file_of), np.concatenate(positions)
        else:
            keys = task.file_schema.empty_table().select(columns)
            found = np.zeros(0, dtype=bool)
            where_from = np.empty(0, np.int32), np.empty(0, np.int64)
        return cls(task, files, keys, *where_from, deleted, read_whole, found, frozenset(unread))

    @cached_property
    def matched_rows(self) -> np.ndarray:
        """Where the rows of the batch's keys are, among `keys`."""
        return np.flatnonzero(self.matched)

    @cached_property
    def matched_keys(self) -> pa.Table:
        """The key columns of the stored rows of the batch's keys."""
        return self.keys.take(self.matched_rows)

    def rows_of_batch_keys(self) -> pa.Table:
        """Every column of the live stored rows of the batch's keys."""
        return self.dropped_rows(self.matched)

    def dropped_rows(self, dropped: np.ndarray) -> pa.Table:
        """Every column of the live rows `dropped` (a mask over `keys`) picks: what a write
        replaces or deletes, read from memory or row group by row group."""
        parts = list(self.live_rows(dropped, range(len(self.files))))
        return pa.concat_tables(parts) if parts else self.task.file_schema.empty_table()

    def unchanged_keys(self, dropped: np.ndarray, after: pa.Table) -> pa.Array:
        """change_rows.unchanged_keys(self.dropped_rows(dropped), after) without reading
        whole rows: the stored rows' columns one at a time, the smallest first, each only
        for the keys still equal so far. An update usually changes a narrow column, and
        decoding every column of every touched file only to find that out cost an update
        of 1 % of a wide table most of its write."""
        rows = np.flatnonzero(dropped)  # indices into self.keys
        before = self.keys.take(rows)
        keys = one_each(before, after)
        if not len(keys):
            return keys
        rows = rows[pc.is_in(before.column(RECORD_KEY), value_set=keys).to_numpy(False)]
        by_key = pc.sort_indices(self.keys.take(rows), sort_keys=[(RECORD_KEY, "ascending")])
        rows = rows[by_key.to_numpy()]
        new = conform(aligned(after, keys), self.task.file_schema)  # as it would be written
        alive = np.ones(len(rows), dtype=bool)
        files: dict[int, pq.ParquetFile] = {}  # opened once, read a column at a time
        for name in self._smallest_first(files, compared_columns(self.task.file_schema)):
            if not alive.any():
                break
            old = self._stored_column(files, name, rows[alive])
            same = equal_values(pa.chunked_array([old]), new.column(name).filter(alive))
            alive[np.flatnonzero(alive)[~same]] = False
        return new.column(RECORD_KEY).filter(pa.array(alive)).combine_chunks()

    def _smallest_first(self, files: dict[int, pq.ParquetFile], columns: list[str]) -> list[str]:
        """`columns`, the fewest stored bytes first, as the first file's footer tells."""
        size = dict.fromkeys(columns, 0)
        footer = self._opened(files, 0).metadata
        for group in range(footer.num_row_groups):
            row_group = footer.row_group(group)
            for i in range(row_group.num_columns):
                chunk = row_group.column(i)
                name = chunk.path_in_schema.split(".")[0]  # a nested column's leaves add up
                if name in size:
                    size[name] += chunk.total_compressed_size
        return sorted(columns, key=lambda n: size[n])

    def _opened(self, files: dict[int, pq.ParquetFile], index: int) -> pq.ParquetFile:
        """File `index`, opened (its footer read) once into `files`."""
        if index not in files:
            path = f"{self.task.root}/{self.files[index].path}"
            files[index] = pq.ParquetFile(path, filesystem=self.task.fs)
        return files[index]

    def _stored_column(
        self, files: dict[int, pq.ParquetFile], name: str, rows: np.ndarray
    ) -> pa.Array:
        """Column `name` of the stored rows at `rows` (indices into self.keys), in that
        order, in the table's type (missing from an older file: null)."""
        field = self.task.file_schema.field(name)
        parts, where = [], []
        for index in np.unique(self.file_of[rows]):
            mine = np.flatnonzero(self.file_of[rows] == index)
            parquet = self._opened(files, int(index))
            taken = self.positions[rows[mine]]
            if name in parquet.schema_arrow.names:
                values = parquet.read(columns=[name]).column(name).take(taken)
                parts.append(pc.cast(values.combine_chunks(), field.type))
            else:
                parts.append(pa.nulls(len(mine), field.type))
            where.append(mine)
        if not parts:
            return pa.nulls(0, field.type)
        inverse = np.argsort(np.concatenate(where), kind="stable")
        return pa.concat_arrays(parts).take(pa.array(inverse))

    def tombstones(self, sequence_type: pa.DataType) -> pa.Table:
        """The deleted keys a change feed's table remembers in this bucket's files."""
        return tombstones.read(
            self.task.fs, self.task.root, [f.path for f in self.files], sequence_type
        )

    def dropped(self, drop_keys: pa.Array) -> np.ndarray:
        """Which live stored rows hold one of `drop_keys` (a mask over `keys`): the rows a
        merge replaces or deletes. Only rows of the batch's keys can."""
        mask = np.zeros(self.keys.num_rows, dtype=bool)
        if len(drop_keys):
            hit = pc.is_in(self.matched_keys.column(RECORD_KEY), value_set=drop_keys)
            mask[self.matched_rows[hit.to_numpy(zero_copy_only=False)]] = True
        return mask

    def deleted_with(self, dropped: np.ndarray) -> int:
        """How many of the files' rows are deleted once `dropped` are too."""
        return sum(len(d) for d in self.deleted) + int(np.count_nonzero(dropped))

    def loses_rows(self, index: int, dropped: np.ndarray) -> bool:
        """Whether `dropped` holds rows of file `index`."""
        return bool(dropped[self.file_of == index].any())

    def deletion_vector(self, index: int, dropped: np.ndarray) -> np.ndarray:
        """The rows of file `index` its new deletion vector deletes: those its current one
        does and those of `dropped`."""
        now = self.positions[(self.file_of == index) & dropped]
        return np.union1d(self.deleted[index], now.astype(np.uint64))

    def kept_rows(self, dropped: np.ndarray, files: Iterable[int]) -> Iterator[pa.Table]:
        """Whole rows of the files at `files` that stay: every live row but those `dropped`
        (a mask over `keys`) picks; every live row of an unread file."""
        return self.live_rows(~dropped, files, unread_kept=True)

    def live_rows(
        self, chosen: np.ndarray, files: Iterable[int], unread_kept: bool = False
    ) -> Iterator[pa.Table]:
        """Whole rows, every column, of the files at `files`: the live rows `chosen` (a mask
        over `keys`) picks, from memory when the bucket was read whole, else row group by
        row group. An unread file's rows are not in `keys`: all of its live rows are taken
        when `unread_kept`, none otherwise (no row of the batch's keys is among them)."""
        for index in files:
            if index in self.unread:
                keep = np.full(self.files[index].num_records, unread_kept, dtype=bool)
                keep[self.deleted[index].astype(np.int64)] = False
            else:
                mine = self.file_of == index
                keep = np.zeros(self.files[index].num_records, dtype=bool)
                keep[self.positions[mine]] = chosen[mine]
            if not keep.any():
                continue
            if self.whole is not None:
                yield conform(self.whole[index].filter(pa.array(keep)), self.task.file_schema)
                continue
            path = f"{self.task.root}/{self.files[index].path}"
            parquet = pq.ParquetFile(path, filesystem=self.task.fs)
            yield from kept_batches(parquet, keep, self.task.file_schema)


def _ruled_out(parquet: pq.ParquetFile, probes: np.ndarray) -> bool:
    """Whether the file's key filter says it holds none of the keys hashed as `probes`
    (a file written without one may hold any)."""
    found = footer_filter(parquet.metadata.metadata)
    return found is not None and not found.might_hold(probes).any()
