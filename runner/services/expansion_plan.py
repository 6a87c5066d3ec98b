"""What a bucket expansion would do, from the Delta log alone (no Spark, nothing written).

The plan step of runner/services/expand.py: the table's bucket layout before and after,
each regrown partition with its files, rows and bytes. `runner plan` and `--dry-run` stop
here; `run_expansion` executes a plan.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runner.delta.log_entry import check_log_writable
from runner.delta.snapshot import DataFile, TableSnapshot
from runner.errors import UserError
from runner.index.layout import BucketLayout
from runner.spec.model import Target
from runner.storage.location import TableLocation
from runner.summary import human_size
from runner.write import tombstones

POLICIES = ("multiple_rehash", "overwrite")


@dataclass(frozen=True)
class PartitionChange:
    partition_path: str
    buckets_before: int
    buckets_after: int
    files: tuple[DataFile, ...]

    @property
    def rows(self) -> int:
        return sum(f.live_records for f in self.files)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class ExpansionPlan:
    table: str
    version: int
    policy: str
    layout_before: BucketLayout
    layout_after: BucketLayout
    changes: tuple[PartitionChange, ...]

    @property
    def files(self) -> list[DataFile]:
        return [f for c in self.changes for f in c.files]

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "policy": self.policy,
            "buckets_before": layout_dict(self.layout_before),
            "buckets_after": layout_dict(self.layout_after),
            "partitions": [
                {
                    "partition": c.partition_path,
                    "buckets_before": c.buckets_before,
                    "buckets_after": c.buckets_after,
                    "files_read": len(c.files),
                    "rows": c.rows,
                    "bytes_read": c.bytes,
                }
                for c in self.changes
            ],
            "files_read": len(self.files),
            "bytes_read": sum(c.bytes for c in self.changes),
            "rows": sum(c.rows for c in self.changes),
            # the rows are copied, not changed: about as many bytes come out as go in
            "bytes_written_estimate": sum(c.bytes for c in self.changes),
            "shuffle": self.policy == "overwrite",
        }

    def render(self) -> str:
        d = self.to_dict()
        how = "a full reshuffle" if d["shuffle"] else "no shuffle: each old bucket split alone"
        lines = [
            f"expansion plan for {self.table} at version {self.version} ({self.policy}, {how})",
            f"  buckets      {self.layout_before.describe()} -> {self.layout_after.describe()}",
            f"  partitions   {len(self.changes)} regrown",
        ]
        for c in self.changes[:20]:
            lines.append(
                f"    {c.partition_path or '<table root>'}: {c.buckets_before} -> "
                f"{c.buckets_after} buckets, {len(c.files)} file(s), {c.rows:,} rows, "
                f"{human_size(c.bytes)}"
            )
        if len(self.changes) > 20:
            lines.append(f"    ... and {len(self.changes) - 20} more")
        lines.append(
            f"  read         {d['files_read']} file(s), {human_size(d['bytes_read'])}; "
            f"write about {human_size(d['bytes_written_estimate'])}"
        )
        return "\n".join(lines)


def plan_expansion(
    snapshot: TableSnapshot,
    target: Target,
    buckets: int | None,
    policy: str | None = None,
    partitions: Sequence[str] = (),
) -> ExpansionPlan:
    """What an expansion would do, from the Delta log alone (no Spark, nothing written).

    `buckets` None means the spec's factor times each partition's current count.
    """
    expansion = target.index.expansion
    policy = policy or (expansion.policy if expansion.policy != "none" else "multiple_rehash")
    if policy not in POLICIES:
        raise UserError(f"unknown expansion policy {policy!r}; use one of {', '.join(POLICIES)}")
    check_expandable(snapshot.location)  # before any work
    layout = BucketLayout.from_configuration(snapshot.configuration)
    by_partition: dict[str, list[DataFile]] = {}
    for f in snapshot.files():
        by_partition.setdefault(f.partition_path, []).append(f)

    whole_table = not partitions
    chosen = sorted(by_partition) if whole_table else list(dict.fromkeys(partitions))
    for pp in chosen:
        if pp not in by_partition:
            near = difflib.get_close_matches(pp, list(by_partition), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise UserError(f"partition {pp!r} holds no data in {snapshot.uri}{hint}")

    counts: dict[str, int] = {}
    changes = []
    for pp in chosen:
        before = layout.count_for(pp)
        after = buckets or before * expansion.factor
        _check_counts(pp, before, after, policy)
        counts[pp] = after
        if after != before:
            changes.append(PartitionChange(pp, before, after, tuple(by_partition[pp])))
    if whole_table:
        default = buckets or layout.default * expansion.factor
        _check_counts("the table's default", layout.default, default, policy)
        layout_after = layout.with_counts(counts, default=default)
    else:
        layout_after = layout.with_counts(counts)
    if layout_after == layout:
        raise UserError(f"nothing to do: {snapshot.uri} already has {layout.describe()}")
    _refuse_tombstones(snapshot, changes)
    return ExpansionPlan(
        snapshot.uri, snapshot.version, policy, layout, layout_after, tuple(changes)
    )


def _refuse_tombstones(snapshot: TableSnapshot, changes: list[PartitionChange]) -> None:
    """A change feed's table may remember deleted keys in its files' footers
    (runner/write/tombstones.py); an expansion does not carry them into the new buckets
    yet, and a late event could then bring a deleted key back."""
    if "runner.cdc.sequence_by" not in snapshot.configuration:
        return
    fs, root = snapshot.location.filesystem()
    paths = [f.path for change in changes for f in change.files]
    if tombstones.held(fs, root, paths):
        raise UserError(
            f"{snapshot.uri} remembers deleted keys of its change feed (tombstones, kept "
            "cdc.tombstone_hours) in the partitions to expand, and an expansion does not "
            "carry them into the new buckets yet; expand once they have expired, or into "
            "a new table"
        )


def _check_counts(where: str, before: int, after: int, policy: str) -> None:
    if policy == "multiple_rehash" and (after < before or after % before):
        raise UserError(
            f"multiple_rehash splits each bucket into k buckets, so it grows {where} from "
            f"{before} buckets only to a multiple of {before} (got {after}); "
            f"use --policy overwrite to reshuffle into {after} buckets"
        )


def check_expandable(location: TableLocation) -> None:
    """Refuses, before any work, a table whose layout commit the runner cannot publish."""
    check_log_writable(location, "bucket expansion (runner expand, plan, index.expansion)")


def buckets_over(snapshot: TableSnapshot, max_bytes: int) -> list[str]:
    """Partitions whose largest bucket file passes max_bytes: the automatic trigger."""
    return sorted({f.partition_path for f in snapshot.files() if f.size > max_bytes})


def layout_dict(layout: BucketLayout) -> dict[str, Any]:
    return {"default": layout.default, "partitions": dict(layout.partitions)}
