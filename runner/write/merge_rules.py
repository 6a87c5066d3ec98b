"""Merge rules: what a bucket's stored rows and the batch's rows of it become, whatever
write handle (runner/write/handles.py) then writes the result.

A rule gets the batch's rows of one bucket and its stored side (runner/write/stored_bucket.py),
reads of the stored side only what it needs, and returns a `Merged`: the stored keys whose
rows go, the rows to write, the counts, and (a change feed) the tombstones the new file
carries. One rule per way of merging, picked once per task by `merge_rule`:

- PrecombineRule: a key's row is picked whole (Hudi's payloads: the batch's winner, or the
  stored row when event_time says it is newer): runner/write/bucket_merge.py, on the key
  columns of the stored rows only.
- FieldMergeRule: a key's new row is built from fields of its stored and incoming rows
  (partial_update, overwrite_non_defaults, the user's merger): runner/write/field_merge.py.
- ChangeFeedRule: a change feed's events applied to the stored state and the bucket's
  tombstones (target.cdc): runner/write/cdc_apply.py, runner/write/tombstones.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from runner.delta.snapshot import Group
from runner.write import tombstones
from runner.write.bucket_merge import (
    ACTION,
    BucketMerge,
    MergeSettings,
    merge_bucket,
    summarize_stored,
)
from runner.write.cdc_apply import ChangeFeed, apply_changes
from runner.write.field_merge import Merger, load_merger, merge_fields
from runner.write.stored_bucket import StoredBucket

# The counts that say a bucket's rows changed (others count rows that changed nothing).
CHANGING = ("insert", "update", "deleted")


@dataclass(frozen=True)
class BucketBatch:
    """The batch's rows of one bucket: every row, each marked in ACTION as its key's
    `candidate` (the batch's winner) or a `duplicate`, sorted by key."""

    group: Group
    rows: pa.Table

    @cached_property
    def candidates(self) -> pa.Table:
        """Each key's winner in the batch."""
        return self.rows.filter(pc.equal(self.rows.column(ACTION), "candidate"))

    def duplicates(self) -> int:
        """How many rows lost to another of their key in the batch."""
        return pc.sum(pc.equal(self.rows.column(ACTION), "duplicate")).as_py() or 0


@dataclass(frozen=True)
class Merged:
    """A rule's outcome for one bucket."""

    drop_keys: pa.Array  # stored rows with these keys are not kept
    write: pa.Table  # the rows to write (their _commit_seqno is the writer's)
    counts: dict[str, int] = field(default_factory=dict)
    footer_tombstones: bytes | None = None  # encoded, for the new file's footer
    tombstones_changed: bool = False

    @property
    def changed(self) -> bool:
        """Whether the bucket's files change: rows inserted, updated or deleted, or the
        tombstones it remembers."""
        return any(self.counts.get(a, 0) for a in CHANGING) or self.tombstones_changed


class MergeRule(Protocol):
    def merge(self, batch: BucketBatch, stored: StoredBucket) -> Merged:
        """The bucket's outcome, `stored` holding the bucket's live stored rows."""
        ...


def _with(decision: BucketMerge, duplicates: int) -> Merged:
    counts = dict(decision.counts)
    counts["duplicate"] = counts.get("duplicate", 0) + duplicates
    return Merged(decision.drop_keys, decision.write, counts)


@dataclass(frozen=True)
class PrecombineRule:
    """A key's row picked whole, on the stored rows' key (and ordering) columns."""

    settings: MergeSettings

    def merge(self, batch: BucketBatch, stored: StoredBucket) -> Merged:
        summary = summarize_stored(stored.matched_keys, self.settings)
        decision = merge_bucket(batch.candidates, summary, self.settings)
        return _with(decision, batch.duplicates())


@dataclass(frozen=True)
class FieldMergeRule:
    """A key's new row built from the fields of its stored and incoming rows."""

    settings: MergeSettings
    schema: pa.Schema
    merger: Merger | None  # merge_mode custom: the task's instance of the user's class

    def merge(self, batch: BucketBatch, stored: StoredBucket) -> Merged:
        rows = stored.rows_of_batch_keys()
        decision = merge_fields(batch.rows, rows, self.settings, self.schema, self.merger)
        return _with(decision, batch.duplicates())


@dataclass(frozen=True)
class ChangeFeedRule:
    """A change feed's events over the stored rows of their keys and the bucket's
    tombstones (in its files' footers, those younger than cdc.tombstone_hours); its
    duplicates are the events it skips, counted where applied."""

    feed: ChangeFeed

    def merge(self, batch: BucketBatch, stored: StoredBucket) -> Merged:
        rows = stored.rows_of_batch_keys()
        feed = self.feed
        sequence_type = feed.schema.field(feed.cdc.sequence_by).type
        remembered = tombstones.unexpired(
            stored.tombstones(sequence_type), feed.instant, feed.cdc.tombstone_hours
        )
        applied = apply_changes(batch.rows, rows, remembered, feed)
        kept = applied.tombstones
        return Merged(
            applied.merge.drop_keys,
            applied.merge.write,
            dict(applied.merge.counts),
            tombstones.encode(kept) if kept.num_rows else None,
            applied.tombstones_changed,
        )


def merge_rule(settings: MergeSettings, schema: pa.Schema, instant: str) -> MergeRule:
    """The task's rule for `settings` (the user's merger, if any, loaded here: once per
    task)."""
    merger = load_merger(settings.merger) if settings.merger else None
    if not settings.merges_fields:
        return PrecombineRule(settings)
    if settings.cdc is not None:
        assert settings.scd is not None, "merge_settings sets both for a feed"
        return ChangeFeedRule(ChangeFeed(settings.cdc, settings.scd, schema, instant))
    return FieldMergeRule(settings, schema, merger)
