"""Write handles: which stored files a changed file group's write replaces, which keep their
place with a deletion vector, which it leaves alone, and the writing of its new file.

A handle works on one file group of a bucket (runner/write/file_groups.py; a bucket of one
group, or of overlapping files, is one). Which files does an upsert (or insert, delete,
change feed) rewrite? The table's handles (`CopyOnWriteHandles`, `MergeOnReadHandles`)
pick one handle per changed group in `handle_for`, and that handle's `files()` names them:

- CreateHandle (Hudi's HoodieCreateHandle): the bucket has no stored file; its first file
  starts its file group (or several, sorted, when its rows pass the target size).
- MergeHandle (HoodieMergeHandle), copy-on-write: every stored file of the group is replaced
  by one new file holding their rows that stay (those no deletion vector deletes and the
  batch does not replace or delete) and the merged rows, sorted by key; past the target
  size it is cut into several groups (BucketOutput.close_sorted).
- AppendHandle (HoodieAppendHandle), merge-on-read: the merged rows go into a new delta
  file of the file group; each stored file losing rows keeps its place with a deletion
  vector for them (one DV file per group). The bucket's earlier delta files go
  into the new file too while they are small next to its base file
  (DeltaFileLimits.fold_fraction), and are replaced: a bucket settles at a base file and
  one delta file. A bucket whose files come from `max_delta_files` commits (a bulk load's
  several files of a bucket are one), or whose deleted fraction would pass
  `max_deleted_fraction`, gets a MergeHandle instead.

What the merged rows are is the merge rule's business (runner/write/merge_rules.py): a
handle writes whatever the rule returns, with the tombstones it hands over. The commit
reads a handle's choice from its result row (runner/write/bucket_write.py replaced_files,
new_deletion_vectors). A compaction (runner/write/compact_writer.py) replaces every file
of a bucket as a MergeHandle does, with no batch; an expansion writes new buckets whole
(runner/write/regroup_writer.py).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, Protocol

import numpy as np
import pyarrow as pa

from runner import faults
from runner.delta.deletion_vectors import DeletionVectorFile
from runner.delta.snapshot import DataFile, Group
from runner.index.naming import commits_among, data_file_path, new_file_id
from runner.storage.key_filter import written_for
from runner.storage.meta_columns import CHANGE_DATA_DIR, COMMIT_SEQNO, RECORD_KEY
from runner.storage.parquet_file import BucketFile, conform
from runner.write import tombstones
from runner.write.file_groups import FileGroup, bytes_per_row, cut_points, sorted_by_key
from runner.write.merge_rules import Merged
from runner.write.stored_bucket import StoredBucket, small
from runner.write.task import WriteTask


@dataclass(frozen=True)
class FilePlan:
    """A handle's choice among its bucket's stored files (indices into them); the files in
    neither list stay as they are."""

    replaced: tuple[int, ...]  # their rows that stay are copied into the new file
    with_deletion_vectors: tuple[int, ...]  # keep their place, their dropped rows deleted

    def replaced_field(self, stored: StoredBucket) -> dict[str, object]:
        """The result row field naming the replaced files, which the commit removes."""
        if not self.replaced:
            return {}
        return {"replaced": json.dumps([stored.files[i].path for i in self.replaced])}


# A file group is rewritten sorted, and cut where it passes the target size, when its
# stored files hold at most this many bytes: its rows are sorted in the task's memory.
# A larger one (a bucket of an older table) is streamed into one file, as before groups.
SORTED_REWRITE_MAX_BYTES = 2**30


class BucketOutput:
    """The new file a handle writes for its file group (named by the job), its DV file,
    and the files of the groups split off it."""

    def __init__(
        self,
        task: WriteTask,
        group: Group,
        relative: str,
        unit: FileGroup | None = None,
        target_bytes: int | None = None,
    ):
        self.task, self.group, self.relative = task, group, relative
        self.unit, self.target_bytes = unit, target_bytes  # target None: groups off
        self.file = BucketFile(
            task.fs, f"{task.root}/{relative}", task.file_schema, key_filter=task.key_filters
        )

    @property
    def sorts(self) -> bool:
        """Whether a rewrite writes its rows sorted by key, cut into groups of the target
        size: with file groups on, for a group small enough to sort in memory."""
        small_enough = self.unit is None or self.unit.size <= SORTED_REWRITE_MAX_BYTES
        return self.target_bytes is not None and small_enough

    def copy(self, rows: Iterable[pa.Table]) -> None:
        """Stored rows that stay, as they are."""
        for part in rows:
            self.file.write(part)

    def deletion_vectors(
        self, stored: StoredBucket, dropped: np.ndarray, files: Sequence[int]
    ) -> dict[str, object]:
        """One DV file for the bucket: per file at `files`, the union of the rows its
        current DV deletes and those `dropped` holds; its result row fields."""
        if not files:
            return {}
        dv_file = DeletionVectorFile(self.task.fs, self.task.root, self.task.instant)
        vectors = [
            {
                "path": stored.files[i].path,
                "deletionVector": dv_file.add(stored.deletion_vector(i, dropped)).to_log(),
            }
            for i in files
        ]
        size = dv_file.close()
        faults.maybe_fail("after_deletion_vector", self.task.fault)
        return {
            "deletion_vectors": json.dumps(vectors),
            "dv_path": dv_file.relative_path,
            "dv_size": size,
        }

    def numbered(self, merged: Merged) -> Merged:
        """The merged rows with their `_commit_seqno`, as the file and the change feed hold
        them."""
        rows = merged.write
        seqno = self.task.seqno.take(len(rows))
        numbered = rows.set_column(rows.schema.get_field_index(COMMIT_SEQNO), COMMIT_SEQNO, seqno)
        return replace(merged, write=conform(numbered, self.task.file_schema))

    def change_file(self, changes: pa.Table) -> dict[str, object]:
        """The bucket's change data file (its path mirrors the data file's under
        `_change_data/`); its result row fields. Written without rows too (only the
        bucket's tombstones changed): a version with change data files is read from them
        alone, while without any its replaced files would read as deleted and inserted."""
        relative = f"{CHANGE_DATA_DIR}/{self.relative}"
        out = BucketFile(
            self.task.fs, f"{self.task.root}/{relative}", changes.schema, key_filter=False
        )
        out.write(changes)
        # a footer entry: BucketFile writes the file even without rows
        out.metadata[b"runner.change_rows"] = str(changes.num_rows).encode()
        out.close()
        faults.maybe_fail("after_change_file", self.task.fault)
        return {"cdc_path": relative, "cdc_size": out.size}

    def close_sorted(self, kept: Iterable[pa.Table], merged: Merged) -> dict[str, object]:
        """Write the rows that stay and the merged rows in key order; past the target size,
        cut into groups of about it (a B-tree leaf split): the first keeps the group's id,
        each other starts a group of its own. Its result row fields."""
        assert self.target_bytes is not None, "sorted writes are for file groups"
        rows = sorted_by_key(pa.concat_tables([*kept, merged.write]))
        keys = rows.column(RECORD_KEY).combine_chunks()
        per_row = bytes_per_row(self.unit, rows, self.target_bytes)
        cuts = cut_points(keys, per_row, self.target_bytes)
        bounds = [0, *cuts, rows.num_rows]
        fields = self.close(replace(merged, write=rows.slice(0, bounds[1])))
        pieces = itertools.pairwise(bounds[1:])
        split_off = [self._group_file(rows.slice(a, b - a)) for a, b in pieces]
        if split_off:
            faults.maybe_fail("after_group_split", self.task.fault)
            fields["more_files"] = json.dumps(split_off)
        return fields

    def _group_file(self, rows: pa.Table) -> dict[str, object]:
        """A new file group of the bucket, holding `rows`."""
        pp, bucket = self.group
        relative = data_file_path(pp, new_file_id(bucket), self.task.token, self.task.instant)
        path = f"{self.task.root}/{relative}"
        out = BucketFile(
            self.task.fs, path, self.task.file_schema, key_filter=self.task.key_filters
        )
        out.write(rows)
        out.close()
        return {
            "path": relative,
            "size": out.size,
            "num_records": out.stats.rows,
            "stats": out.stats.to_json(),
        }

    def close(self, merged: Merged) -> dict[str, object]:
        """Write the merged rows (numbered) and the rule's tombstones; close the file. Its
        result row fields (none when the file holds nothing: every row deleted)."""
        self.file.write(merged.write)
        if merged.footer_tombstones is not None:
            tombstones.attach(self.file, merged.footer_tombstones, self.group)
        closed = self.file.close()
        faults.maybe_fail("after_bucket_file", self.task.fault)
        if not closed:
            return {}
        return {
            "path": self.relative,
            "size": self.file.size,
            "num_records": self.file.stats.rows,
            "stats": self.file.stats.to_json(),
        }


class WriteHandle(Protocol):
    def files(self) -> FilePlan:
        """Which stored files the write replaces, and which get a deletion vector."""
        ...

    def write(self, out: BucketOutput, merged: Merged) -> dict[str, object]:
        """Write the bucket's new file (and DV file); the result row's fields."""
        ...


@dataclass(frozen=True)
class CreateHandle:
    """A bucket without stored files: its first file."""

    def files(self) -> FilePlan:
        return FilePlan(replaced=(), with_deletion_vectors=())

    def write(self, out: BucketOutput, merged: Merged) -> dict[str, object]:
        if out.sorts:
            return {"rewritten": True, **out.close_sorted([], merged)}
        return {"rewritten": True, **out.close(merged)}


@dataclass(frozen=True)
class MergeHandle:
    """Copy-on-write: the file group rewritten whole into one new file (or, past the target
    size, several)."""

    stored: StoredBucket
    dropped: np.ndarray  # the live stored rows the batch replaces or deletes

    def files(self) -> FilePlan:
        return FilePlan(replaced=tuple(range(len(self.stored.files))), with_deletion_vectors=())

    def write(self, out: BucketOutput, merged: Merged) -> dict[str, object]:
        plan = self.files()
        kept = self.stored.kept_rows(self.dropped, plan.replaced)
        row = {"rewritten": True, **plan.replaced_field(self.stored)}
        if out.sorts:
            return {**row, **out.close_sorted(kept, merged)}
        out.copy(kept)
        return {**row, **out.close(merged)}


@dataclass(frozen=True)
class AppendHandle:
    """Merge-on-read: a new delta file, deletion vectors on the stored files losing rows,
    the small earlier delta files folded into the new file."""

    stored: StoredBucket
    dropped: np.ndarray  # the live stored rows the batch replaces or deletes
    limits: DeltaFileLimits

    def files(self) -> FilePlan:
        folded = self.limits.folded(self.stored.files)
        losing = [
            i
            for i in range(len(self.stored.files))
            if i not in folded and self.stored.loses_rows(i, self.dropped)
        ]
        return FilePlan(replaced=tuple(folded), with_deletion_vectors=tuple(losing))

    def write(self, out: BucketOutput, merged: Merged) -> dict[str, object]:
        plan = self.files()
        out.copy(self.stored.kept_rows(self.dropped, plan.replaced))
        row = out.deletion_vectors(self.stored, self.dropped, plan.with_deletion_vectors)
        row.update(plan.replaced_field(self.stored))  # the delta files folded into the new one
        return {**row, **out.close(merged)}


@dataclass(frozen=True)
class DeltaFileLimits:
    """When a MERGE_ON_READ bucket is rewritten rather than given another delta file."""

    max_files: int
    max_deleted_fraction: float
    # Delta files are folded into the bucket's new delta file while together they hold at
    # most this fraction of the bytes of the bucket's largest (base) file: rewriting them
    # costs little next to the file opens and reads they save every reader.
    fold_fraction: float = 0.25

    def exceeded(self, stored: StoredBucket, dropped: np.ndarray) -> bool:
        """The bucket's files come from too many commits (a base and its delta files, as
        Hudi counts delta commits), or it would have too many deleted rows."""
        rows = sum(f.num_records for f in stored.files)
        return (
            commits_among(f.path for f in stored.files) >= self.max_files
            or stored.deleted_with(dropped) > self.max_deleted_fraction * rows
        )

    def folded(self, stored: list[DataFile]) -> list[int]:
        """Indices of the delta files (every file but the largest) to fold, smallest first."""
        if len(stored) < 2:
            return []
        by_size = sorted(range(len(stored)), key=lambda i: stored[i].size)
        budget = self.fold_fraction * stored[by_size[-1]].size
        chosen: list[int] = []
        for i in by_size[:-1]:
            budget -= stored[i].size
            if budget < 0:
                break
            chosen.append(i)
        return chosen


@dataclass(frozen=True)
class CopyOnWriteHandles:
    """A COPY_ON_WRITE table: every changed bucket is rewritten whole."""

    name: ClassVar[str] = "copy_on_write"
    key_filters: ClassVar[bool] = written_for("COPY_ON_WRITE")

    def reads_whole(self, files: Sequence[DataFile]) -> bool:
        """Whether a bucket's stored files are read whole at once (small ones only: a
        rewrite needs every row of them)."""
        return small(files)

    def handle_for(self, stored: StoredBucket, dropped: np.ndarray) -> WriteHandle:
        return MergeHandle(stored, dropped) if stored.files else CreateHandle()


@dataclass(frozen=True)
class MergeOnReadHandles:
    """A MERGE_ON_READ table: deletion vectors and a delta file per changed bucket, unless
    the bucket is past the limits (then rewritten whole)."""

    limits: DeltaFileLimits
    name: ClassVar[str] = "merge_on_read"
    key_filters: ClassVar[bool] = written_for("MERGE_ON_READ")

    def reads_whole(self, files: Sequence[DataFile]) -> bool:
        """Never: a delta file copies few of the stored rows."""
        return False

    def handle_for(self, stored: StoredBucket, dropped: np.ndarray) -> WriteHandle:
        if not stored.files:
            return CreateHandle()
        if self.limits.exceeded(stored, dropped):
            return MergeHandle(stored, dropped)
        return AppendHandle(stored, dropped, self.limits)


Handles = CopyOnWriteHandles | MergeOnReadHandles
