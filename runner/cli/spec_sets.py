"""`runner validate` and `runner run` of a set of specs (a directory, or several specs to run):
what they print and their exit codes; runner/commands/spec_set_run.py does the work."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from runner.errors import InvalidSpecError
from runner.spec.secrets import scrub

if TYPE_CHECKING:
    from runner.commands.spec_set_run import SpecOutcome
    from runner.pipeline.spec_set import Found, SpecSet


def is_set(paths: Sequence[str]) -> bool:
    """Several specs, a directory of them, or a spec that routes topics to tables."""
    return len(paths) > 1 or any(Path(p).is_dir() for p in paths) or _routes(paths[0])


def _routes(path: str) -> bool:
    from runner.spec import check_spec_file
    from runner.spec.routing import is_routed

    spec, _ = check_spec_file(path, parse_transform=False)
    return spec is not None and is_routed(spec)


def _found(paths: Sequence[str]) -> Found:
    from runner.pipeline.spec_set import find_spec_files

    found = find_spec_files(paths)
    if not found.files:
        shown = ", ".join(paths)
        raise click.UsageError(f"no spec (a *.yaml or *.yml file with a target:) in {shown}")
    return found


def validate_set(paths: Sequence[str]) -> None:
    """Each spec's problems, then the set's; exit 2 when any."""
    from runner.pipeline.shared_spark import check_set

    found = _found(paths)
    specs, problems = check_set(found.files)
    for problem in problems:
        click.echo(scrub(str(problem)))
    bad = {p.file for p in problems}
    for file in found.files:
        if file not in bad:
            click.echo(f"{file}: ok")
    if found.not_specs:
        click.echo(f"{len(found.not_specs)} YAML file(s) without a target: left out")
    if problems:
        click.echo(f"{len(bad) or 1} of {len(found.files)} spec(s) invalid", err=True)
        sys.exit(2)
    assert specs is not None
    click.echo(f"run order: {', '.join(m.name for m in specs.members)}")


def run_set(
    paths: Sequence[str],
    pick: tuple[str, str, bool],
    how: tuple[bool, int],
    every: float | None,
) -> None:
    """Run the set (the specs `pick` selects, excludes, and whether with their upstreams;
    `how`: fail fast, how many at once), print each spec's summary as it ends and the
    set's table; exit 1 when any failed. With `every` (seconds), in rounds until stopped
    (runner run --continuous)."""
    from runner.commands.spec_set_run import SetRun, run_rounds, summary_table
    from runner.pipeline.shared_spark import check_set, shared_spark

    found = _found(paths)
    specs, problems = check_set(found.files, parse_transform=False)
    if specs is None:
        raise InvalidSpecError(problems)
    chosen = _picked(specs, pick)
    shared, problems = shared_spark(chosen.members)
    if shared is None:
        raise InvalidSpecError(problems)
    left_out = f"; {len(found.not_specs)} YAML file(s) without a target: left out"
    fail_fast, parallel = how
    at_once = "one after another" if parallel == 1 else f"up to {parallel} at once"
    click.echo(
        f"{len(chosen.members)} spec(s), {at_once}: "
        f"{', '.join(m.name for m in chosen.members)}{left_out if found.not_specs else ''}"
    )
    name = Path(paths[0]).resolve().name if len(paths) == 1 else chosen.members[0].name
    progress = sys.stderr.isatty() and parallel == 1  # one progress line at a time
    set_run = SetRun(chosen, shared, name, progress, fail_fast, parallel)
    if every is None:
        done = set_run.run(_show)
        for line in summary_table(done):
            click.echo(scrub(line))
        if any(o.result == "failed" for o in done):
            sys.exit(1)
        return

    def round_done(number: int, outcomes: list[SpecOutcome]) -> None:
        for line in summary_table(outcomes):
            click.echo(scrub(f"round {number}: {line}"))

    rounds = run_rounds(set_run, every, _show, round_done)
    click.echo(f"{name}: stopped after {rounds.count} round(s), {rounds.commits} commit(s)")
    if rounds.failed:
        sys.exit(1)


def _picked(specs: SpecSet, pick: tuple[str, str, bool]) -> SpecSet:
    select, exclude, with_upstream = pick
    try:
        chosen = specs.pick(_names(select), _names(exclude), with_upstream)
    except ValueError as unknown:
        raise click.BadParameter(str(unknown), param_hint="--select/--exclude") from None
    if not chosen.members:
        raise click.BadParameter("leave no spec to run", param_hint="--select/--exclude")
    return chosen


def _names(given: str) -> list[str]:
    return [n.strip() for n in given.split(",") if n.strip()]


def _show(outcome: SpecOutcome) -> None:
    if outcome.summary is not None:
        click.echo(scrub(outcome.summary.render()))
    elif outcome.result == "failed":
        debug = (click.get_current_context().find_root().obj or {}).get("debug")
        if debug and outcome.error is not None:
            click.echo(
                scrub("".join(traceback.format_exception(outcome.error))), err=True, nl=False
            )
        click.echo(scrub(f"{outcome.member.file}: failed: {outcome.reason}"), err=True)
    else:
        click.echo(f"{outcome.member.name}: skipped {outcome.reason}", err=True)
