"""A chained pipeline whose `delta` source was restored after the pipeline had read versions
the restore undid (runner/delta/restores.py `Undone`).

The restore's undo in the source's change data feed takes those versions out again where
the target applies rows as they come (merge_mode commit_time, overwrite_non_defaults, no
precombine_field, insert, delete): the run reads it as any other change. Where the target
orders rows, the undo's rows are older rows coming back and would read as late, so the
undone rows would stay: an upsert by a precombine_field (event_time, partial_update: the
stored row with the greater value wins; custom: the merger gets the rows in that order and
may keep the greater) or a change feed's events (target.cdc: an event older than its key's
newest is late). A source with `deletes: ignore` cannot see the undo at all, whatever the
target: it reads rows by their commit instants, and the rows a restore brings back keep
their old ones.

There the run is refused before anything is read, with the fix: restore the target to its
newest version whose checkpoint of the source is at or before the version both lineages
share (`Undone.common`, the restored version in the plain case). Its next run reads from
there and skips what the restore undid. Without such a version the table is rebuilt.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from runner.delta.restores import Undone
from runner.delta.snapshot import TableSnapshot
from runner.errors import UserError
from runner.sources.checkpoint import version_before_read
from runner.sources.model import SourcePlan
from runner.spec.model import PipelineSpec, Source, Target


def refuse_undone_reads(
    spec: PipelineSpec, snapshot: TableSnapshot | None, plans: Sequence[SourcePlan]
) -> None:
    """Raise UserError for the first source whose restore this pipeline cannot follow."""
    for plan in plans:
        if plan.undone is None:
            continue
        why = cannot_follow(spec.target, plan.source)
        if why is not None:
            raise UserError(_refusal(spec, snapshot, plan, plan.undone, why))


def cannot_follow(target: Target, source: Source) -> str | None:
    """Why the target cannot follow a restore of `source` by its undo; None if it can."""
    if source.incremental is not None and source.incremental.deletes == "ignore":
        return (
            "with `deletes: ignore` the source reads rows by their commit instants, and the "
            "rows the restore brought back keep their old ones"
        )
    if target.operation != "upsert":
        return None
    if target.cdc is not None:
        return f"target.cdc applies events in {target.cdc.sequence_by} order"
    field, mode = target.precombine_field, target.merge_mode
    if field is None or mode not in ("event_time", "partial_update", "custom"):
        return None
    keeps = "may keep" if mode == "custom" else "keeps"
    return f"merge_mode {mode} {keeps} a key's row with the greater {field}"


def _refusal(
    spec: PipelineSpec, snapshot: TableSnapshot | None, plan: SourcePlan, undone: Undone, why: str
) -> str:
    uri, path, name = plan.source.path, spec.target.path, plan.source.name
    versions = ", ".join(str(v) for v in undone.versions)
    found = version_before_read(snapshot, spec.name, name, undone.common) if snapshot else None
    if found is not None:
        version, read = found
        then = f"when it had read up to version {read}" if read is not None else "before it read it"
        fix = (
            f"restore this table first: `runner restore {shlex.quote(spec.file)} --to {version}` "
            f"(its version {version}, {then}); its next run then skips what the restore undid"
        )
    else:
        fix = (
            f"no version of {path} predates its read of version {undone.versions[0]}, so "
            f"rebuild it: remove {path} and run again (the first run reads {uri} in full; "
            "--ignore-checkpoint would read it over the rows the table holds, which keeps them)"
        )
    return (
        f"{plan.where}: {uri} was restored to version {undone.restored} in version "
        f"{undone.restore}, after pipeline {spec.name!r} had read it up to version "
        f"{undone.since}; the restore undid version(s) {versions}, and {why}, so their rows "
        f"would stay in {path}; nothing was read: {fix}"
    )
