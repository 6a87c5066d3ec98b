"""The delta kind: another Delta table, read from its log with delta-rs (no JVM) as of its
latest version, or incrementally since the version last read (runner/sources/delta.py): its
new commits' rows, or its change data feed. Its checkpoint is `{"version": N}`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runner.delta.snapshot import open_table
from runner.sources.dataset_names import Dataset, path_dataset
from runner.sources.delta import plan_delta_read
from runner.sources.kinds.base import FirstReadLoss, SourceKind, declared_schema, where
from runner.sources.model import InputSchema, SourcePlan
from runner.spec.model import Source
from runner.storage.location import locate

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class Delta(SourceKind):
    format = "delta"
    reads_path = True

    def plan(self, source: Source, since: Any, skip: frozenset[str]) -> SourcePlan:
        read = plan_delta_read(source.path, since, source.incremental, where(source))
        skipped = read.net.skipped if read.net else frozenset()
        nothing = bool(source.incremental) and read.instants is not None and not read.instants
        until = None
        if source.incremental:
            until = {"version": read.version}
            if nothing and isinstance(since, dict):
                until = since
        return SourcePlan(
            source,
            since=since,
            until=until,
            paths=tuple(read.paths),
            instants=tuple(read.instants) if read.instants is not None else None,
            deletion_vectors=read.deletion_vectors,
            changes=read.changes,
            nothing_new=nothing,
            details={
                "version": read.version,
                "files": len(read.paths),
                "files_skipped": read.files_total - len(read.paths),
                **({"change_feed": True} if read.changes is not None else {}),
                "bytes": read.bytes,
                **({"versions_skipped": sorted(skipped)} if skipped else {}),
            },
            undone=read.net.undone if read.net else None,
        )

    def read(self, spark: SparkSession, plan: SourcePlan) -> DataFrame:
        from runner.sources.spark_reads import read_delta

        return read_delta(spark, plan)

    def first_read(self, source: Source) -> str:
        return "read whole"

    def first_read_loses(self, source: Source) -> FirstReadLoss | None:
        incremental = source.incremental
        if not (incremental and incremental.deletes == "propagate"):
            return None
        return FirstReadLoss(
            f"a first read of {source.path} in full hands on none of the deletes made there "
            "since the table's rows came from it (those keys would stay for ever)",
            f"--ignore-checkpoint reads {source.path} in full into the table as it is (keys "
            "deleted there stay)",
        )

    def shown_checkpoint(self, text: str) -> str:
        return f"version {text}"

    def datasets(self, source: Source) -> list[Dataset]:
        return [path_dataset(source.path)]

    def table_read(self, source: Source) -> str | None:
        return source.path

    def input_schema(self, source: Source) -> InputSchema:
        declared = declared_schema(source)
        if declared is not None:
            return declared
        table = open_table(locate(source.path))
        if table is None:
            return InputSchema(None, f"{where(source)}: no Delta table at {source.path} yet")
        return InputSchema(
            table.arrow_schema(), f"the Delta log of {where(source)} (version {table.version})"
        )


KIND = Delta()
