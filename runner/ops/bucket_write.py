"""How the write stage writes a touched bucket: a strategy it chooses per table type.

Copy-on-write (the only table type today) rewrites the bucket: the executor job merges the
stored file with the batch's rows into a new file, and the commit removes the stored files
of every bucket that changed. A merge-on-read strategy (deletion vectors on the stored
files, the batch's rows in a new delta file) is another implementation of the same two
steps, chosen by `bucket_write`, with no branch in the stage itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
from pyspark.sql import Row

from runner.spec.model import Target
from runner.table.bucket_merge import MergeSettings
from runner.table.snapshot import DataFile, Group
from runner.table.storage import TableLocation
from runner.table.writer import WriteJob

ExecutorJob = Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]


@dataclass(frozen=True)
class WriteRequest:
    """What a bucket write needs to know, for every bucket the batch touches."""

    table: TableLocation
    instant: str
    file_schema: pa.Schema
    file_ids: Mapping[Group, str]  # the file group id each bucket's new file carries
    stored: Mapping[Group, Sequence[DataFile]]  # the bucket's live files
    merge: MergeSettings
    fault: str | None


class BucketWrite(Protocol):
    name: str

    def job(self, request: WriteRequest) -> ExecutorJob:
        """The function mapInArrow runs on the executors: one result row per bucket."""
        ...

    def replaced(
        self, results: Sequence[Row], stored: Mapping[Group, Sequence[DataFile]]
    ) -> list[DataFile]:
        """The stored files the commit removes, given the executors' results."""
        ...


class CopyOnWrite:
    """Each changed bucket is rewritten whole into one new file, which replaces its files."""

    name = "copy_on_write"

    def job(self, request: WriteRequest) -> ExecutorJob:
        return WriteJob(
            request.table,
            request.instant,
            request.file_schema,
            dict(request.file_ids),
            stored={g: [f.path for f in files] for g, files in request.stored.items()},
            merge=request.merge,
            fault=request.fault,
        )

    def replaced(
        self, results: Sequence[Row], stored: Mapping[Group, Sequence[DataFile]]
    ) -> list[DataFile]:
        changed = [(r.partition_path, r.bucket) for r in results if r.changed]
        return [f for group in changed for f in stored.get(group, [])]


def bucket_write(target: Target) -> BucketWrite:
    """The strategy for the target's table type."""
    return CopyOnWrite()
