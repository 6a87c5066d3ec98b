"""The commands on a table: expand and plan (its bucket layout), clean, compact, restore,
read, inspect. The table actions (runner/actions) do the work; these parse and print."""

from __future__ import annotations

import inspect as docstrings
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import click

from runner.cli.options import options_as
from runner.cli.recorded_action import Done, act, observed
from runner.spec.secrets import scrub, scrub_values

if TYPE_CHECKING:
    from runner.actions.expand import ExpandSummary
    from runner.actions.expansion_plan import ExpansionPlan
    from runner.spec.model import PipelineSpec
    from runner.summary import ActionFigures

_POLICY = click.Choice(["multiple_rehash", "overwrite", "split"])


def _on_spec_or_table(command: click.Command) -> click.Command:
    """Its --help says what its SPEC|TABLE argument takes (runner/commands/table_spec.py)."""
    either = (
        "SPEC|TABLE: the pipeline's spec, or its table (a path or URI): then the table's "
        "stored settings, and the defaults for what only a spec says (target.cleaning, "
        "compaction, index.expansion, spark, history)."
    )
    command.help = f"{docstrings.cleandoc(command.help or '')}\n\n{either}"
    return command


@dataclass(frozen=True, kw_only=True)
class ExpandOptions:
    """`runner expand`'s and `runner plan`'s argument and options."""

    spec: str
    buckets: int | None
    policy: str | None
    partitions: tuple[str, ...]
    split: tuple[str, ...]
    as_json: bool
    dry_run: bool = True  # `runner plan` only plans


def _expansion_options(command: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(
        [
            click.option(
                "--buckets",
                type=click.IntRange(min=1),
                help="The new bucket count (default: index.expansion.factor times the current).",
            ),
            click.option(
                "--policy",
                type=_POLICY,
                help="multiple_rehash: N to k*N, no reshuffle; overwrite: any count, full "
                "reshuffle; split: each bucket past index.expansion.max_bucket_bytes splits "
                "alone (default: the spec's index.expansion.policy).",
            ),
            click.option(
                "--partition",
                "partitions",
                multiple=True,
                metavar="PATH",
                help="Grow only this partition (repeatable), e.g. city=paris; it keeps its "
                "own count from then on.",
            ),
            click.option(
                "--bucket",
                "split",
                multiple=True,
                metavar="PARTITION/BUCKET",
                help="Split only this bucket into two (repeatable), e.g. city=paris/3; a "
                "bucket of a table without partitions is its id alone, e.g. 3.",
            ),
            click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text."),
        ]
    ):
        command = option(command)
    return command


@_on_spec_or_table
@click.command()
@click.argument("spec", type=click.Path(), metavar="SPEC|TABLE")
@_expansion_options
@click.option("--dry-run", is_flag=True, help="Print the plan only (same as `runner plan`).")
@options_as(ExpandOptions)
def expand(options: ExpandOptions) -> None:
    """Grow the bucket count of a spec's table, in one atomic commit.

    \b
      runner expand SPEC.yaml --buckets 32                       16 -> 32, no reshuffle
      runner expand SPEC.yaml --buckets 24 --policy overwrite    any count, reshuffled
      runner expand SPEC.yaml --partition city=paris             one hot partition, x factor
      runner expand SPEC.yaml --bucket city=paris/3              one hot bucket, into 3 and 3+N

    Readers see the old layout or the new one, never a mix; rows, keys and values are
    unchanged. A failure before the commit leaves the table as it was.
    """
    _expand(options)


@_on_spec_or_table
@click.command()
@click.argument("spec", type=click.Path(), metavar="SPEC|TABLE")
@_expansion_options
@options_as(ExpandOptions)
def plan(options: ExpandOptions) -> None:
    """Print what `runner expand` would do: partitions, buckets, files and bytes.

    Reads only the Delta log: starts no JVM and changes nothing.
    """
    _expand(options)


def _expand(options: ExpandOptions) -> None:
    from runner.actions.expand import ExpansionRequest, expand_table
    from runner.commands.table_spec import spec_of
    from runner.observe.record import now

    request = ExpansionRequest(
        options.buckets, options.policy, options.partitions, options.dry_run, options.split
    )
    pipeline = spec_of(options.spec)
    # the command's start: the summary's time and the history's record both count from it
    started, started_at = time.perf_counter(), now()

    def work() -> tuple[ExpansionPlan, ExpandSummary | None]:
        return expand_table(
            pipeline, request, console_progress=sys.stderr.isatty(), started=started
        )

    planned, done = observed(pipeline, "expansion", work, _expanded, options.dry_run, started_at)
    if options.as_json:
        out = {"plan": planned.to_dict(), "result": done.to_dict() if done else None}
        click.echo(json.dumps(scrub_values(out), indent=2))
        return
    click.echo(scrub(planned.render()))
    click.echo("dry run: nothing was changed" if done is None else scrub(done.render()))


def _expanded(result: tuple[ExpansionPlan, ExpandSummary | None]) -> ActionFigures:
    from runner.summary import ActionFigures

    done = result[1]
    return done.record() if done is not None else ActionFigures("nothing_to_do")


@_on_spec_or_table
@click.command()
@click.argument("spec", type=click.Path(), metavar="SPEC|TABLE")
@click.option(
    "--retain-commits",
    type=click.IntRange(min=1),
    help="Keep every file of this many latest versions (default: target.cleaning).",
)
@click.option(
    "--min-age-hours",
    type=click.IntRange(min=0),
    help="Never remove files younger than this (a writer in flight keeps its files anyway).",
)
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def clean(
    spec: str,
    retain_commits: int | None,
    min_age_hours: int | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Remove the runner's data files that no reader of the latest versions needs.

    Removes files the runner wrote that were replaced before the last --retain-commits
    versions, and files no version ever committed (left by a killed run). The files of a
    run, expansion or compaction still in flight (its heartbeat is fresh) are kept, however
    old. Files the runner did not write, and symbolic links, are listed and left alone.
    Starts no JVM.
    """
    from runner.actions.clean import clean_table

    act(
        spec,
        "clean",
        lambda p: clean_table(p, retain_commits, min_age_hours, dry_run),
        dry_run,
        as_json,
    )


@_on_spec_or_table
@click.command()
@click.argument("spec", type=click.Path(), metavar="SPEC|TABLE")
@click.option(
    "--partition",
    "partitions",
    multiple=True,
    metavar="PARTITION_PATH",
    help="Only this partition (repeatable), e.g. city=paris.",
)
@click.option("--dry-run", is_flag=True, help="Print what would be folded; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def compact(spec: str, partitions: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Fold each bucket's files and deletion vectors into one file (MERGE_ON_READ tables).

    \b
      runner compact SPEC.yaml                        every bucket with delta files or deletes
      runner compact SPEC.yaml --partition city=ams   one partition
      runner compact SPEC.yaml --dry-run              what it would fold (no JVM)

    Each folded bucket becomes one file sorted by key, in one commit that changes no row.
    A bucket a writer changes meanwhile is left for the next compaction, never half done.
    """
    from runner.actions.compact import compact_table

    def work(pipeline: PipelineSpec) -> Done:
        return compact_table(pipeline, partitions, dry_run, console_progress=sys.stderr.isatty())

    act(spec, "compaction", work, dry_run, as_json)


@_on_spec_or_table
@click.command()
@click.argument("spec", type=click.Path(), metavar="SPEC|TABLE")
@click.option(
    "--to",
    "to",
    required=True,
    metavar="VERSION|INSTANT",
    help="The version to bring back: its number, or an instant (yyyyMMddHHmmssSSS, UTC): "
    "the newest commit at or before it, as `runner read --as-of` takes it.",
)
@click.option("--dry-run", is_flag=True, help="Print what it would remove and add; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def restore(spec: str, to: str, dry_run: bool, as_json: bool) -> None:
    """Set a spec's table back to an older version, in one new version (a bad batch got in).

    \b
      runner history SPEC.yaml                          the commits, with their versions
      runner restore SPEC.yaml --to 7 --dry-run         what would go and come back
      runner restore SPEC.yaml --to 20261122093000000   the newest commit at or before it

    The new version's rows are the table's as of that version, with its bucket layout and
    its columns; every pipeline's source checkpoints go back too, so the next run reads
    again what came after, and batches committed since can run again with their
    --batch-id. On a table with a change data feed the undo is in the feed, so chained
    tables follow it. Refused when `runner clean` or log cleanup removed what that version
    needs (the error names the versions that can be restored). If another writer commits
    meanwhile, one of the two fails and says to run again. Starts no JVM.
    """
    from runner.actions.restore import restore_table

    act(spec, "restore", lambda p: restore_table(p, to, dry_run), dry_run, as_json)


@dataclass(frozen=True, kw_only=True)
class ReadOptions:
    """`runner read`'s argument and options."""

    table: str
    since: str | None
    until: str | None
    as_of: str | None
    as_of_business_time: str | None
    fmt: str
    out: str | None
    keys: tuple[str, ...]
    keys_from: str | None

    @property
    def by_key(self) -> bool:
        return bool(self.keys) or self.keys_from is not None


@click.command()
@click.argument("table", metavar="TABLE|SPEC")
@click.option(
    "--since",
    metavar="WHEN",
    help="Only the changes (or rows) of the commits after this instant, or this moment: "
    "30m, 24h, 7d ago, or a UTC date or time.",
)
@click.option(
    "--until",
    metavar="WHEN",
    help="Only the changes (or rows) of the commits at or before this instant (or moment).",
)
@click.option(
    "--as-of",
    metavar="VERSION|INSTANT",
    help="Read the table as it was at this version, or at the newest commit up to an instant.",
)
@click.option(
    "--as-of-business-time",
    metavar="VALUE",
    help="SCD type 2 tables: the versions valid at this value of the change feed's "
    "sequence column (valid_from <= VALUE < valid_to).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "csv", "parquet"]),
    default="json",
    show_default=True,
    help="json: one object per line. parquet needs --out.",
)
@click.option("--out", type=click.Path(dir_okay=False, writable=True), help="Write to this file.")
@click.option(
    "--key",
    "keys",
    multiple=True,
    metavar="RECORD_KEY",
    help="Only the live rows of this _record_key (repeatable), from the files that can hold it.",
)
@click.option(
    "--keys-from",
    type=click.Path(dir_okay=False, allow_dash=True),
    metavar="FILE",
    help="Keys to look up, one per line (- reads them from stdin).",
)
@options_as(ReadOptions)
def read(options: ReadOptions) -> None:
    """Read a runner table's rows: all, its changes since an instant, as of a point in time,
    or those of a few record keys.

    \b
      runner read warehouse/trips --since 20261122093000000
      runner read warehouse/trips --as-of 3 --format parquet --out v3.parquet
      runner read warehouse/customers --as-of-business-time 2026-06-30T00:00:00
      runner read warehouse/trips --key t-17 --key t-18

    --key opens, in each partition, only the files of the key's bucket whose key range
    holds it; keys not found are listed on stderr (the exit code stays 0).

    --since/--until on a table with a change data feed (target.change_data_feed: true)
    return the changes of the commits in (SINCE, UNTIL]: inserted rows, updated rows before
    and after, deleted rows, with _change_type, _commit_version and _commit_timestamp, as
    delta-spark's readChangeFeed does. On a table without one they return the rows whose
    _commit_time is in (SINCE, UNTIL] in their current state, like Hudi's incremental query:
    deletes are missing (a note on stderr says so). Instants are yyyyMMddHHmmssSSS (UTC), as
    in _commit_time and in every run summary; a moment is also a time ago (30m, 24h, 7d) or
    a UTC date or time (2026-11-25, 2026-11-25T10:00), as `runner history --since` takes
    it. Starts no JVM; the row count goes to stderr. TABLE|SPEC: the table, or a spec (its
    target table).
    """
    from runner.commands.read import read_rows, write_rows
    from runner.commands.table_spec import table_of

    if options.fmt == "parquet" and not options.out:
        raise click.UsageError("--format parquet writes a file: give --out PATH")
    options = replace(options, table=table_of(options.table))
    if options.by_key:
        _read_keys(options)
        return
    result = read_rows(
        options.table,
        since=options.since,
        until=options.until,
        as_of=options.as_of,
        as_of_business_time=options.as_of_business_time,
    )
    write_rows(result.rows, options.fmt, options.out)
    click.echo(result.describe(options.table), err=True)
    if result.note:
        click.echo(result.note, err=True)


def _read_keys(options: ReadOptions) -> None:
    """`runner read --key`: the rows of the keys given, and what was found on stderr."""
    from runner.commands.key_lookup import lookup_keys
    from runner.commands.read import write_rows

    given = {"--since": options.since, "--until": options.until}
    given["--as-of-business-time"] = options.as_of_business_time
    clash = [name for name, value in given.items() if value is not None]
    if clash:
        raise click.UsageError(f"--key reads the current rows (or --as-of's): drop {clash[0]}")
    keys = list(options.keys)
    if options.keys_from is not None:
        with click.open_file(options.keys_from, encoding="utf-8") as lines:
            keys += [line.rstrip("\r\n") for line in lines if line.rstrip("\r\n")]
    found = lookup_keys(options.table, keys, as_of=options.as_of)
    write_rows(found.rows, options.fmt, options.out)
    click.echo(found.describe(options.table), err=True)


@click.command()
@click.argument("table", type=click.Path(), metavar="TABLE|SPEC")
@click.option("--json", "as_json", is_flag=True, help="Print the full report as JSON.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, writable=True),
    help="Also draw bucket sizes per partition into this PNG file (needs matplotlib).",
)
def inspect(table: str, as_json: bool, plot: str | None) -> None:
    """Rows, bytes and skew per partition and bucket of a runner table.

    Reads only the Delta log's statistics: no data file, no JVM. Skew is the largest
    bucket over the mean bucket of its partition; 1.0 is an even spread. TABLE|SPEC: the
    table, or a spec (its target table).
    """
    from runner.commands.inspect import inspect_table, plot_report, render_report
    from runner.commands.table_spec import table_of

    report = inspect_table(table_of(table))
    click.echo(json.dumps(report, indent=2) if as_json else render_report(report))
    if plot:
        plot_report(report, plot)
        click.echo(f"plot written to {plot}", err=True)


@click.command()
@click.argument("target")
@click.option("-n", "--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--failed", is_flag=True, help="Only the failed and interrupted ones.")
@click.option(
    "--since", metavar="WHEN", help="Only those started since: 30m, 24h, 7d, or a UTC date/time."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per record instead.")
def history(target: str, limit: int, failed: bool, since: str | None, as_json: bool) -> None:
    """The last runs, expansions, compactions, cleans and restores of a pipeline's table.

    \b
      runner history pipelines/trips.yaml
      runner history warehouse/trips --failed --since 7d
      runner history warehouse/_runner_history/trips --json -n 100

    TARGET is a spec, its target table, or the history table itself. Every run leaves one
    record: committed, nothing new, nothing to do, already committed, failed (with its
    error), or interrupted (killed; found by the next run). The history is a Delta table:
    docs/operating.md shows how to query it with Spark, Polars or delta-rs. Starts no JVM.
    """
    from runner.commands.history import history_records, render, select, since_moment
    from runner.observe.record import now

    moment = since_moment(since, now()) if since else None
    path, records = history_records(target)
    chosen = select(records, limit, failed, moment)
    if as_json:
        for record in chosen:
            click.echo(json.dumps(scrub_values(record), default=str))
        return
    click.echo(scrub(render(path, chosen, len(records))))


COMMANDS = (expand, plan, clean, compact, restore, read, inspect, history)
