"""Which records of a Kafka source one run reads: an offset range per topic-partition.

Pure arithmetic over what the broker said (earliest and latest offset of each partition)
and the checkpoint of the last run, so the rules can be read and tested without a broker:
- a partition in the checkpoint starts at its checkpointed offset; one that is not (a new
  partition, a new topic matching the pattern) at its earliest offset; on the first run
  (no checkpoint) every partition starts where `starting_offsets` says;
- each range ends at the partition's latest offset, unless `max_records_per_run` caps the
  run, shared in proportion to each partition's backlog;
- a checkpointed offset below the earliest one left means retention removed records the
  pipeline never read: `on_data_loss: fail` stops, `skip` starts at the earliest offset and
  counts what was lost. One above the latest offset (a topic deleted and created again)
  is handled the same way, the whole partition being new.

The checkpoint recorded with the commit is `{topic: {partition: next offset}}`, the end of
every range read, and the checkpointed offsets of partitions not seen this run. A first run
at `latest` is recorded even when it reads nothing (KafkaRead.from_latest): the next run
starts where this one found the topics' ends, not where they end then.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runner.errors import UserError
from runner.spec.model import KafkaSpec

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class BrokerOffsets:
    """What the brokers hold of each topic-partition: its earliest and latest offset."""

    earliest: Mapping[TopicPartition, int]
    latest: Mapping[TopicPartition, int]


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int  # the first offset read
    end: int  # one past the last offset read (the offset recorded for the next run)
    lost: int = 0  # records retention removed before `start` (on_data_loss: skip)

    @property
    def records(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class KafkaRead:
    """One run's read of a Kafka source."""

    ranges: tuple[OffsetRange, ...]
    waiting: int  # records past the ranges' ends, left for the next runs (a capped run)
    checkpoint: Mapping[str, Mapping[str, int]]  # to record with the commit
    # a first run's `starting_offsets: latest`: the start is where the topics end now, so
    # it is recorded even when nothing follows it (else every run would start anew)
    from_latest: bool = False

    @property
    def records(self) -> int:
        return sum(r.records for r in self.ranges)

    @property
    def to_read(self) -> tuple[OffsetRange, ...]:
        return tuple(r for r in self.ranges if r.records > 0)

    def summary(self) -> dict[str, Any]:
        topics = sorted({r.topic for r in self.ranges})
        out: dict[str, Any] = {
            "topics": topics,
            "partitions": len(self.ranges),
            "records": self.records,
        }
        if self.from_latest:
            out["start"] = "latest"
        if self.waiting:
            out["records_waiting"] = self.waiting
        lost = sum(r.lost for r in self.ranges)
        if lost:
            out["records_lost"] = lost
        return out


def parse_checkpoint(value: Any, where: str) -> dict[TopicPartition, int] | None:
    """A recorded checkpoint ({topic: {partition: offset}}), or one given as JSON text to
    --checkpoint; None for no checkpoint."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = None
    try:
        return {
            (str(topic), int(partition)): int(offset)
            for topic, partitions in value.items()
            for partition, offset in partitions.items()
        }
    except (AttributeError, TypeError, ValueError):
        raise UserError(
            f"{where}: checkpoint {value!r} is not a set of Kafka offsets; give JSON such as "
            '\'{"orders": {"0": 1200, "1": 1187}}\' (topic, partition, next offset to read)'
        ) from None


def plan_read(
    kafka: KafkaSpec,
    since: Mapping[TopicPartition, int] | None,
    broker: BrokerOffsets,
    where: str,
) -> KafkaRead:
    """The ranges one run reads (`since`: the last run's checkpoint, None on a first run)."""
    ranges = [
        _range(tp, _start(kafka, since, broker, tp), broker, kafka, where)
        for tp in sorted(broker.latest)
    ]
    capped = _capped(ranges, kafka.max_records_per_run)
    waiting = sum(r.records for r in ranges) - sum(r.records for r in capped)
    checkpoint = dict(since or {})  # partitions gone from the brokers keep their offsets
    checkpoint.update({(r.topic, r.partition): r.end for r in capped})
    from_latest = since is None and kafka.starting_offsets == "latest"
    return KafkaRead(tuple(capped), waiting, _as_json(checkpoint), from_latest)


def _start(
    kafka: KafkaSpec,
    since: Mapping[TopicPartition, int] | None,
    broker: BrokerOffsets,
    tp: TopicPartition,
) -> int:
    if since is not None:
        return since.get(tp, broker.earliest[tp])  # a partition new since the last run
    starting = kafka.starting_offsets
    if starting == "latest":
        return broker.latest[tp]
    if isinstance(starting, Mapping):
        return starting.get(tp[0], {}).get(tp[1], broker.earliest[tp])
    return broker.earliest[tp]


def _range(
    tp: TopicPartition, start: int, broker: BrokerOffsets, kafka: KafkaSpec, where: str
) -> OffsetRange:
    earliest, latest = broker.earliest[tp], broker.latest[tp]
    topic, partition = tp
    if earliest <= start <= latest:
        return OffsetRange(topic, partition, start, latest)
    if kafka.on_data_loss == "fail":
        raise UserError(_data_loss(where, tp, start, earliest, latest))
    # skip: read what is left; past the end, the partition was made anew (all of it is new)
    lost = earliest - start if start < earliest else 0
    return OffsetRange(topic, partition, earliest, latest, lost=lost)


def _data_loss(where: str, tp: TopicPartition, start: int, earliest: int, latest: int) -> str:
    topic, partition = tp
    if start < earliest:
        what = (
            f"the last run stopped at offset {start}, but the earliest offset left is "
            f"{earliest}: retention removed {earliest - start} record(s) this pipeline never read"
        )
    else:
        what = (
            f"the last run stopped at offset {start}, beyond the partition's latest offset "
            f"{latest}: the topic was deleted and created again, or its records were removed"
        )
    return (
        f"{where}: topic '{topic}' partition {partition}: {what}. Nothing was read. To go on "
        "from the earliest offset left, set kafka.on_data_loss: skip (the summary counts "
        "what was lost), or start from chosen offsets with --checkpoint"
    )


def _capped(ranges: list[OffsetRange], limit: int | None) -> list[OffsetRange]:
    """The ranges cut to `limit` records in all, each partition getting a share in
    proportion to its backlog (the remainder one record at a time, in partition order)."""
    total = sum(r.records for r in ranges)
    if limit is None or total <= limit:
        return ranges
    shares = [r.records * limit // total for r in ranges]
    left = limit - sum(shares)
    for i, r in enumerate(ranges):
        if left == 0:
            break
        if shares[i] < r.records:
            shares[i] += 1
            left -= 1
    return [
        OffsetRange(r.topic, r.partition, r.start, r.start + share, r.lost)
        for r, share in zip(ranges, shares, strict=True)
    ]


def _as_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def assignment(ranges: Iterable[OffsetRange]) -> dict[str, list[int]]:
    """The topic-partitions of `ranges`, as Spark's Kafka source takes them (`assign`)."""
    out: dict[str, list[int]] = {}
    for r in ranges:
        out.setdefault(r.topic, []).append(r.partition)
    return out


def offsets_json(ranges: Iterable[OffsetRange], at: str) -> str:
    """`startingOffsets` (at="start") or `endingOffsets` (at="end") for Spark."""
    out: dict[str, dict[str, int]] = {}
    for r in ranges:
        out.setdefault(r.topic, {})[str(r.partition)] = getattr(r, at)
    return json.dumps(out)
