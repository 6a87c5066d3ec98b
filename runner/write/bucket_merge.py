"""What one bucket's rewrite keeps, replaces and adds: Hudi's merge handle, in vectorized pyarrow.

Inputs: the bucket's incoming records (already de-duplicated per key by Spark) and, from its
stored file, each stored key with its row count and greatest precombine value. Output: the
stored keys whose rows are dropped, the incoming rows to write, and the counts. No Python
runs per row.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runner.spec.model import FIELD_MERGE_MODES, CdcSpec, MergeMode, MergerSpec, ScdSpec
from runner.storage.meta_columns import RECORD_KEY
from runner.write.change_rows import counted_by_key

DELETE = "__runner_delete"
# Spark's mark on each incoming row (runner/pipeline/winners.py): `candidate` for its key's
# winner in the batch, `duplicate` for the others
ACTION = "__runner_action"
SEQ = "__runner_seq"  # a row's place in the batch: ties between a key's rows go to the later


@dataclass(frozen=True)
class MergeSettings:
    operation: str  # upsert | insert | bulk_insert | delete
    precombine_field: str | None
    merge_mode: MergeMode
    filter_dupes: bool
    merger: MergerSpec | None = None  # merge_mode custom: the user's class
    cdc: CdcSpec | None = None  # the batch is a change feed (runner/write/cdc_apply.py)
    scd: ScdSpec | None = None  # with cdc: the history the table keeps
    skip_unchanged: bool = False  # an upsert's row equal to its stored row is left alone

    @property
    def event_time(self) -> bool:
        """Stored rows with a greater precombine value win over incoming ones."""
        return self.merge_mode == "event_time"

    @property
    def merges_fields(self) -> bool:
        """A key's new row is built from the stored and incoming rows' fields
        (runner/write/field_merge.py), not picked whole from one of them; or a change
        feed's events are applied to them (runner/write/cdc_apply.py)."""
        return self.operation == "upsert" and (
            self.merge_mode in FIELD_MERGE_MODES or self.cdc is not None
        )


@dataclass(frozen=True)
class BucketMerge:
    drop_keys: pa.Array  # stored rows with these keys are not written again
    write: pa.Table  # incoming rows to write
    counts: dict[str, int]


def stored_key_columns(settings: MergeSettings) -> list[str]:
    """The stored file columns the decision needs (a cheap, column-pruned first read)."""
    needs_order = settings.operation == "upsert" and settings.event_time
    ordering = settings.precombine_field if needs_order else None
    return [RECORD_KEY, *([ordering] if ordering else [])]


def summarize_stored(stored: pa.Table, settings: MergeSettings) -> pa.Table:
    """Per stored key: its row count and, for event_time upserts, its greatest precombine."""
    ordering = settings.precombine_field if len(stored_key_columns(settings)) == 2 else None
    return counted_by_key(stored, [ordering] if ordering else [])


def _count(mask: np.ndarray) -> int:
    return int(np.count_nonzero(mask))


def merge_bucket(incoming: pa.Table, stored: pa.Table, settings: MergeSettings) -> BucketMerge:
    """Decide the bucket's new content. `stored` comes from summarize_stored."""
    keys = incoming.column(RECORD_KEY)
    position = pc.index_in(keys, value_set=stored.column(RECORD_KEY))
    has_stored = position.is_valid().to_numpy(zero_copy_only=False)
    stored_rows = pc.take(stored.column(f"{RECORD_KEY}_count"), position)
    stored_rows = pc.fill_null(stored_rows, 0).to_numpy(zero_copy_only=False)
    nothing = pa.array([], keys.type)
    op = settings.operation

    if op in ("insert", "bulk_insert"):
        if not settings.filter_dupes:
            return BucketMerge(nothing, incoming, {"insert": incoming.num_rows})
        keep = ~has_stored  # keys already stored are duplicates
        return BucketMerge(
            nothing,
            incoming.filter(pa.array(keep)),
            {"insert": _count(keep), "duplicate": _count(has_stored)},
        )

    if op == "delete":
        return BucketMerge(
            pc.filter(keys, pa.array(has_stored)),
            incoming.slice(0, 0),
            {
                "deleted": int(stored_rows[has_stored].sum()),
                "delete_missing": _count(~has_stored),
            },
        )

    # upsert
    wins = np.ones(incoming.num_rows, dtype=bool)
    if settings.event_time and settings.precombine_field:
        stored_max = pc.take(stored.column(f"{settings.precombine_field}_max"), position)
        newer = pc.greater_equal(incoming.column(settings.precombine_field), stored_max)
        # no stored row, or a stored row without an ordering value: the incoming one wins
        newer = pc.or_kleene(newer, pc.is_null(stored_max))
        wins = pc.fill_null(newer, False).to_numpy(zero_copy_only=False)
    delete = pc.fill_null(incoming.column(DELETE), False).to_numpy(zero_copy_only=False)
    replaces = has_stored & wins
    return BucketMerge(
        pc.filter(keys, pa.array(replaces)),
        incoming.filter(pa.array(wins & ~delete)),
        {
            "insert": _count(~has_stored & ~delete),
            "update": _count(replaces & ~delete),
            "deleted": int(stored_rows[replaces & delete].sum()),
            "stale": _count(~wins),
            "delete_missing": _count(~has_stored & delete),
        },
    )


def run_bounds(values: pa.Array | pa.ChunkedArray) -> Iterator[tuple[int, int]]:
    """(start, end) of each contiguous run of equal values."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    start = 0
    for end in pc.run_end_encode(values).run_ends.to_pylist():
        yield start, end
        start = end
