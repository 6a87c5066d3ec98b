"""File groups inside a bucket (RFC-29 pattern 2): which group a key belongs to, and where
a group's rows are cut into several groups.

A bucket's live files are grouped by their file group id (the part of the file name after
the bucket id). Each group's rows are sorted by record key and the groups of a bucket cover
disjoint key ranges, so Delta's min/max statistics on `_record_key` route a key to its
group with no read: a key goes to the last group whose least key is not above it (the first
group for a key below every range), which keeps the ranges disjoint as groups take new keys.
A write then reads and rewrites only the groups its keys fall in.

A bucket whose groups overlap in key range, or whose files carry no `_record_key`
statistics (written by an older runner, or several unsorted bulk_insert files under
different ids), is one unit, handled whole as a single-group bucket is; its next rewrite
writes it sorted, in groups of the target size.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from runner.delta.snapshot import DataFile
from runner.storage.meta_columns import RECORD_KEY
from runner.storage.parquet_file import writer_settings

# Rows of a new group written in memory to learn what a row takes in its file: sorted by
# key, a group's rows compress to a tenth to a half of their Arrow size, too wide a range
# for a fixed ratio (groups came out a quarter of the target at 20M rows).
SAMPLE_ROWS = 20_000


@dataclass(frozen=True)
class FileGroup:
    """One unit a write handles: the live files of one file group (or of a whole
    overlapping bucket), with the key range their statistics give."""

    file_id: str  # the id its new files keep
    files: tuple[DataFile, ...]
    lowest: str | None  # its least record key; None: unknown (no statistics)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def rows(self) -> int:
        return sum(f.num_records for f in self.files)


def file_groups(files: Sequence[DataFile]) -> list[FileGroup]:
    """A bucket's file groups in key order; a single unit when their ranges overlap or a
    file has no key statistics (then as before file groups: the bucket is handled whole)."""
    if not files:
        return []
    by_id: dict[str, list[DataFile]] = {}
    for f in files:
        by_id.setdefault(f.file_id, []).append(f)
    ranges = {fid: r for fid, group in by_id.items() if (r := _key_range(group)) is not None}
    if len(by_id) > 1 and len(ranges) == len(by_id):
        order = sorted(ranges, key=ranges.__getitem__)
        if all(ranges[a][1] < ranges[b][0] for a, b in itertools.pairwise(order)):
            return [FileGroup(fid, tuple(by_id[fid]), ranges[fid][0]) for fid in order]
    largest = max(files, key=lambda f: f.size)
    lowest = min(r[0] for r in ranges.values()) if len(ranges) == len(by_id) else None
    return [FileGroup(largest.file_id, tuple(files), lowest)]


def _key_range(files: Sequence[DataFile]) -> tuple[str, str] | None:
    lows = [f.min_key for f in files if f.min_key is not None]
    highs = [f.max_key for f in files if f.max_key is not None]
    if len(lows) < len(files) or len(highs) < len(files):
        return None
    return min(lows), max(highs)


def route(keys: pa.Array | pa.ChunkedArray, groups: Sequence[FileGroup]) -> np.ndarray:
    """The index of each key's group: the last one whose least key is not above it, the
    first for a key below them all. One vectorized comparison per group boundary."""
    where = np.zeros(len(keys), dtype=np.int32)
    for group in groups[1:]:
        at_or_above = pc.greater_equal(keys, pa.scalar(group.lowest, keys.type))
        where += pc.fill_null(at_or_above, False).to_numpy(zero_copy_only=False)
    return where


def bytes_per_row(group: FileGroup | None, rows: pa.Table, target_bytes: int) -> float:
    """What a row of the group takes in a file: as its stored files hold them; for a new
    group, its Arrow size while that is under the target (no cut then: a parquet file is
    smaller), else as a sample of its rows written in memory takes."""
    if group is not None and group.rows:
        return group.size / group.rows
    arrow_bytes = int(rows.nbytes)
    if arrow_bytes <= target_bytes:
        return arrow_bytes / max(int(rows.num_rows), 1)
    n = min(int(rows.num_rows), SAMPLE_ROWS)
    sample = rows.slice((rows.num_rows - n) // 2, n)
    sink = pa.BufferOutputStream()
    pq.write_table(sample, sink, **writer_settings(sample.schema, sample))  # as BucketFile
    return int(sink.tell()) / n


def cut_points(keys: pa.Array, per_row: float, target_bytes: int) -> list[int]:
    """Where rows sorted by key are cut into groups of about `target_bytes`: none when
    they fit one; else into equal parts, each cut moved forward past rows of the same
    key (a key lives in one group)."""
    total = len(keys) * per_row
    if total <= target_bytes or len(keys) < 2:
        return []
    parts = math.ceil(total / target_bytes)
    cuts: list[int] = []
    for i in range(1, parts):
        at = max(len(keys) * i // parts, cuts[-1] + 1 if cuts else 1)
        while at < len(keys) and keys[at] == keys[at - 1]:
            at += 1
        if at < len(keys):
            cuts.append(at)
    return sorted(set(cuts))


def sorted_by_key(rows: pa.Table) -> pa.Table:
    """Rows in record key order (byte order of the UTF-8 strings, as Delta compares them)."""
    return rows.take(pc.sort_indices(rows, [(RECORD_KEY, "ascending")]))
