"""The first stage of a run: checks that cost nothing to the table and start no JVM."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from runner.actions.expand import check_automatic_expansion
from runner.delta.directory import check_new_table_location
from runner.delta.log_entry import check_log_writable
from runner.delta.snapshot import TableSnapshot, open_table
from runner.delta.table_config import check_table_settings
from runner.delta.transaction import batch_committed
from runner.pipeline.context import RunContext
from runner.storage.location import locate
from runner.write.field_merge import load_merger

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Preflight:
    snapshot: TableSnapshot | None  # None: the run creates the table
    already_committed: bool  # the batch id is committed: nothing to do


def preflight(ctx: RunContext) -> Preflight:
    """The settings, the user's merger class, the log's storage, the table's stored settings
    and the batch id, checked before anything is read or written."""
    target = ctx.target
    check_automatic_expansion(target)
    if target.merger:  # the user's class imports and builds, before Spark starts
        load_merger(target.merger)
    if target.table_type == "MERGE_ON_READ":
        check_log_writable(ctx.table, "a MERGE_ON_READ table")
    snapshot = open_table(ctx.table)
    quarantine = target.quarantine
    if quarantine and open_table(quarantine.path) is None:
        check_new_table_location(locate(quarantine.path), "target.quarantine.path")
    if snapshot is None:
        check_new_table_location(ctx.table, "target.path")
        return Preflight(None, already_committed=False)
    check_table_settings(ctx.spec.file, target, snapshot)
    app_id = ctx.app_id
    if app_id and batch_committed(snapshot.table, app_id):
        log.info("batch_already_committed", batch_id=ctx.options.batch_id)
        return Preflight(snapshot, already_committed=True)
    return Preflight(snapshot, already_committed=False)
