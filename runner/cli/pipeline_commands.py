"""The commands on a pipeline spec: validate, run (once or continuously), keys, schema,
import-hudi, sync."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from runner.cli.options import options_as
from runner.spec.secrets import scrub, scrub_values

if TYPE_CHECKING:
    from runner.observe.observed import Observer
    from runner.pipeline.context import RunOptions
    from runner.spec.model import PipelineSpec


@click.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path())
@click.option(
    "--set",
    "as_set",
    is_flag=True,
    help="Check the specs as one set, as `runner run` of several specs runs them (a "
    "directory always is one).",
)
@click.option(
    "--against",
    metavar="[TABLE]",
    is_flag=False,
    flag_value="",
    help="Also compare the spec with this table (a path or s3:// URI; without TABLE, the "
    "spec's own target): the settings a run would refuse, the columns it would add or "
    "widen.",
)
def validate(specs: tuple[str, ...], as_set: bool, against: str | None) -> None:
    """Check specs without starting Spark.

    Checks each spec against the JSON Schema and the semantic rules, and, where its
    sources' columns are known without a JVM (a declared schema, a local Delta or parquet
    source), the columns transform.sql and the expectations read, a string ordering
    column, a chained Delta source's change data feed; starts no JVM. Prints one line per
    problem, FILE:LINE:COL: field.path: message, and exits 2 when any spec is invalid.

    \b
    A directory (its *.yaml and *.yml files with a target:), or several specs with
    --set, is checked as the set `runner run` would run: besides each spec, two specs
    of one name or one target, specs that read each other's tables in a circle, and
    Spark settings the specs could not share are refused; the run order is printed.

    \b
    With --against [TABLE] (one spec; without TABLE, its target.path): the settings a run
    would refuse (table type, key generator, record key, partition fields, buckets, change
    feed) and the schema changes it would make to TABLE under target.schema_evolution,
    read from the spec's declared source schema, its parquet files or its Delta source;
    exits 2 when a run would be refused, 1 when the input's schema is known only to Spark
    (a transform, JSON or CSV inference).
    """
    from runner.cli.spec_sets import is_set, validate_set
    from runner.commands.spec_facts import fact_problems
    from runner.spec.loader import read_spec_file

    if against is not None and (len(specs) != 1 or is_set(specs)):
        raise click.UsageError("--against compares one spec with one table; give one spec")
    if as_set or any(Path(p).is_dir() for p in specs):
        validate_set(specs)
        return
    bad = 0
    for path in specs:
        read = read_spec_file(path)
        problems = sorted(
            [*read.problems, *fact_problems(read, path)], key=lambda p: (p.line, p.column)
        )
        for problem in problems:
            click.echo(scrub(str(problem)))
        if problems:
            bad += 1
        else:
            click.echo(f"{path}: ok")
    if bad:
        click.echo(f"{bad} of {len(specs)} spec(s) invalid", err=True)
        sys.exit(2)
    if against is not None:
        _compare(read.spec, against)


def _compare(spec: PipelineSpec | None, table: str) -> None:
    from runner.commands.schema_against import compare_with_table

    assert spec is not None, "a valid spec file loads"
    comparison = compare_with_table(spec, table or spec.target.path)
    for line in comparison.lines(spec):
        click.echo(scrub(line))
    if comparison.exit_code:
        sys.exit(comparison.exit_code)


@dataclass(frozen=True, kw_only=True)
class RunCommand:
    """`runner run`'s argument and options."""

    specs: tuple[str, ...]
    summary_json: str | None
    batch_id: str | None
    checkpoints: tuple[str, ...]
    ignore_checkpoint: bool
    continuous: bool
    min_interval: str
    dry_run: bool
    select: str | None
    exclude: str | None
    with_upstream: bool
    fail_fast: bool
    parallel: int


@click.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path(), metavar="SPEC...")
@click.option(
    "--summary-json",
    type=click.Path(dir_okay=False, writable=True),
    help="Also write the run summary to this file as JSON.",
)
@click.option(
    "--batch-id",
    help="Identity of this batch: a batch already committed to the table is not run again.",
)
@click.option(
    "--checkpoint",
    "checkpoints",
    multiple=True,
    metavar="[SOURCE=]VALUE",
    help="Start an incremental source from VALUE instead of the table's checkpoint: a time "
    "for new_files (files modified after it), a version for {since: last}, a value of the "
    "column for JDBC. Recorded in the commit.",
)
@click.option(
    "--ignore-checkpoint",
    is_flag=True,
    help="Read every incremental source from the beginning (recorded in the commit).",
)
@click.option(
    "--continuous",
    is_flag=True,
    help="Run round after round until stopped; a round with new data commits, one without "
    "does nothing. SIGTERM lets the round in flight commit; Ctrl-C stops it at once.",
)
@click.option(
    "--min-interval",
    default="60s",
    show_default=True,
    metavar="DURATION",
    help="With --continuous: the least time from one round's start to the next (30s, 5m, 1h).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Read, key, judge and merge as a run would, print the summary it would have "
    "committed; write nothing under the table and move no checkpoint.",
)
@click.option(
    "--select",
    metavar="NAME,...",
    help="Of a set: run only these specs (a spec's name: or its file's name without .yaml).",
)
@click.option("--exclude", metavar="NAME,...", help="Of a set: do not run these specs.")
@click.option(
    "--with-upstream",
    is_flag=True,
    help="With --select: also run the specs whose tables the selected ones read.",
)
@click.option(
    "--fail-fast",
    is_flag=True,
    help="Of a set: after a spec fails, skip the ones not run yet.",
)
@click.option(
    "--parallel",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="Of a set: run up to N specs at once (those whose upstreams are done), each in a "
    "Spark FAIR scheduler pool of its own.",
)
@options_as(RunCommand)
def run(options: RunCommand) -> None:
    """Run a pipeline spec: read, transform, key, write, commit.

    Reads the sources (only what is new, for incremental ones), runs the transform, builds
    record keys and buckets, rewrites only the buckets the batch touches, and commits one
    Delta version with the sources' checkpoints. Relative paths in the spec are relative to
    the spec file. The summary goes to stdout, logs to stderr.

    \b
    Exit codes: 0 done; 2 a problem to fix in the spec, the input or the table settings
    (nothing was written); 1 a failure (the table is as it was before the run).

    \b
    A directory (its *.yaml and *.yml files with a target:) or several specs run as a
    set, in one Spark application, one spec after another (--parallel N: up to N at
    once): a spec with a delta source reading another's target runs after it, others in
    order of name. A spec whose target.path names {topic}, or {schema} and {table}, is a
    set of one table per topic of its kafka source; a spec reading one of those tables runs
    after it. Each runs as it would alone (its own commit, checkpoints, history, metrics,
    lineage) on a Spark session of its own. A failed spec does not stop the others
    (unless --fail-fast); those reading its table are skipped. A table of every spec's
    outcome ends the output; exit 1 when any failed, 2 when the set is invalid (see
    `runner validate`).
    The specs must agree on spark.master and every spark.conf setting but spark.sql.*
    runtime ones, which each spec's session gets on its own; a set that does not is
    refused with the settings named: run those specs apart. --summary-json, --batch-id,
    --checkpoint, --ignore-checkpoint and --dry-run are for one spec. With --continuous
    the set runs in rounds in its one application until SIGTERM; a spec that fails fails
    its round only, and the first spec's metrics.port serves every spec's metrics.
    """
    from runner.commands.summary_file import write_summary
    from runner.observe.observed import Observer
    from runner.pipeline.context import RunOptions
    from runner.spec import load_spec

    if _as_set(options):
        return
    if options.checkpoints and options.ignore_checkpoint:
        raise click.UsageError("give --checkpoint or --ignore-checkpoint, not both")
    if options.dry_run and options.continuous:
        raise click.UsageError("--dry-run shows one run; it does not go with --continuous")
    # the transform is read by Spark's parser in the run
    pipeline = load_spec(options.specs[0], parse_transform=False)
    chosen = RunOptions(
        console_progress=sys.stderr.isatty(),
        batch_id=options.batch_id,
        checkpoint=options.checkpoints,
        ignore_checkpoint=options.ignore_checkpoint,
        dry_run=options.dry_run,
    )
    observer = Observer(pipeline)
    if options.continuous:
        _run_continuously(observer, chosen, options)
        return
    summary = observer.run(options=chosen)
    click.echo(scrub(summary.render()))
    if options.summary_json:
        write_summary(options.summary_json, summary)


def _as_set(options: RunCommand) -> bool:
    """Run the set when the command names one (True); refuse the options of a set for one
    spec and those of one spec for a set."""
    from runner.cli.spec_sets import is_set, run_set

    set_options = {
        "--select": options.select,
        "--exclude": options.exclude,
        "--with-upstream": options.with_upstream,
        "--fail-fast": options.fail_fast,
        "--parallel": options.parallel > 1,
    }
    if not is_set(options.specs):
        if any(set_options.values()):
            named = ", ".join(k for k, v in set_options.items() if v)
            raise click.UsageError(f"{named} choose among a set: give a directory or specs")
        return False
    one_spec = {
        "--summary-json": options.summary_json,
        "--batch-id": options.batch_id,
        "--checkpoint": options.checkpoints,
        "--ignore-checkpoint": options.ignore_checkpoint,
        "--dry-run": options.dry_run,
    }
    given = [k for k, v in one_spec.items() if v]
    if given:
        raise click.UsageError(f"{', '.join(given)} go with one spec, not a set: give one SPEC")
    if options.with_upstream and not options.select:
        raise click.UsageError("--with-upstream adds to the specs --select names: give --select")
    run_set(
        options.specs,
        (options.select or "", options.exclude or "", options.with_upstream),
        (options.fail_fast, options.parallel),
        _duration(options.min_interval) if options.continuous else None,
    )
    return True


def _run_continuously(observer: Observer, chosen: RunOptions, options: RunCommand) -> None:
    from runner.commands.continuous import run_continuously
    from runner.commands.summary_file import RoundSummaries
    from runner.summary import RunSummary

    if options.batch_id:
        raise click.UsageError("--batch-id names one batch; it does not go with --continuous")
    kept = RoundSummaries(options.summary_json)

    def show(number: int, summary: RunSummary) -> None:
        click.echo(scrub(f"round {number}: {summary.render()}"))
        kept.add(summary)

    done = run_continuously(
        observer, interval_seconds=_duration(options.min_interval), options=chosen, on_round=show
    )
    click.echo(
        f"{observer.spec.name}: stopped after {done.count} round(s), {done.commits} commit(s)"
    )


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    value, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    try:
        seconds = float(value) * units[unit]
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a duration; write 30s, 5m or 1h", param_hint="--min-interval"
        ) from None
    if seconds < 0:
        raise click.BadParameter("must not be negative", param_hint="--min-interval")
    return seconds


@click.command()
@click.argument("spec", required=False, type=click.Path(dir_okay=False))
@click.option(
    "-p",
    "--property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Hudi property (hoodie.datasource.write.recordkey.field=id, ...) instead of a spec.",
)
@click.option(
    "--records",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSON lines, one record per line.",
)
@click.option("--schema", help='Spark DDL for the records, e.g. "ts long, city string".')
@click.option(
    "--buckets",
    type=click.IntRange(min=1),
    help="Preview another bucket count (default: the spec's table's layout, split buckets "
    "included, or the spec's count before the first run).",
)
def keys(
    spec: str | None,
    properties: tuple[str, ...],
    records: Path,
    schema: str | None,
    buckets: int | None,
) -> None:
    """Show where records would go: record key, partition path, bucket.

    \b
      runner keys SPEC.yaml --records FILE.jsonl [--schema DDL] [--buckets N]
      runner keys -p KEY=VALUE ... --records FILE.jsonl [--buckets N]

    Prints one JSON line per record, in input order, or {"error": ...} for a record that
    cannot be keyed. Uses the same key columns as `runner run`, so check a spec here
    before its first write. Types come from --schema, else they are inferred. With -p the
    bucket comes from --buckets, else hoodie.bucket.index.num.buckets, else it is null.
    """
    from runner.commands.keys import key_lines

    if bool(spec) == bool(properties):
        raise click.UsageError("give either a SPEC or -p properties")
    for line in key_lines(spec, properties, records, schema, buckets):
        click.echo(line)


@click.command()
@click.option("--markdown", is_flag=True, help="Print the spec reference (docs/spec.md) instead.")
def schema(markdown: bool) -> None:
    """Print the spec's JSON Schema (for editors and CI)."""
    from runner.spec import schema_path
    from runner.spec.docs import spec_reference

    click.echo(spec_reference() if markdown else schema_path().read_text(), nl=False)


@click.command(
    "import-hudi",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True},
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="A property, over the file's and --hoodie-conf's (repeatable).",
)
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False),
    help="Write the spec to this file (default: print it).",
)
@click.argument("streamer_args", nargs=-1, type=click.UNPROCESSED, metavar="[PROPS] [FLAGS]...")
def import_hudi(
    overrides: tuple[str, ...], out: str | None, streamer_args: tuple[str, ...]
) -> None:
    """Turn a HoodieStreamer job into a spec: [PROPS] and HoodieStreamer's flags.

    \b
      runner import-hudi streamer.properties --target-base-path s3://lake/trips \\
          --target-table trips --table-type COPY_ON_WRITE --op UPSERT \\
          --source-ordering-field ts -o pipeline.yaml

    Takes HoodieStreamer's own flags (--props, --hoodie-conf, --source-class for the DFS
    and Kafka sources, --transformer-class SqlQueryBasedTransformer, --filter-dupes...). The
    spec starts with what each property became, the environment variables its secrets are
    read from, and, for each property not imported, why. It is validated before it is
    written. docs/hudi-migration.md has the whole table.
    """
    from runner.commands.import_hudi import import_hudi as import_job

    imported = import_job(streamer_args, overrides, out)
    if not out:
        click.echo(imported.text, nl=False)
        return
    counts = f"{imported.mapped} settings mapped, {imported.skipped} not imported"
    click.echo(f"wrote {out} ({counts}: see its first lines)", err=True)


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def sync(spec: str, as_json: bool) -> None:
    """Register the spec's table in its catalog (target.catalog) now.

    Creates the entry, or updates it when it differs from the table's latest version
    (location, columns, Delta parameters), as a run does after each commit; an entry that
    is current is left as it is. AWS Glue's credentials come from the environment, as boto3
    reads them; a Hive Metastore is reached at its thrift:// URI. Starts no JVM.
    """
    from runner.catalog import register
    from runner.errors import UserError
    from runner.spec import load_spec

    target = load_spec(spec).target
    if target.catalog is None:
        raise UserError(f"{spec}: no target.catalog to register the table in; add one")
    done = register(target)
    click.echo(
        json.dumps(scrub_values(done.to_dict()), indent=2) if as_json else scrub(done.render())
    )


COMMANDS = (validate, run, keys, schema, import_hudi, sync)
