"""How the write stage writes a touched bucket: a strategy chosen by the table type.

Copy-on-write rewrites the bucket: the executor job merges the stored files with the
batch's rows into a new file, and the commit removes the stored files of every bucket that
changed. Merge-on-read keeps a bucket's files where it can: the rows the batch replaces or
deletes get a deletion vector, the batch's rows go into a new delta file, and the commit
re-adds each stored file that lost rows with its new deletion vector (small earlier delta
files are folded into the new one and removed). A MERGE_ON_READ bucket
with too many files or deleted rows is rewritten as copy-on-write would, in the same commit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
from pyspark.sql import Row

from runner.delta.deletion_vectors import DeletionVector
from runner.delta.log_entry import NewDeletionVector
from runner.delta.snapshot import DataFile, Group
from runner.spec.model import Target
from runner.storage.location import TableLocation
from runner.write.bucket_merge import MergeSettings
from runner.write.writer import DeltaFileLimits, ExecutorJob, WriteJob


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


class CopyOnWrite:
    """Each changed bucket is rewritten whole into one new file, which replaces its files."""

    name = "copy_on_write"
    limits: DeltaFileLimits | None = None

    def job(self, request: WriteRequest) -> ExecutorJob:
        return WriteJob(
            request.table,
            request.instant,
            request.file_schema,
            dict(request.file_ids),
            stored={g: list(files) for g, files in request.stored.items()},
            merge=request.merge,
            fault=request.fault,
            delta_files=self.limits,
        )


class MergeOnRead(CopyOnWrite):
    """Deletion vectors on the stored files and one delta file per changed bucket, unless
    the bucket is past the compaction thresholds (then rewritten, as copy-on-write)."""

    name = "merge_on_read"

    def __init__(self, limits: DeltaFileLimits):
        self.limits = limits


def bucket_write(target: Target) -> BucketWrite:
    """The strategy for the target's table type."""
    if target.table_type == "MERGE_ON_READ":
        compaction = target.compaction
        return MergeOnRead(
            DeltaFileLimits(compaction.max_delta_files, compaction.max_deleted_fraction)
        )
    return CopyOnWrite()


def replaced_files(
    results: Sequence[Row], stored: Mapping[Group, Sequence[DataFile]]
) -> list[DataFile]:
    """The stored files the commit removes: every file of each rewritten bucket, and the
    delta files a merge-on-read bucket folded into its new delta file."""
    rewritten = [(r.partition_path, r.bucket) for r in results if r.rewritten]
    by_path = {f.path: f for files in stored.values() for f in files}
    folded = [by_path[path] for r in results if r.folded for path in json.loads(r.folded)]
    return [f for group in rewritten for f in stored.get(group, [])] + folded


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
