"""How a table command runs its action: recorded in the pipeline's history, metrics and
lineage with the figures its result gives, then the table's catalog entry updated (a dry
run records nothing); the result printed as text or JSON."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import click

from runner.spec.secrets import scrub, scrub_values

T = TypeVar("T")

if TYPE_CHECKING:
    from runner.observe.record import Kind
    from runner.spec.model import PipelineSpec
    from runner.summary import ActionFigures


def observed(
    pipeline: PipelineSpec,
    kind: Kind,
    work: Callable[[], T],
    figures: Callable[[T], ActionFigures],
    dry_run: bool,
    started: dt.datetime | None = None,
) -> T:
    """A table action's work, recorded (history, metrics, lineage) with the figures its
    result gives, then the table's catalog entry updated, unless it is a dry run;
    `started`: the command's start, when its summary's time counts from there."""
    from runner.commands.action_registration import registration_line
    from runner.observe.observed import Observer

    if dry_run:
        return work()
    done = Observer(pipeline).service(kind, work, figures, started)
    line = registration_line(pipeline) if kind != "clean" else None  # clean keeps the schema
    if line:
        click.echo(line, err=True)
    return done


class Done(Protocol):
    """What a table action returns: its text, its JSON and its record's figures."""

    def render(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...

    def record(self) -> ActionFigures: ...


def act(
    spec: str, kind: Kind, action: Callable[[PipelineSpec], Done], dry_run: bool, as_json: bool
) -> None:
    """A table action's command: `action` on the spec's table, recorded with its result's
    figures unless it is a dry run; its result printed as text, or JSON with `as_json`."""
    from runner.commands.table_spec import spec_of

    pipeline = spec_of(spec)
    done = observed(pipeline, kind, lambda: action(pipeline), lambda d: d.record(), dry_run)
    click.echo(
        json.dumps(scrub_values(done.to_dict()), indent=2) if as_json else scrub(done.render())
    )
