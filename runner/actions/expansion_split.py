"""Buckets split alone (extendible hashing, runner/index/layout.py): the plan, from the log.

`runner expand SPEC --bucket PARTITION/BUCKET` names the buckets to split; under the policy
`split`, `runner expand SPEC` and the check after each commit pick the buckets whose live
bytes pass index.expansion.max_bucket_bytes. Each bucket splits one level, bucket b at
modulus M into b and b+M at 2M: its files alone are read and rewritten, by the same rehash
as a partition-wide expansion (runner/actions/expand.py), in one commit that records the
new layout.
"""

from __future__ import annotations

from collections.abc import Sequence

from runner.actions.expansion_plan import (
    SPLIT,
    BucketSplit,
    ExpansionPlan,
    check_expandable,
    check_partitions,
    files_by_partition,
)
from runner.delta.snapshot import DataFile, Group, TableSnapshot
from runner.errors import UserError
from runner.index.layout import BucketLayout
from runner.write.tombstones import refuse_tombstones

BUCKET_SYNTAX = (
    "expected PARTITION/BUCKET, e.g. city=paris/3 (a bucket id as `runner inspect` shows "
    "it), or BUCKET alone for a table without partitions"
)


def parse_bucket(text: str) -> Group:
    """`--bucket` as (partition path, bucket): the bucket id follows the last '/', and a
    value without '/' (or with a leading one) is a bucket of the table root."""
    partition_path, _, bucket = text.strip().rpartition("/")
    if not bucket.isdigit():
        raise UserError(f"--bucket {text!r}: {BUCKET_SYNTAX}")
    return partition_path, int(bucket)


def plan_split(snapshot: TableSnapshot, names: Sequence[str]) -> ExpansionPlan:
    """The plan that splits each named bucket (`--bucket` values) alone."""
    if not names:
        raise UserError(f"--bucket: {BUCKET_SYNTAX}")
    groups = list(dict.fromkeys(parse_bucket(n) for n in names))
    by_partition = files_by_partition(snapshot)
    check_partitions(snapshot, by_partition, [pp for pp, _ in groups])
    return _plan(snapshot, by_partition, groups)


def plan_hot_splits(
    snapshot: TableSnapshot, max_bytes: int, partitions: Sequence[str] = ()
) -> ExpansionPlan | None:
    """The plan that splits each bucket (of `partitions`, default all) whose live bytes
    pass `max_bytes`; None when none does."""
    by_partition = files_by_partition(snapshot)
    check_partitions(snapshot, by_partition, partitions)
    chosen = set(partitions or by_partition)
    buckets: dict[Group, list[DataFile]] = {}
    for pp in chosen:
        for f in by_partition[pp]:
            buckets.setdefault((pp, f.bucket), []).append(f)
    hot = sorted(g for g, files in buckets.items() if live_bytes(files) > max_bytes)
    return _plan(snapshot, by_partition, hot) if hot else None


def live_bytes(files: Sequence[DataFile]) -> int:
    """A bucket's bytes without the rows deletion vectors delete (pro rata of each file)."""
    return sum(f.size * f.live_records // max(f.num_records, 1) for f in files)


def _plan(
    snapshot: TableSnapshot, by_partition: dict[str, list[DataFile]], groups: Sequence[Group]
) -> ExpansionPlan:
    check_expandable(snapshot.location)  # before any work
    layout = BucketLayout.from_configuration(snapshot.configuration)
    after, splits = layout, []
    for pp, bucket in groups:
        layout.split(pp, bucket)  # refuses a bucket the table does not have
        modulus = layout.modulus_of(pp, bucket)
        assert modulus is not None
        after = after.split(pp, bucket)
        files = tuple(f for f in by_partition[pp] if f.bucket == bucket)
        splits.append(BucketSplit(pp, bucket, modulus, files))
    refuse_tombstones(snapshot, [f for s in splits for f in s.files])
    return ExpansionPlan(snapshot.uri, snapshot.version, SPLIT, layout, after, (), tuple(splits))
