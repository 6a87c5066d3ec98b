"""The bucket plan: each bucket the batch touches, with its stored files, and where the
merge runs (on the driver for a small batch, else in a Spark job).

Which stored files a bucket write then replaces is the write handle's choice
(runner/write/); this stage only hands each handle its bucket's live files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import structlog
from pyspark.sql import DataFrame, SparkSession

from runner.delta.snapshot import DataFile, Group, TableSnapshot
from runner.errors import UserError
from runner.index.naming import new_file_id
from runner.pipeline.winners import why_not_on_driver
from runner.spec.model import Target

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class BucketPlan:
    groups: Mapping[Group, int]  # rows to write per touched (partition path, bucket)
    stored: Mapping[Group, Sequence[DataFile]]  # the live files of each touched bucket
    on_driver: bool  # merged on driver threads, not in a Spark job
    threads: int  # driver threads, when on_driver
    merged_on: str  # for the run summary: the driver or Spark executors, and why
    table_feed: bool = False  # the table keeps Delta's change data feed

    @property
    def change_feed(self) -> bool:
        """Each bucket write also writes its change data file; not when every touched
        bucket is new: such a write only adds new rows (runner/pipeline/figures.py)."""
        return self.table_feed and bool(self.stored)

    def file_ids(self) -> dict[Group, str]:
        """The file group id each bucket's new file carries: its stored group's, or new."""
        return {
            g: self.stored[g][0].file_id if g in self.stored else new_file_id(g[1])
            for g in self.groups
        }

    def again(self, buckets: Iterable[Group], latest: TableSnapshot, target: Target) -> BucketPlan:
        """The plan of a re-merge: `buckets` of this plan, with their files as `latest` has
        them (another writer committed on them first)."""
        groups = {g: self.groups[g] for g in buckets if g in self.groups}
        return BucketPlan(
            groups,
            stored_files(latest, groups, target),
            self.on_driver,
            self.threads,
            self.merged_on,
            self.table_feed,
        )

    def updated_by(self, redone: BucketPlan) -> BucketPlan:
        """This plan with a re-merge's buckets holding the files it merged with."""
        stored = {g: files for g, files in self.stored.items() if g not in redone.groups}
        stored |= redone.stored
        return replace(self, stored=stored)


def plan_buckets(
    spark: SparkSession,
    target: Target,
    snapshot: TableSnapshot | None,
    groups: Mapping[Group, int],
    keyed: DataFrame,
) -> BucketPlan:
    """The touched buckets' stored files, and the merge's place, said in the run summary."""
    stored = stored_files(snapshot, groups, target)
    rows = sum(groups.values())
    stored_bytes = sum(f.size for files in stored.values() for f in files)
    master = spark.sparkContext.master or ""
    why_not = why_not_on_driver(target, keyed.schema, rows, stored_bytes, master)
    threads = max(1, min(os.cpu_count() or 1, spark.sparkContext.defaultParallelism))
    merged_on = (
        f"the driver ({rows:,} rows, {threads} threads)"
        if why_not is None
        else f"Spark executors ({why_not})"
    )
    log.info("merge_place", place=merged_on)
    feed = target.change_data_feed or (snapshot is not None and snapshot.has_change_feed)
    return BucketPlan(dict(groups), stored, why_not is None, threads, merged_on, feed)


def stored_files(
    snapshot: TableSnapshot | None, groups: Mapping[Group, int], target: Target
) -> dict[Group, list[DataFile]]:
    """The stored files of the buckets this batch touches (none for bulk_insert)."""
    if snapshot is None:
        return {}
    by_group = snapshot.files_by_group()
    if target.operation == "bulk_insert":
        refuse_occupied({pp for pp, _ in groups} & {pp for pp, _ in by_group})
        return {}
    return {g: by_group[g] for g in groups if g in by_group}


def refuse_occupied(partitions: Iterable[str]) -> None:
    """bulk_insert never merges: a batch partition that already holds data is an error."""
    busy = sorted(partitions)
    if busy:
        shown = ", ".join(repr(p) for p in busy[:5])
        raise UserError(
            f"bulk_insert writes only into empty partitions, and {len(busy)} of this batch's "
            f"partitions already hold data ({shown}); use operation insert or upsert"
        )
