"""Reads of a table's files with pyarrow, without Spark: the rows deletion vectors keep.

delta-rs' `to_pyarrow_table()` refuses a table with the deletionVectors feature, and its
`scan()` has no way to name the files; the runner's own readers (runner read, compaction)
read the files it picks and drop the positions each file's deletion vector deletes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from runner.delta.deletion_vectors import DeletionVector, keep_mask
from runner.storage.location import TableLocation
from runner.storage.parquet_file import conform


def live_batches(
    fs: pafs.FileSystem,
    root: str,
    path: str,
    vector: DeletionVector | None,
    schema: pa.Schema,
) -> Iterator[pa.Table]:
    """One file's live rows, row group by row group, in `schema` (missing columns null)."""
    parquet = pq.ParquetFile(f"{root}/{path}", filesystem=fs)
    keep = keep_mask(fs, root, vector, parquet.metadata.num_rows) if vector else None
    return kept_batches(parquet, keep, schema)


def kept_batches(
    parquet: pq.ParquetFile,
    keep: np.ndarray | None,
    schema: pa.Schema,
    renamed: Mapping[str, str] | None = None,
) -> Iterator[pa.Table]:
    """The rows of a file that `keep` (a mask over all its rows; None: every row) keeps,
    row group by row group, in `schema`; `renamed`: the file's column names that the
    schema has under another name since (a schema rewrite), file name -> schema name."""
    offset = 0
    for batch in parquet.iter_batches():
        part = pa.Table.from_batches([batch])
        if keep is not None:
            mask = keep[offset : offset + part.num_rows]
            if not mask.all():
                part = part.filter(pa.array(mask))
        offset += batch.num_rows
        if renamed:
            part = part.rename_columns([renamed.get(n, n) for n in part.column_names])
        yield conform(part, schema)


def read_live(
    location: TableLocation,
    schema: pa.Schema,
    files: Sequence[tuple[str, DeletionVector | None]],
    where: pc.Expression | None = None,
) -> pa.Table:
    """The live rows of `files` (table-relative paths with their deletion vectors)."""
    fs, root = location.filesystem()
    parts = [
        part if where is None else part.filter(where)
        for path, vector in files
        for part in live_batches(fs, root, path, vector, schema)
    ]
    return pa.concat_tables(parts) if parts else schema.empty_table()
