"""How the write stage writes the touched buckets: the table type's write handles, and what
the commit reads from their result rows.

`bucket_write(target)` picks the handles (runner/write/handles.py says which stored files
each kind of bucket write replaces): copy-on-write rewrites every changed bucket; merge-on-
read keeps a bucket's files where it can, with deletion vectors and a delta file, and
rewrites it past the compaction limits. The commit adds the files `written_files` names
(each group's new file, and those of the groups a rewrite split off), removes those
`replaced_files` names (every file of a rewritten group, the delta files a merge-on-read
group folded) and re-adds those `new_deletion_vectors` names with their new deletion vector.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import Row

from runner.delta.deletion_vectors import DeletionVector
from runner.delta.log_entry import NewDeletionVector, NewFile
from runner.delta.snapshot import DataFile, Group
from runner.spec.model import Target
from runner.storage.location import TableLocation
from runner.write.bucket_merge import MergeSettings
from runner.write.handles import (
    CopyOnWriteHandles,
    DeltaFileLimits,
    Handles,
    MergeOnReadHandles,
)
from runner.write.writer import ExecutorJob, WriteJob


@dataclass(frozen=True)
class WriteRequest:
    """What a bucket write needs to know, for every bucket the batch touches."""

    table: TableLocation
    instant: str
    file_schema: pa.Schema
    file_ids: Mapping[Group, str]  # the file group id a new bucket's first file carries
    stored: Mapping[Group, Sequence[DataFile]]  # the bucket's live files
    merge: MergeSettings
    change_feed: bool  # the table keeps Delta's change data feed
    fault: str | None
    file_group_bytes: int | None  # a file group's target size; None: one group per bucket


@dataclass(frozen=True)
class BucketWrite:
    """The write of a table type: its handles, handed to each task's job."""

    handles: Handles

    @property
    def name(self) -> str:
        return self.handles.name

    def job(self, request: WriteRequest) -> ExecutorJob:
        """The function mapInArrow runs on the executors: one result row per bucket."""
        return WriteJob(
            request.table,
            request.instant,
            request.file_schema,
            dict(request.file_ids),
            stored={g: list(files) for g, files in request.stored.items()},
            merge=request.merge,
            handles=self.handles,
            change_feed=request.change_feed,
            fault=request.fault,
            file_group_bytes=request.file_group_bytes,
        )


def bucket_write(target: Target) -> BucketWrite:
    """The write for the target's table type."""
    if target.table_type == "MERGE_ON_READ":
        compaction = target.compaction
        limits = DeltaFileLimits(compaction.max_delta_files, compaction.max_deleted_fraction)
        return BucketWrite(MergeOnReadHandles(limits))
    return BucketWrite(CopyOnWriteHandles())


def replaced_files(
    results: Sequence[Row], stored: Mapping[Group, Sequence[DataFile]]
) -> list[DataFile]:
    """The stored files the commit removes, as each result row names them: every file of
    each rewritten file group, the delta files a merge-on-read group folded into its new
    delta file."""
    by_path = {f.path: f for files in stored.values() for f in files}
    return [by_path[path] for r in results if r.replaced for path in json.loads(r.replaced)]


def written_files(result: Row) -> list[NewFile]:
    """The data files a result row's write added: its file group's new file and those of
    the groups split off it."""
    first = [NewFile(result.path, result.size, result.stats)] if result.path else []
    more = json.loads(result.more_files) if result.more_files else []
    return first + [NewFile(f["path"], f["size"], f["stats"]) for f in more]


def new_deletion_vectors(
    results: Sequence[Row], stored: Mapping[Group, Sequence[DataFile]]
) -> list[NewDeletionVector]:
    """The stored files that keep their place with a new deletion vector."""
    by_path = {f.path: f for files in stored.values() for f in files}
    return [
        NewDeletionVector(by_path[v["path"]], DeletionVector.from_log(v["deletionVector"]))
        for r in results
        if r.deletion_vectors
        for v in json.loads(r.deletion_vectors)
    ]
