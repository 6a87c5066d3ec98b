"""A table's bucket layout: each partition's bucket count, and the buckets split alone.

Stored in the table's Delta configuration, so every writer reads the same layout from the
same version it commits on:
  runner.index.buckets             the count of every partition not listed below
  runner.index.buckets.partitions  JSON {partition path: count}, for partitions grown alone
  runner.index.buckets.created     the count the table was created with (the spec's value)
  runner.index.buckets.splits      JSON {partition path: {bucket: modulus}}, the buckets
                                   split alone (absent while none is)

Buckets split alone (extendible hashing). A partition of N buckets puts a row whose index
fields hash to h (runner/index/bucket.py) in bucket pmod(h, N): each bucket is a leaf at
modulus N. A leaf c at modulus M may split alone into c and c+M, two leaves at modulus 2M:
its rows go to pmod(h, 2M), which is c or c+M, so the split reads and writes only its own
files. A leaf holds exactly the hashes with pmod(h, M) == c, and the leaves of a partition
hold every hash once; so a leaf's id is below its modulus and unique in its partition (two
leaves with id c would both hold h = c), and the bucket id in a file's name stays the whole
mapping. `runner.index.buckets.splits` lists, per partition, every leaf deeper than the
partition's count with its modulus: a partition of 4 buckets whose bucket 3 split (into 3
and 7 at modulus 8), then whose bucket 7 split (into 7 and 15 at 16), is
`{"city=paris": {"3": 8, "7": 16, "15": 16}}`. A row's bucket is the listed leaf c at M with
pmod(h, M) == c when there is one (at most one is: leaves are disjoint), else pmod(h, N) (a
bucket that never split).

A partition-wide expansion from N to N * 2^k buckets folds the leaves at moduli up to the
new count into it and keeps the deeper ones; to any other count the partition's splits are
dropped (such an expansion rewrites every row of the partition by the new layout).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from runner.errors import RunnerError, UserError

BUCKETS = "runner.index.buckets"
PARTITION_BUCKETS = "runner.index.buckets.partitions"
CREATED_BUCKETS = "runner.index.buckets.created"
SPLIT_BUCKETS = "runner.index.buckets.splits"
LAYOUT_KEYS = (BUCKETS, PARTITION_BUCKETS, CREATED_BUCKETS, SPLIT_BUCKETS)
MAX_BUCKET_IDS = 10**8  # a file name spells its bucket id in 8 digits (runner/index/naming.py)

# (bucket, modulus): the bucket holds the hashes h with pmod(h, modulus) == bucket
Leaf = tuple[int, int]


@dataclass(frozen=True)
class BucketLayout:
    default: int
    partitions: Mapping[str, int] = field(default_factory=dict)
    created: int | None = None
    # {partition path: {bucket: modulus}}: the leaves deeper than their partition's count
    splits: Mapping[str, Mapping[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for pp, leaves in self.splits.items():
            problem = _tree_problem(self.count_for(pp), leaves)
            if problem:
                raise RunnerError(
                    f"the table's {SPLIT_BUCKETS} for partition {pp!r} is not a bucket "
                    f"layout ({problem}); was the table's configuration edited by hand?"
                )

    @classmethod
    def from_configuration(cls, conf: Mapping[str, str]) -> BucketLayout:
        partitions = json.loads(conf.get(PARTITION_BUCKETS) or "{}")
        created = conf.get(CREATED_BUCKETS)
        splits = json.loads(conf.get(SPLIT_BUCKETS) or "{}")
        return cls(
            default=int(conf[BUCKETS]),
            partitions={str(k): int(v) for k, v in partitions.items()},
            created=int(created) if created else None,
            splits={
                str(pp): {int(b): int(m) for b, m in leaves.items()}
                for pp, leaves in splits.items()
            },
        )

    def to_configuration(self) -> dict[str, str]:
        conf = {BUCKETS: str(self.default), CREATED_BUCKETS: str(self.created or self.default)}
        if self.partitions:
            conf[PARTITION_BUCKETS] = json.dumps(dict(sorted(self.partitions.items())))
        if self.splits:
            conf[SPLIT_BUCKETS] = json.dumps(self.splits_json())
        return conf

    def splits_json(self) -> dict[str, dict[str, int]]:
        """The split leaves as JSON has them (bucket ids as strings), sorted."""
        return {
            pp: {str(b): m for b, m in sorted(leaves.items())}
            for pp, leaves in sorted(self.splits.items())
        }

    def count_for(self, partition_path: str) -> int:
        return self.partitions.get(partition_path, self.default)

    def largest_modulus(self) -> int:
        """Every bucket id of the table is below this."""
        counts = [self.default, *self.partitions.values()]
        return max([*counts, *(m for leaves in self.splits.values() for m in leaves.values())])

    def leaves(self, partition_path: str) -> list[Leaf]:
        """Every bucket of the partition with its modulus, by bucket id."""
        count = self.count_for(partition_path)
        deep = self.splits.get(partition_path, {})
        split = {b % count for b in deep}
        return sorted([(b, count) for b in range(count) if b not in split] + list(deep.items()))

    def leaf_count(self, partition_path: str) -> int:
        """How many buckets the partition has: its count, plus one for each split."""
        count = self.count_for(partition_path)
        deep = self.splits.get(partition_path, {})
        return count - len({b % count for b in deep}) + len(deep)

    def modulus_of(self, partition_path: str, bucket: int) -> int | None:
        """The modulus of the partition's bucket `bucket`; None when it has no such bucket."""
        count = self.count_for(partition_path)
        deep = self.splits.get(partition_path, {})
        if bucket in deep:
            return deep[bucket]
        if 0 <= bucket < count and not any(b % count == bucket for b in deep):
            return count
        return None

    def moduli(self, partition_path: str) -> dict[int, list[int]]:
        """The split leaves of the partition by modulus, shallowest first: {modulus: buckets}."""
        found: dict[int, list[int]] = {}
        for bucket, modulus in sorted(self.splits.get(partition_path, {}).items()):
            found.setdefault(modulus, []).append(bucket)
        return dict(sorted(found.items()))

    def bucket_of(self, partition_path: str, hash_value: int) -> int:
        """The bucket of a row of this partition whose index fields hash to `hash_value`
        (runner/index/string_hash.py): what the Spark expression computes for the writers."""
        for modulus, buckets in self.moduli(partition_path).items():
            if hash_value % modulus in buckets:  # Python's % is pmod here
                return hash_value % modulus
        return hash_value % self.count_for(partition_path)

    def split(self, partition_path: str, bucket: int) -> BucketLayout:
        """This layout with the partition's bucket `bucket` split into two at twice its
        modulus; UserError when the partition has no such bucket."""
        modulus = self.modulus_of(partition_path, bucket)
        if modulus is None:
            raise UserError(self._no_bucket(partition_path, bucket))
        if bucket + modulus >= MAX_BUCKET_IDS:
            raise UserError(
                f"bucket {bucket} of {partition_path!r} is at modulus {modulus}: a split would "
                f"make bucket {bucket + modulus}, past the {MAX_BUCKET_IDS} ids a file name holds"
            )
        deep = dict(self.splits.get(partition_path, {}))
        deep[bucket] = deep[bucket + modulus] = 2 * modulus
        return replace(self, splits={**self.splits, partition_path: deep})

    def _no_bucket(self, partition_path: str, bucket: int) -> str:
        where = f"partition {partition_path!r}" if partition_path else "the table root"
        if bucket < 0:
            return f"{where} has no bucket {bucket}: bucket ids start at 0"
        # the leaf whose split would bring it: it holds the hash h = bucket
        parent = self.bucket_of(partition_path, bucket)
        modulus = self.modulus_of(partition_path, parent)
        return (
            f"{where} has no bucket {bucket} yet: it would come from bucket {parent} (modulus "
            f"{modulus}), which splits into {parent} and {parent + (modulus or 0)}; split that "
            "one first (`runner inspect` lists the partition's buckets)"
        )

    def with_counts(self, counts: Mapping[str, int], default: int | None = None) -> BucketLayout:
        """A new layout: `counts` for the named partitions, `default` (when given) for the
        rest. Partitions whose count equals the default are not listed. The split buckets
        of a partition whose count changes are folded (see the module docstring)."""
        new_default = self.default if default is None else default
        merged = {} if default is not None else dict(self.partitions)
        merged.update(counts)
        grown = BucketLayout(
            default=new_default,
            partitions={pp: n for pp, n in merged.items() if n != new_default},
            created=self.created or self.default,
        )
        splits = {}
        for pp, leaves in self.splits.items():
            kept = _fold(leaves, self.count_for(pp), grown.count_for(pp))
            if kept:
                splits[pp] = kept
        return replace(grown, splits=splits)

    def leaf_across(self, before: BucketLayout, partition_path: str) -> Leaf | None:
        """A bucket of `before` that this layout's buckets of the partition cut across;
        None when each of them lies within one bucket of `before`, so that each old bucket
        can be split on its own (a rehash, no reshuffle)."""
        for bucket, modulus in self.leaves(partition_path):
            old = before.bucket_of(partition_path, bucket)  # the old bucket of hash `bucket`
            old_modulus = before.modulus_of(partition_path, old)
            assert old_modulus is not None
            if modulus % old_modulus:
                return (old, old_modulus)
        return None

    def describe(self) -> str:
        text = f"{self.default} buckets"
        if self.partitions:
            text += f", {len(self.partitions)} partition(s) with their own count"
        splits = sum(self.leaf_count(pp) - self.count_for(pp) for pp in self.splits)
        if splits:
            text += f", {splits} bucket split(s) in {len(self.splits)} partition(s)"
        return text


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _fold(leaves: Mapping[int, int], before: int, after: int) -> dict[int, int]:
    """The split leaves a partition keeps when its count goes from `before` to `after`:
    all of them when it stays; those deeper than `after` when it grows by a power of two;
    none otherwise."""
    if after == before:
        return dict(leaves)
    if after < before or after % before or not _is_power_of_two(after // before):
        return {}
    return {b: m for b, m in leaves.items() if m > after}


def _tree_problem(count: int, leaves: Mapping[int, int]) -> str | None:
    """Why `leaves` (bucket: modulus) are not the deeper leaves of a partition of `count`
    buckets that split alone: each at count * 2^k (k >= 1) with its id below it, none inside
    another, and under each split bucket of the count they cover its hashes once."""
    if not leaves:
        return "no bucket listed"
    depth_sums: dict[int, int] = {}  # base bucket: sum of 2^(DEEPEST - depth) of its leaves
    deepest = max(leaves.values())
    for bucket, modulus in leaves.items():
        if modulus <= count or modulus % count or not _is_power_of_two(modulus // count):
            return f"bucket {bucket} has modulus {modulus}, not {count} times a power of two"
        if not 0 <= bucket < modulus:
            return f"bucket {bucket} is not below its modulus {modulus}"
        above = modulus // 2
        while above >= count:
            if leaves.get(bucket % above) == above:
                return f"bucket {bucket} (modulus {modulus}) lies inside bucket {bucket % above}"
            above //= 2
        base = bucket % count
        depth_sums[base] = depth_sums.get(base, 0) + deepest // modulus
    for base, total in depth_sums.items():
        if total != deepest // count:
            return f"the buckets split from bucket {base} do not cover it exactly once"
    return None
