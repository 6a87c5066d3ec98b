"""What a source reads in one run: a frozen plan, decided before the read; and its columns
as far as they are known without a JVM."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from runner.delta.change_feed import ChangePlan
from runner.delta.deletion_vectors import DeletionVector
from runner.delta.restores import Undone
from runner.sources.kafka_offsets import KafkaRead
from runner.spec.model import Source


@dataclass(frozen=True)
class JdbcRead:
    """A JDBC source's read as planned: the bounded query, and its range partitioning."""

    select: str  # a subquery with the checkpoint bounds applied
    partitioning: Mapping[str, str] = field(default_factory=dict)  # Spark's partition options


@dataclass(frozen=True)
class SourcePlan:
    source: Source
    since: Any = None  # the checkpoint this read starts after (None: the beginning)
    until: Any = None  # the checkpoint to record once this read is committed
    paths: tuple[str, ...] | None = None  # exactly these files (None: the source's path)
    base_path: str | None = None  # the directory partition discovery starts from
    instants: tuple[str, ...] | None = None  # a Delta source: only rows of these commits
    # a Delta source: deletion vectors of the files read, by file name
    deletion_vectors: Mapping[str, DeletionVector] = field(default_factory=dict)
    nothing_new: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)  # for the run summary
    jdbc: JdbcRead | None = None  # a JDBC source, once its bounds are planned
    changes: ChangePlan | None = None  # a Delta source: its change data feed to read
    kafka: KafkaRead | None = None  # a Kafka source, once its offsets are planned
    # a Delta source restored after the pipeline had read versions the restore undid
    undone: Undone | None = None

    @property
    def where(self) -> str:
        return f"source '{self.source.name}'"

    @property
    def start_fixed_now(self) -> bool:
        """The start was taken from what the source holds at this moment (a Kafka source's
        first run at `latest`): unless recorded, the next run would take another one."""
        return bool(self.source.incremental) and self.kafka is not None and self.kafka.from_latest

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": self.source.format, **self.details}
        if self.source.incremental:
            out.update(since=self.since, until=self.until, nothing_new=self.nothing_new)
        return out


@dataclass(frozen=True)
class InputSchema:
    schema: pa.Schema | None  # the batch's columns as Spark would give them; None: unknown
    origin: str  # where it was read, or why it cannot be known without Spark
