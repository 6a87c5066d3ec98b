"""A table's bucket counts: one default, and its own count for each expanded partition.

Stored in the table's Delta configuration, so every writer reads the same layout from the
same version it commits on:
  runner.index.buckets             the count of every partition not listed below
  runner.index.buckets.partitions  JSON {partition path: count}, for partitions grown alone
  runner.index.buckets.created     the count the table was created with (the spec's value)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

BUCKETS = "runner.index.buckets"
PARTITION_BUCKETS = "runner.index.buckets.partitions"
CREATED_BUCKETS = "runner.index.buckets.created"
LAYOUT_KEYS = (BUCKETS, PARTITION_BUCKETS, CREATED_BUCKETS)


@dataclass(frozen=True)
class BucketLayout:
    default: int
    partitions: Mapping[str, int] = field(default_factory=dict)
    created: int | None = None

    @classmethod
    def from_configuration(cls, conf: Mapping[str, str]) -> BucketLayout:
        partitions = json.loads(conf.get(PARTITION_BUCKETS) or "{}")
        created = conf.get(CREATED_BUCKETS)
        return cls(
            default=int(conf[BUCKETS]),
            partitions={str(k): int(v) for k, v in partitions.items()},
            created=int(created) if created else None,
        )

    def to_configuration(self) -> dict[str, str]:
        conf = {BUCKETS: str(self.default), CREATED_BUCKETS: str(self.created or self.default)}
        if self.partitions:
            conf[PARTITION_BUCKETS] = json.dumps(dict(sorted(self.partitions.items())))
        return conf

    def count_for(self, partition_path: str) -> int:
        return self.partitions.get(partition_path, self.default)

    def bucket_of(self, partition_path: str, hash_value: int) -> int:
        """The bucket of a row of this partition whose index fields hash to `hash_value`
        (runner/index/string_hash.py): what the Spark expression computes for the writers."""
        return hash_value % self.count_for(partition_path)  # Python's % is pmod here

    def with_counts(self, counts: Mapping[str, int], default: int | None = None) -> BucketLayout:
        """A new layout: `counts` for the named partitions, `default` (when given) for the
        rest. Partitions whose count equals the default are not listed."""
        new_default = self.default if default is None else default
        merged = {} if default is not None else dict(self.partitions)
        merged.update(counts)
        return BucketLayout(
            default=new_default,
            partitions={pp: n for pp, n in merged.items() if n != new_default},
            created=self.created or self.default,
        )

    def describe(self) -> str:
        if not self.partitions:
            return f"{self.default} buckets"
        return f"{self.default} buckets, {len(self.partitions)} partition(s) with their own count"
