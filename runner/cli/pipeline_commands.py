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
@click.argument("specs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--against",
    metavar="TABLE",
    help="Also compare the spec's input schema with this table's (a path or s3:// URI): "
    "the columns a run would add or widen, or why it would be refused.",
)
def validate(specs: tuple[str, ...], against: str | None) -> None:
    """Check specs without starting Spark.

    Checks each spec against the JSON Schema and the semantic rules; starts no JVM.
    Prints one line per problem, FILE:LINE:COL: field.path: message, and exits 2 when
    any spec is invalid.

    \b
    With --against TABLE (one spec): the schema changes a run would make to TABLE
    under target.schema_evolution, read from the spec's declared source schema, its
    parquet files or its Delta source; exits 2 when a run would be refused, 1 when the
    input's schema is known only to Spark (a transform, JSON or CSV inference).
    """
    from runner.spec import check_spec_file

    if against and len(specs) != 1:
        raise click.UsageError("--against compares one spec with one table; give one spec")
    bad = 0
    for path in specs:
        spec, problems = check_spec_file(path)
        for problem in problems:
            click.echo(scrub(str(problem)))
        if problems:
            bad += 1
        else:
            click.echo(f"{path}: ok")
    if bad:
        click.echo(f"{bad} of {len(specs)} spec(s) invalid", err=True)
        sys.exit(2)
    if against:
        _compare(spec, against)


def _compare(spec: PipelineSpec | None, table: str) -> None:
    from runner.commands.schema_against import compare_with_table

    assert spec is not None, "a valid spec file loads"
    comparison = compare_with_table(spec, table)
    for line in comparison.lines(spec):
        click.echo(scrub(line))
    if comparison.exit_code:
        sys.exit(comparison.exit_code)


@dataclass(frozen=True, kw_only=True)
class RunCommand:
    """`runner run`'s argument and options."""

    spec: str
    summary_json: str | None
    batch_id: str | None
    checkpoints: tuple[str, ...]
    ignore_checkpoint: bool
    continuous: bool
    min_interval: str
    dry_run: bool


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
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
    """
    from runner.commands.summary_file import write_summary
    from runner.observe.observed import Observer
    from runner.pipeline.context import RunOptions
    from runner.spec import load_spec

    if options.checkpoints and options.ignore_checkpoint:
        raise click.UsageError("give --checkpoint or --ignore-checkpoint, not both")
    if options.dry_run and options.continuous:
        raise click.UsageError("--dry-run shows one run; it does not go with --continuous")
    pipeline = load_spec(options.spec, parse_transform=False)  # Spark's parser reads it in the run
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
@click.argument("data", type=click.Path(exists=True))
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="The spec file to write (default: NAME.yaml here).",
)
@click.option("--name", help="The pipeline's and source's name (default: DATA's name).")
@click.option(
    "--key", "record_key", metavar="FIELD[,FIELD]", help="The record key (default: guessed)."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "json", "parquet"]),
    help="DATA's format (default: from its first file's name).",
)
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
def init(
    data: str,
    out: str | None,
    name: str | None,
    record_key: str | None,
    fmt: str | None,
    force: bool,
) -> None:
    """Write a spec to start from, made from a sample of DATA (a file or a directory of
    csv, json lines or parquet files).

    Declares the columns of DATA's first file (parquet's schema; CSV and JSON types inferred
    from its first MiB), so that `validate` knows them and no run samples the files; guesses
    the record key, the ordering field and a bucket count, each marked `# check:` on its
    line. Starts no JVM; the spec is checked as `runner validate` checks it.
    """
    from pathlib import Path

    from runner.commands.init_spec import InitRequest, write_spec

    source = Path(data)
    target = Path(out) if out else Path(f"{name or source.stem}.yaml")
    write_spec(InitRequest(source, target, name, record_key, fmt), force)
    click.echo(f"wrote {target}: check the lines marked `check:`, then `runner validate {target}`")


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def sync(spec: str, as_json: bool) -> None:
    """Register the spec's table in its catalog (target.catalog) now.

    Creates the entry, or updates it when it differs from the table's latest version
    (location, columns, Delta parameters), as a run does after each commit; an entry that
    is current is left as it is. Credentials come from the environment, as boto3 reads
    them. Starts no JVM.
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


COMMANDS = (init, validate, run, keys, schema, import_hudi, sync)
