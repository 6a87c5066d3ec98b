"""`runner validate SPEC --against TABLE`: what the spec's input would change in a table's
schema, told without Spark.

The input's schema is known without a JVM when every source's kind tells it
(runner/sources/kinds/: a declared schema in Spark DDL, a parquet source's footers, a Delta
table's log), and transform.sql,
if any, gives types Spark has no choice about (runner/spec/transform_schema.py). The
comparison is the run's own (runner/delta/schema.py
plan_schema, under target.schema_evolution and target.on_schema_mismatch); a spec whose
input schema only Spark knows (a transform's result, a JSON or CSV source's inferred
schema, JDBC, Kafka, a column a function computes) is named as such, with the command that
shows its changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pyarrow as pa

from runner.delta.directory import check_new_table_location
from runner.delta.schema import SchemaPlan, plan_schema
from runner.delta.schema_evolution import SchemaChange
from runner.delta.schema_rewrite import SchemaRewrite, pending_renames_and_drops, plan_for_target
from runner.delta.snapshot import TableSnapshot, open_table
from runner.errors import SchemaChangeError, UserError
from runner.sources.kinds import kind_of
from runner.sources.model import InputSchema
from runner.spec.model import PipelineSpec
from runner.spec.transform_schema import transform_schema
from runner.storage.location import is_local, locate
from runner.storage.meta_columns import CHANGE_TYPE, META_COLUMNS


@dataclass(frozen=True)
class TableCheck:
    """The checks a run makes of its table before it reads anything (the stored settings,
    or the directory a new table would go to), and a warning about the table compared."""

    refusal: str | None = None  # the run's own refusal, one or more lines
    warning: str | None = None

    def refused_lines(self) -> list[str]:
        if not self.refusal:
            return []
        first, *more = self.refusal.splitlines()
        return [f"  refused: {first}", *(f"  {line}" for line in more)]


@dataclass(frozen=True)
class Comparison:
    table: str
    version: int | None  # None: no table there yet
    origin: str
    plan: SchemaPlan | None = None  # None: refused, or not compared
    refusal: str | None = None
    compared: bool = True
    rewrite: SchemaRewrite = field(default_factory=SchemaRewrite)  # target.rename and drop
    settings: TableCheck = field(default_factory=lambda: TableCheck())

    @property
    def exit_code(self) -> int:
        """0: the input fits; 1: not compared (only Spark knows the input's schema);
        2: a run would be refused."""
        if self.settings.refusal:
            return 2
        return 1 if not self.compared else 2 if self.refusal else 0

    def lines(self, spec: PipelineSpec) -> list[str]:
        """The warning and the refused settings, if any, then the schema's comparison."""
        lines = self._schema_lines(spec)
        refused = self.settings.refused_lines()
        if refused:  # after the head line, or first where the schema is not compared
            lines = lines[:1] + refused + lines[1:] if self.compared else refused + lines
        warning = self.settings.warning
        return [f"warning: {warning}", *lines] if warning else lines

    def _schema_lines(self, spec: PipelineSpec) -> list[str]:
        target = spec.target
        if not self.compared:
            return [
                f"not compared with {self.table}: {self.origin}; `runner run {spec.file} "
                "--dry-run` reads the input and lists the schema changes a run would make"
            ]
        where = "no table yet" if self.version is None else f"version {self.version}"
        head = (
            f"against {self.table} ({where}; input schema from {self.origin}; "
            f"target.schema_evolution: {target.schema_evolution})"
        )
        if self.refusal:
            return [head, f"  refused: {self.refusal}"]
        assert self.plan is not None
        if self.version is None:
            return [head, f"  a first run creates it with {len(self.plan.data_columns)} column(s)"]
        rewritten = [f"  rewrites the table's files: {c}" for c in self.rewrite.describe()]
        rewritten += [
            f"  rewrites the table's files: {c.describe()} (schema_evolution full)"
            for c in self.plan.changes
            if c.kind == "widen" and target.schema_evolution == "full"
        ]
        changes = [
            f"  {_change_line(c)}"
            for c in self.plan.changes
            if c.kind != "widen" or target.schema_evolution != "full"
        ]
        casts = [
            f"  casts {c.column} value by value: {c.from_type} -> {c.to_type} (a value that "
            f"does not fit: target.on_schema_mismatch {target.on_schema_mismatch})"
            for c in self.plan.casts
        ]
        listed = rewritten + changes + casts
        return [head, *(listed or ["  no change: the input has the table's schema"])]


def _change_line(change: SchemaChange) -> str:
    if change.kind == "widen":
        return f"widens {change.describe()}"
    what = "column" if change.kind == "add_column" else "field"
    return f"adds {what} {change.path} ({change.to_type})"


def compare_with_table(spec: PipelineSpec, table_uri: str) -> Comparison:
    """The schema changes a run of `spec` would make to the table at `table_uri`."""
    if is_local(table_uri):
        table_uri = os.path.abspath(table_uri)
    snapshot = open_table(locate(table_uri))
    settings = check_table(spec, table_uri, snapshot)
    found = input_schema(spec)
    if found.schema is None:
        return Comparison(table_uri, None, found.origin, compared=False, settings=settings)
    version = snapshot.version if snapshot is not None else None
    target = spec.target
    try:
        rewrite = SchemaRewrite()
        if snapshot is not None and target.schema_evolution == "full":
            rewrite = pending_renames_and_drops(snapshot, target)
        # the batch meets the table as the run's rename and drop rewrite leaves it
        stored = rewrite.apply(snapshot.arrow_schema()) if snapshot is not None else None
        if target.operation == "delete":
            plan = plan_schema(stored, stored, table_uri) if stored is not None else None
            return Comparison(
                table_uri, version, found.origin, plan, rewrite=rewrite, settings=settings
            )
        plan = plan_for_target(found.schema, stored, target, table_uri)
    except (SchemaChangeError, UserError) as refused:
        refusal = str(refused)
        return Comparison(table_uri, version, found.origin, refusal=refusal, settings=settings)
    return Comparison(table_uri, version, found.origin, plan, rewrite=rewrite, settings=settings)


def check_table(spec: PipelineSpec, table_uri: str, snapshot: TableSnapshot | None) -> TableCheck:
    """What a run's preflight (runner/pipeline/preflight.py) would refuse of the table at
    `table_uri` before reading anything: settings that differ from the table's stored ones
    (runner/delta/table_config.py), or a new table's directory holding other files; and a
    warning when there is no table there while the spec's own target holds one."""
    try:
        if snapshot is not None:
            # the key generator's settings come from its class, which imports pyspark (no JVM)
            from runner.delta.table_config import check_table_settings

            check_table_settings(spec.file, spec.target, snapshot, table_uri)
            return TableCheck()
        check_new_table_location(locate(table_uri), "the table")
    except UserError as refused:
        return TableCheck(refusal=str(refused))
    own = spec.target.path
    # an object store only where TABLE is on one too: a local TABLE asks no credentials
    if own.rstrip("/") != table_uri.rstrip("/") and (is_local(own) or not is_local(table_uri)):
        theirs = open_table(locate(own))
        if theirs is not None:
            return TableCheck(
                warning=f"no table at {table_uri}, while the spec's target {own} holds one "
                f"(version {theirs.version}); `--against` without TABLE compares with it"
            )
    return TableCheck()


def input_schema(spec: PipelineSpec) -> InputSchema:
    """The batch's stored columns as the plan stage would see them, or why only Spark
    knows them."""
    found = _batch_schema(spec)
    if found.schema is None:
        return found
    columns = [f for f in found.schema if f.name not in (*META_COLUMNS, CHANGE_TYPE)]
    target = spec.target
    dropped = {target.delete_marker, target.cdc.operation_column if target.cdc else None}
    columns = [f for f in columns if f.name not in dropped]
    if target.keeps_history:
        assert target.cdc is not None
        if target.cdc.sequence_by not in found.schema.names:
            return InputSchema(
                None, f"the input has no column {target.cdc.sequence_by} (cdc.sequence_by)"
            )
        sequence = found.schema.field(target.cdc.sequence_by).type
        scd = target.scd
        columns += [
            pa.field(scd.start_column, sequence),
            pa.field(scd.end_column, sequence),
            pa.field(scd.current_column, pa.bool_()),
        ]
    return InputSchema(pa.schema(columns), found.origin)


def _batch_schema(spec: PipelineSpec) -> InputSchema:
    """The batch's columns: its one source's, or transform.sql's result over the sources."""
    sources = [kind_of(source).input_schema(source) for source in spec.sources]
    unknown = next((s for s in sources if s.schema is None), None)
    if unknown is not None:
        return unknown
    if not spec.transform_sql:
        return sources[0]
    tables = {src.name: s.schema for src, s in zip(spec.sources, sources, strict=True) if s.schema}
    result = transform_schema(spec.transform_sql, tables)
    if isinstance(result, str):
        return InputSchema(None, result)
    origins = "; ".join(s.origin for s in sources)
    return InputSchema(result, f"transform.sql over {origins}")
