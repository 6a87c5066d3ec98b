"""Rows of parquet files read by their index in the file (what `_metadata.row_index` says in
Spark): the bulk writer reads a source's rows itself so they need not cross the Arrow
hand-off (runner/sources/file_rows.py says when it may)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from runner.storage.location import local_path


def take_rows(table: pa.Table, indexes: pa.Array) -> pa.Table:
    """`table.take(indexes)`, a column at a time: Table.take spent a third more on the rows
    of a source's row groups (a bulk load's, in bucket order; docs/performance.md)."""
    return pa.Table.from_arrays([c.take(indexes) for c in table.columns], schema=table.schema)


class ParquetRows:
    """Rows of local parquet files by row index, read a row group at a time. A task gets
    its rows in file order, so the last row group read is kept for the next call. Travels
    to the executors with the write job, unused (its state is made there)."""

    def __init__(self, columns: Sequence[str], most_rows: int | None = None):
        self.columns = list(columns)
        self.most_rows = most_rows  # a file's rows the caller can number
        self._open: tuple[str, pq.ParquetFile, list[int]] | None = None  # uri, file, group starts
        self._last: tuple[int, pa.Table] | None = None  # the last row group read

    def take(self, uri: str, rows: pa.Array) -> pa.Table:
        """The rows at the row indexes `rows` (in any order) of the file Spark names `uri`;
        the row groups from the lowest index's to the highest's are read."""
        try:
            parquet, starts = self._file(uri)
            first = bisect.bisect_right(starts, pc.min(rows).as_py()) - 1
            last = bisect.bisect_right(starts, pc.max(rows).as_py()) - 1
            groups = [self._group(parquet, g) for g in range(first, last + 1)]
            return take_rows(pa.concat_tables(groups), pc.subtract(rows, starts[first]))
        except (OSError, pa.ArrowException) as exc:
            # worded as Spark's own read failures, so the run names the file the same way
            raise OSError(f"Encountered error while reading file {uri}\n{exc}") from exc

    def _file(self, uri: str) -> tuple[pq.ParquetFile, list[int]]:
        if self._open is None or self._open[0] != uri:
            path = local_path(uri)
            if path is None:
                raise OSError(f"{uri} is not a local file")
            parquet = pq.ParquetFile(path)
            if self.most_rows is not None and parquet.metadata.num_rows > self.most_rows:
                raise OSError(
                    f"{parquet.metadata.num_rows:,} rows, more than the {self.most_rows:,} "
                    "the bulk writer numbers in one file: split the file"
                )
            sizes = [parquet.metadata.row_group(g).num_rows for g in range(parquet.num_row_groups)]
            starts = [0, *itertools.accumulate(sizes)][:-1]
            self._open, self._last = (uri, parquet, starts), None
        return self._open[1], self._open[2]

    def _group(self, parquet: pq.ParquetFile, group: int) -> pa.Table:
        if self._last is None or self._last[0] != group:
            self._last = (group, parquet.read_row_group(group, columns=self.columns))
        return self._last[1]
