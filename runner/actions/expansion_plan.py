"""What a bucket expansion would do, from the Delta log alone (no Spark, nothing written).

The plan step of runner/actions/expand.py: the table's bucket layout before and after,
each regrown partition, or each bucket split alone (runner/actions/expansion_split.py),
with its files, rows and bytes. `runner plan` and `--dry-run` stop here; `run_expansion`
executes a plan.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runner.delta.log_entry import check_log_writable
from runner.delta.snapshot import DataFile, Group, TableSnapshot
from runner.errors import UserError
from runner.index.layout import BucketLayout
from runner.spec.model import Target
from runner.storage.location import TableLocation
from runner.summary import human_size
from runner.write.tombstones import refuse_tombstones

POLICIES = ("multiple_rehash", "overwrite")
SPLIT = "split"  # the policy of a plan that splits buckets alone


class ReadFiles:
    """What an expansion reads of a partition or bucket: its live rows and bytes."""

    files: tuple[DataFile, ...]

    @property
    def rows(self) -> int:
        return sum(f.live_records for f in self.files)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class PartitionChange(ReadFiles):
    partition_path: str
    buckets_before: int
    buckets_after: int
    files: tuple[DataFile, ...]


@dataclass(frozen=True)
class BucketSplit(ReadFiles):
    """One bucket split alone: `bucket`, at `modulus`, into `bucket` and `bucket + modulus`."""

    partition_path: str
    bucket: int
    modulus: int
    files: tuple[DataFile, ...]

    @property
    def children(self) -> tuple[int, int]:
        return (self.bucket, self.bucket + self.modulus)

    @property
    def name(self) -> str:
        return f"{self.partition_path}/{self.bucket}" if self.partition_path else str(self.bucket)


@dataclass(frozen=True)
class ExpansionPlan:
    table: str
    version: int
    policy: str
    layout_before: BucketLayout
    layout_after: BucketLayout
    changes: tuple[PartitionChange, ...]
    splits: tuple[BucketSplit, ...] = ()

    @property
    def parts(self) -> list[PartitionChange | BucketSplit]:
        """What it rewrites: the regrown partitions, or the buckets split alone."""
        return [*self.changes, *self.splits]

    @property
    def files(self) -> list[DataFile]:
        return [f for c in self.parts for f in c.files]

    @property
    def rows(self) -> int:
        return sum(c.rows for c in self.parts)

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.parts)

    def new_buckets(self) -> list[Group]:
        """The buckets the rewrite writes: every bucket of a regrown partition, both
        children of a split bucket."""
        regrown = [
            (c.partition_path, b)
            for c in self.changes
            for b, _ in self.layout_after.leaves(c.partition_path)
        ]
        split = [(s.partition_path, b) for s in self.splits for b in s.children]
        return regrown + split

    def files_estimate(self) -> float:
        """The files the rewrite is expected to write: one per new bucket that gets a row.
        An old bucket of r rows rehashed into k children fills k(1 - (1 - 1/k)^r) of them
        on average; an overwrite spreads a partition's rows over all its new buckets."""
        expected = 0.0
        for change in self.changes:
            if self.policy == "overwrite":
                expected += _filled(change.buckets_after, change.rows)
                continue
            children = max(change.buckets_after // max(change.buckets_before, 1), 1)
            rows: dict[int, int] = {}
            for f in change.files:
                rows[f.bucket] = rows.get(f.bucket, 0) + f.live_records
            expected += sum(_filled(children, r) for r in rows.values())
        return expected + sum(_filled(2, s.rows) for s in self.splits)

    def bytes_estimate(self) -> int:
        """The bytes the rewrite is expected to write. A file weighs a fixed part (its
        footer: schema and statistics) and a part per row, both read off the files read (a
        least-squares line of size over rows): small files are mostly footer, so splitting
        them writes more bytes than it reads."""
        files = self.files
        rows = [f.num_records for f in files]
        sizes = [f.size for f in files]
        if not files or not sum(rows):
            return self.bytes
        mean_rows, mean_size = sum(rows) / len(rows), sum(sizes) / len(sizes)
        spread = sum((r - mean_rows) ** 2 for r in rows)
        per_row = (
            sum((r - mean_rows) * (s - mean_size) for r, s in zip(rows, sizes, strict=True))
            / spread
            if spread
            else 0.0
        )
        if per_row <= 0:  # no line to read: every byte counted as the rows'
            return round(self.bytes * self.rows / sum(rows))
        fixed = min(max(mean_size - per_row * mean_rows, 0.0), min(sizes))
        return round(fixed * self.files_estimate() + per_row * self.rows)

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
            "splits": [
                {
                    "partition": s.partition_path,
                    "bucket": s.bucket,
                    "modulus_before": s.modulus,
                    "buckets_after": list(s.children),
                    "modulus_after": 2 * s.modulus,
                    "files_read": len(s.files),
                    "rows": s.rows,
                    "bytes_read": s.bytes,
                }
                for s in self.splits
            ],
            "files_read": len(self.files),
            "bytes_read": self.bytes,
            "rows": self.rows,
            "files_written_estimate": round(self.files_estimate()),
            "bytes_written_estimate": self.bytes_estimate(),
            "shuffle": self.policy == "overwrite",
        }

    def render(self) -> str:
        d = self.to_dict()
        how = "a full reshuffle" if d["shuffle"] else "no reshuffle: each old bucket split alone"
        lines = [
            f"expansion plan for {self.table} at version {self.version} ({self.policy}, {how})",
            f"  buckets      {self.layout_before.describe()} -> {self.layout_after.describe()}",
        ]
        if self.policy == SPLIT:
            lines.append(f"  split        {len(self.splits)} bucket(s) alone")
            lines += [
                f"    {s.partition_path or '<table root>'} bucket {s.bucket}: modulus "
                f"{s.modulus} -> {2 * s.modulus}, into {s.children[0]} and {s.children[1]}, "
                f"{len(s.files)} file(s), {s.rows:,} rows, {human_size(s.bytes)}"
                for s in self.splits[:20]
            ]
        else:
            lines.append(f"  partitions   {len(self.changes)} regrown")
            lines += [
                f"    {c.partition_path or '<table root>'}: {c.buckets_before} -> "
                f"{c.buckets_after} buckets, {len(c.files)} file(s), {c.rows:,} rows, "
                f"{human_size(c.bytes)}"
                for c in self.changes[:20]
            ]
        more = max(len(self.changes), len(self.splits)) - 20
        if more > 0:
            lines.append(f"    ... and {more} more")
        lines.append(
            f"  read         {d['files_read']} file(s), {human_size(d['bytes_read'])}; "
            f"write about {human_size(d['bytes_written_estimate'])} in about "
            f"{d['files_written_estimate']} file(s)"
        )
        return "\n".join(lines)


def _filled(buckets: int, rows: int) -> float:
    """How many of `buckets` get at least one of `rows` rows hashed evenly among them."""
    return buckets * (1 - (1 - 1 / buckets) ** rows) if buckets else 0.0


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
    if policy is None:
        policy = expansion.policy if expansion.policy in POLICIES else "multiple_rehash"
    if policy not in POLICIES:
        raise UserError(f"unknown expansion policy {policy!r}; use one of {', '.join(POLICIES)}")
    check_expandable(snapshot.location)  # before any work
    layout = BucketLayout.from_configuration(snapshot.configuration)
    by_partition = files_by_partition(snapshot)
    whole_table = not partitions
    chosen = sorted(by_partition) if whole_table else list(dict.fromkeys(partitions))
    check_partitions(snapshot, by_partition, chosen)

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
    if policy == "multiple_rehash":
        for change in changes:
            _check_splits_kept(layout, layout_after, change)
    refuse_tombstones(snapshot, [f for c in changes for f in c.files])
    return ExpansionPlan(
        snapshot.uri, snapshot.version, policy, layout, layout_after, tuple(changes)
    )


def files_by_partition(snapshot: TableSnapshot) -> dict[str, list[DataFile]]:
    by_partition: dict[str, list[DataFile]] = {}
    for f in snapshot.files():
        by_partition.setdefault(f.partition_path, []).append(f)
    return by_partition


def check_partitions(
    snapshot: TableSnapshot, by_partition: dict[str, list[DataFile]], chosen: Sequence[str]
) -> None:
    """Refuses a partition that holds no data, naming the closest one that does."""
    for pp in chosen:
        if pp not in by_partition:
            near = difflib.get_close_matches(pp, list(by_partition), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise UserError(f"partition {pp!r} holds no data in {snapshot.uri}{hint}")


def _check_splits_kept(before: BucketLayout, after: BucketLayout, change: PartitionChange) -> None:
    """multiple_rehash splits each old bucket on its own: every new bucket must lie in one
    old bucket, which a bucket split alone allows only for some counts (a power of two
    times the partition's always)."""
    across = after.leaf_across(before, change.partition_path)
    if across is None:
        return
    bucket, modulus = across
    raise UserError(
        f"bucket {bucket} of {change.partition_path or 'the table root'} was split alone (to "
        f"modulus {modulus}), and {change.buckets_after} buckets would cut across it: "
        f"multiple_rehash can grow a partition with split buckets by a power of two (e.g. "
        f"--buckets {change.buckets_before * 2}); use --policy overwrite to reshuffle into "
        f"{change.buckets_after} buckets"
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
    shown: dict[str, Any] = {"default": layout.default, "partitions": dict(layout.partitions)}
    if layout.splits:
        shown["splits"] = layout.splits_json()
    return shown
