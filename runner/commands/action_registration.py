"""The catalog entry of a table a table action changed: after `runner expand`, `compact` or
`restore` committed, the spec's `target.catalog` entry is brought up to date from the
table's new version, as after a run (a restore can give the table back an older schema).
A catalog that does not answer never fails or undoes the action: it warns, and the next
run or `runner sync` registers (docs/catalogs.md)."""

from __future__ import annotations

from runner.catalog import register_or_warn
from runner.spec.model import PipelineSpec
from runner.spec.secrets import scrub


def registration_line(pipeline: PipelineSpec) -> str | None:
    """What the registration did, one line for stderr; None without target.catalog."""
    if pipeline.target.catalog is None:
        return None
    done = register_or_warn(pipeline.target)
    if done.error:
        return scrub(
            f"warning: catalog {done.catalog.type} {done.catalog.name} not registered: "
            f"{done.error}; the next run or `runner sync` registers it"
        )
    return scrub(f"catalog: {done.render()}")
