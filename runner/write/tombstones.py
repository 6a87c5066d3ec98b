"""Tombstones: the deleted keys of a change-feed table (target.cdc), so that an event older
than a key's delete, arriving in a later batch, does not bring the key back.

A bucket's tombstones travel in the footer of its data files (the parquet key-value entry
`runner.tombstones`: an Arrow IPC stream, base64): every reader of the table ignores it, and
a tombstone is committed, replaced and removed together with the file that holds it, by the
same Delta commit. Each new file of a bucket carries the bucket's whole set; a bucket's
tombstones are the union over its live files (a key's newest one counts). A tombstone goes
once it is older than cdc.tombstone_hours.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from runner.delta.snapshot import DataFile, Group, TableSnapshot
from runner.errors import UserError
from runner.storage.meta_columns import BUCKET, PARTITION_PATH, RECORD_KEY
from runner.storage.parquet_file import BucketFile

FOOTER_KEY = b"runner.tombstones"
SEQUENCE = "sequence"  # the sequence_by value of the delete
DELETED_AT = "deleted_at"  # the instant of the commit that stored the tombstone


def schema(sequence_type: pa.DataType) -> pa.Schema:
    return pa.schema(
        [
            pa.field(RECORD_KEY, pa.string()),
            pa.field(SEQUENCE, sequence_type),
            pa.field(DELETED_AT, pa.string()),
        ]
    )


def encode(tombstones: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, tombstones.schema) as stream:
        stream.write_table(tombstones)
    return base64.b64encode(sink.getvalue().to_pybytes())


def decode(value: bytes) -> pa.Table:
    return pa.ipc.open_stream(base64.b64decode(value)).read_all()


def read(fs: pafs.FileSystem, root: str, paths: list[str], sequence_type: pa.DataType) -> pa.Table:
    """The union of the tombstones of the files at `paths` (table-relative)."""
    wanted = schema(sequence_type)
    tables = [t.cast(wanted) for t in _in_footers(fs, root, paths)]
    return pa.concat_tables(tables) if tables else wanted.empty_table()


def carried(fs: pafs.FileSystem, root: str, paths: list[str]) -> bytes | None:
    """The footer entry for a file that replaces the files at `paths` (a compaction): their
    tombstones together; None when they hold none."""
    tables = list(_in_footers(fs, root, paths))
    # a sequence column widened meanwhile: older files hold its narrower type
    return encode(pa.concat_tables(tables, promote_options="permissive")) if tables else None


def held(fs: pafs.FileSystem, root: str, paths: list[str]) -> bool:
    """Whether any of the files at `paths` holds tombstones."""
    return any(True for _ in _in_footers(fs, root, paths))


def attach(out: BucketFile, encoded: bytes, group: Group) -> None:
    """Put tombstones in the footer of `out`, a file of bucket `group`: the file is then
    written even with no row, and its statistics still name its bucket (the snapshot reads
    a file's partition path and bucket from them)."""
    out.metadata[FOOTER_KEY] = encoded
    out.stats.widen(PARTITION_PATH, group[0], group[0])
    out.stats.widen(BUCKET, group[1], group[1])


def _in_footers(fs: pafs.FileSystem, root: str, paths: list[str]) -> Iterator[pa.Table]:
    for path in paths:
        found = (pq.read_metadata(f"{root}/{path}", filesystem=fs).metadata or {}).get(FOOTER_KEY)
        if found is not None:
            yield decode(found)


def unexpired(tombstones: pa.Table, instant: str, hours: int) -> pa.Table:
    """The tombstones younger than `hours` at `instant` (instants sort as times do)."""
    now = dt.datetime.strptime(instant[:14], "%Y%m%d%H%M%S")
    oldest = (now - dt.timedelta(hours=hours)).strftime("%Y%m%d%H%M%S") + instant[14:]
    return tombstones.filter(pc.greater_equal(tombstones.column(DELETED_AT), oldest))


def refuse_tombstones(
    snapshot: TableSnapshot,
    files: Sequence[DataFile],
    work: str = "an expansion",
    fix: str = "expand once they have expired, or into a new table",
) -> None:
    """A change feed's table may remember deleted keys in its files' footers
    (this module); `work` that rewrites `files` (an expansion, a schema
    rewrite) does not carry them into its new files yet, and a late event could then bring
    a deleted key back."""
    if "runner.cdc.sequence_by" not in snapshot.configuration:
        return
    fs, root = snapshot.location.filesystem()
    if held(fs, root, [f.path for f in files]):
        raise UserError(
            f"{snapshot.uri} remembers deleted keys of its change feed (tombstones, kept "
            f"cdc.tombstone_hours) in the files {work} rewrites, which it does not carry "
            f"into its new files yet; nothing was changed: {fix}"
        )
