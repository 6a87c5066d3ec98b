"""The `runner` command. Each command parses and prints; the library does the work.

Exit codes: 0 success, 2 a problem the user can fix (spec, arguments, input), 1 a failure.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import click

from runner import __version__
from runner.errors import InvalidSpecError, RunnerError, UserError
from runner.spec.secrets import scrub, scrub_values


class _DefaultToRun(click.Group):
    """`runner SPEC.yaml` is `runner run SPEC.yaml`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        i = 0
        while i < len(args) and args[i].startswith("-"):
            i += 2 if args[i] == "--log-format" else 1  # skip the group's own options
        if i < len(args) and args[i] not in self.commands:
            args = [*args[:i], "run", *args[i:]]
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultToRun, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="runner")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.option(
    "--log-format",
    type=click.Choice(["auto", "json", "console"]),
    default="auto",
    show_default=True,
    help="auto: JSON lines when stderr is not a terminal.",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, log_format: str) -> None:
    """Declarative ingestion into bucket-indexed Delta Lake tables, on Spark.

    \b
      runner PIPELINE.yaml            run a pipeline (same as `runner run`)
      runner validate PIPELINE.yaml   check specs without starting Spark
      runner plan PIPELINE.yaml --buckets 32     what an expansion would do
      runner expand PIPELINE.yaml --buckets 32   grow the table's buckets
      runner inspect TABLE_DIR        rows, bytes and skew per bucket
      runner clean PIPELINE.yaml      remove files no reader needs
      runner read TABLE_DIR --since INSTANT     rows committed after an instant
      runner render PIPELINE.yaml --image IMAGE   SparkApplication for Kubernetes
    """
    from runner import logs

    logs.configure(
        "debug" if debug else "info", None if log_format == "auto" else log_format == "json"
    )
    ctx.obj = {"debug": debug}


@cli.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path(dir_okay=False))
def validate(specs: tuple[str, ...]) -> None:
    """Check specs without starting Spark.

    Checks each spec against the JSON Schema and the semantic rules; starts no JVM.
    Prints one line per problem, FILE:LINE:COL: field.path: message, and exits 2 when
    any spec is invalid.
    """
    from runner.spec import check_spec_file

    bad = 0
    for path in specs:
        _, problems = check_spec_file(path)
        for problem in problems:
            click.echo(scrub(str(problem)))
        if problems:
            bad += 1
        else:
            click.echo(f"{path}: ok")
    if bad:
        click.echo(f"{bad} of {len(specs)} spec(s) invalid", err=True)
        sys.exit(2)


@cli.command()
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
def run(
    spec: str,
    summary_json: str | None,
    batch_id: str | None,
    checkpoints: tuple[str, ...],
    ignore_checkpoint: bool,
    continuous: bool,
    min_interval: str,
) -> None:
    """Run a pipeline spec: read, transform, key, write, commit.

    Reads the sources (only what is new, for incremental ones), runs the transform, builds
    record keys and buckets, rewrites only the buckets the batch touches, and commits one
    Delta version with the sources' checkpoints. Relative paths in the spec are relative to
    the spec file. The summary goes to stdout, logs to stderr.

    \b
    Exit codes: 0 done; 2 a problem to fix in the spec, the input or the table settings
    (nothing was written); 1 a failure (the table is as it was before the run).
    """
    from runner.pipeline.run import run_pipeline
    from runner.spec import load_spec
    from runner.summary import RunSummary

    if checkpoints and ignore_checkpoint:
        raise click.UsageError("give --checkpoint or --ignore-checkpoint, not both")
    pipeline = load_spec(spec, parse_transform=False)  # Spark's parser reads it in the run
    if continuous:
        from runner.commands.continuous import run_continuously

        if batch_id:
            raise click.UsageError("--batch-id names one batch; it does not go with --continuous")
        kept: list[dict[str, object]] = []  # the summaries --summary-json keeps, newest last

        def show(number: int, summary: RunSummary) -> None:
            click.echo(scrub(f"round {number}: {summary.render()}"))
            if summary_json:
                kept[:] = [*kept[-(KEPT_ROUNDS - 1) :], summary.to_dict()]
                Path(summary_json).write_text(json.dumps(scrub_values(kept), indent=2) + "\n")

        done = run_continuously(
            pipeline,
            interval_seconds=_duration(min_interval),
            console_progress=sys.stderr.isatty(),
            checkpoint=checkpoints,
            ignore_checkpoint=ignore_checkpoint,
            on_round=show,
        )
        click.echo(
            f"{pipeline.name}: stopped after {done.count} round(s), {done.commits} commit(s)"
        )
        return
    summary = run_pipeline(
        pipeline,
        console_progress=sys.stderr.isatty(),
        batch_id=batch_id,
        checkpoint=checkpoints,
        ignore_checkpoint=ignore_checkpoint,
    )
    click.echo(scrub(summary.render()))
    if summary_json:
        Path(summary_json).write_text(json.dumps(scrub_values(summary.to_dict()), indent=2) + "\n")


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


@cli.command()
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
@click.option("--buckets", type=click.IntRange(min=1), help="Preview another bucket count.")
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
    from runner.commands.keys import (
        parse_properties,
        preview_keys,
        render,
        target_from_properties,
    )
    from runner.session import spark_session
    from runner.spec import load_spec
    from runner.spec.model import SparkSettings

    if bool(spec) == bool(properties):
        raise click.UsageError("give either a SPEC or -p properties")
    if spec:
        pipeline = load_spec(spec)
        target, settings, name = pipeline.target, pipeline.spark, pipeline.name
        shown: int | None = buckets or target.index.buckets
    else:
        target, shown = target_from_properties(parse_properties(properties), buckets)
        settings, name = SparkSettings(), "properties"
    spark = spark_session(settings, f"{name}-keys", console_progress=False)
    results = preview_keys(spark, target, records, schema, shown)
    for line in render(
        r if "error" in r or shown is not None else {**r, "bucket": None} for r in results
    ):
        click.echo(line)


KEPT_ROUNDS = 100  # the round summaries `run --continuous --summary-json` keeps

_POLICY = click.Choice(["multiple_rehash", "overwrite"])


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
                help="multiple_rehash: N to k*N, no shuffle; overwrite: any count, full "
                "reshuffle (default: the spec's index.expansion.policy).",
            ),
            click.option(
                "--partition",
                "partitions",
                multiple=True,
                metavar="PATH",
                help="Grow only this partition (repeatable), e.g. city=paris; it keeps its "
                "own count from then on.",
            ),
            click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text."),
        ]
    ):
        command = option(command)
    return command


@cli.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@_expansion_options
@click.option("--dry-run", is_flag=True, help="Print the plan only (same as `runner plan`).")
def expand(
    spec: str,
    buckets: int | None,
    policy: str | None,
    partitions: tuple[str, ...],
    as_json: bool,
    dry_run: bool,
) -> None:
    """Grow the bucket count of a spec's table, in one atomic commit.

    \b
      runner expand SPEC.yaml --buckets 32                       16 -> 32, no shuffle
      runner expand SPEC.yaml --buckets 24 --policy overwrite    any count, reshuffled
      runner expand SPEC.yaml --partition city=paris             one hot partition, x factor

    Readers see the old layout or the new one, never a mix; rows, keys and values are
    unchanged. A failure before the commit leaves the table as it was.
    """
    _expand(spec, buckets, policy, partitions, as_json, dry_run)


@cli.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@_expansion_options
def plan(
    spec: str, buckets: int | None, policy: str | None, partitions: tuple[str, ...], as_json: bool
) -> None:
    """Print what `runner expand` would do: partitions, buckets, files and bytes.

    Reads only the Delta log: starts no JVM and changes nothing.
    """
    _expand(spec, buckets, policy, partitions, as_json, dry_run=True)


def _expand(
    spec: str,
    buckets: int | None,
    policy: str | None,
    partitions: tuple[str, ...],
    as_json: bool,
    dry_run: bool,
) -> None:
    from runner.services.expand import expand_table
    from runner.spec import load_spec

    planned, done = expand_table(
        load_spec(spec), buckets, policy, partitions, dry_run, console_progress=sys.stderr.isatty()
    )
    if as_json:
        out = {"plan": planned.to_dict(), "result": done.to_dict() if done else None}
        click.echo(json.dumps(scrub_values(out), indent=2))
        return
    click.echo(scrub(planned.render()))
    click.echo("dry run: nothing was changed" if done is None else scrub(done.render()))


@cli.command()
@click.argument("spec", type=click.Path(dir_okay=False))
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
    from runner.services.clean import clean_table
    from runner.spec import load_spec

    done = clean_table(load_spec(spec), retain_commits, min_age_hours, dry_run)
    click.echo(
        json.dumps(scrub_values(done.to_dict()), indent=2) if as_json else scrub(done.render())
    )


@cli.command()
@click.argument("spec", type=click.Path(dir_okay=False))
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
    from runner.services.compact import compact_table
    from runner.spec import load_spec

    done = compact_table(load_spec(spec), partitions, dry_run, console_progress=sys.stderr.isatty())
    click.echo(
        json.dumps(scrub_values(done.to_dict()), indent=2) if as_json else scrub(done.render())
    )


@cli.command()
@click.argument("table")
@click.option("--since", metavar="INSTANT", help="Only rows committed after this instant.")
@click.option("--until", metavar="INSTANT", help="Only rows committed at or before this instant.")
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
def read(
    table: str,
    since: str | None,
    until: str | None,
    as_of: str | None,
    as_of_business_time: str | None,
    fmt: str,
    out: str | None,
) -> None:
    """Read a runner table's rows: all, an incremental pull, or as of a point in time.

    \b
      runner read warehouse/trips --since 20261122093000000
      runner read warehouse/trips --as-of 3 --format parquet --out v3.parquet
      runner read warehouse/customers --as-of-business-time 2026-06-30T00:00:00

    An incremental pull returns the rows whose _commit_time is in (SINCE, UNTIL], opening
    only files whose statistics can hold them, like Hudi's incremental query. Instants are
    yyyyMMddHHmmssSSS (UTC), as in _commit_time and in every run summary. Starts no JVM;
    the row count goes to stderr.
    """
    from runner.commands.read import read_rows, write_rows

    if fmt == "parquet" and not out:
        raise click.UsageError("--format parquet writes a file: give --out PATH")
    result = read_rows(
        table, since=since, until=until, as_of=as_of, as_of_business_time=as_of_business_time
    )
    write_rows(result.rows, fmt, out)
    click.echo(result.describe(table), err=True)


@cli.command()
@click.argument("table", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the full report as JSON.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, writable=True),
    help="Also draw bucket sizes per partition into this PNG file (needs matplotlib).",
)
def inspect(table: str, as_json: bool, plot: str | None) -> None:
    """Rows, bytes and skew per partition and bucket of a runner table.

    Reads only the Delta log's statistics: no data file, no JVM. Skew is the largest
    bucket over the mean bucket of its partition; 1.0 is an even spread.
    """
    from runner.commands.inspect import inspect_table, plot_report, render_report

    report = inspect_table(table)
    click.echo(json.dumps(report, indent=2) if as_json else render_report(report))
    if plot:
        plot_report(report, plot)
        click.echo(f"plot written to {plot}", err=True)


@cli.command()
@click.option("--markdown", is_flag=True, help="Print the spec reference (docs/spec.md) instead.")
def schema(markdown: bool) -> None:
    """Print the spec's JSON Schema (for editors and CI)."""
    from runner.spec import schema_path
    from runner.spec.docs import spec_reference

    click.echo(spec_reference() if markdown else schema_path().read_text(), nl=False)


@cli.command(
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
    sources, --transformer-class SqlQueryBasedTransformer, --filter-dupes...). The spec
    starts with what each property became and, for each one not imported, why. It is
    validated before it is written. docs/hudi-migration.md has the whole table.
    """
    from runner.hudi.streamer_import import import_streamer, parse_streamer_args, read_properties
    from runner.spec import load_spec

    args = list(streamer_args)
    props = args.pop(0) if args and not args[0].startswith("-") else None
    flags, confs, transformers = parse_streamer_args(args)
    files = [p for p in (props, flags.get("--props")) if p]
    if len(files) > 1:
        raise UserError(f"two properties files ({files[0]}, --props {files[1]}): give one")
    values: dict[str, str] = {}
    if files:
        values.update(read_properties(Path(files[0].removeprefix("file://"))))
    for pair in (*confs, *overrides):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"{pair!r} is not KEY=VALUE")
        values[key.strip()] = value.strip()
    imported = import_streamer(values, flags, transformers)
    text = imported.to_yaml(files[0] if files else "the command line")
    # validated where it goes: relative paths in a spec are read from its directory
    directory = Path(out).resolve().parent if out else Path.cwd()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=directory, delete=False) as f:
        f.write(text)
    try:
        load_spec(f.name, resolve_paths=False)  # checked, not run: paths need no values
        if out:
            os.replace(f.name, out)
    except InvalidSpecError as exc:
        # the file is not kept, so its line numbers would point nowhere: the fields say it
        problems = re.sub(rf"^{re.escape(f.name)}:\d+:\d+: ", "  ", str(exc), flags=re.M)
        raise UserError(f"the imported spec does not validate:\n{problems}") from exc
    finally:
        if os.path.exists(f.name):
            os.unlink(f.name)
    if not out:
        click.echo(text, nl=False)
        return
    counts = f"{len(imported.mapped)} settings mapped, {len(imported.skipped)} not imported"
    click.echo(f"wrote {out} ({counts}: see its first lines)", err=True)


@cli.command("fetch-jars")
@click.option(
    "--into",
    type=click.Path(file_okay=False),
    help="Also copy them into DIR (docker/jars for an image build).",
)
@click.option("--check", is_flag=True, help="Only say whether Spark has them; fetch nothing.")
def fetch_jars(into: str | None, check: bool) -> None:
    """Fetch Spark's S3 connector (hadoop-aws and its AWS SDK bundle) from Maven Central.

    Spark needs it to read sources on s3:// and to expand tables there. The jars (about
    550 MB) go into the jar cache (~/.cache/runner/jars; RUNNER_JAR_CACHE moves it), where
    every later run finds them. Needs `mvn`. An image built after `runner fetch-jars
    --into docker/jars` has them on Spark's classpath.
    """
    from runner import s3_connector

    what = s3_connector.describe()
    if check:
        if s3_connector.on_spark_classpath():
            click.echo(f"{what}: on Spark's classpath ({s3_connector.spark_jar_dir()})")
            return
        found = s3_connector.connector_jars()
        if found is None:
            raise UserError(f"{what}: not fetched yet; run `runner fetch-jars`")
        click.echo(f"{what}: {', '.join(found)}")
        return
    cached = s3_connector.connector_jars() is not None
    if not cached:
        click.echo(f"fetching {what} from Maven Central (about 550 MB)...", err=True)
    for jar in s3_connector.fetch(Path(into) if into else None):
        click.echo(jar)


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--image", help="Container image of the runner (see the Dockerfile).")
@click.option("--namespace", help="Namespace of the objects (default: kubernetes.namespace).")
@click.option("--schedule", metavar="CRON", help="Render a ScheduledSparkApplication.")
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Write DIR/<name>.yaml instead of printing.",
)
@click.option("--check", is_flag=True, help="Check manifest FILES against the CRD schemas.")
def render(
    files: tuple[str, ...],
    image: str | None,
    namespace: str | None,
    schedule: str | None,
    out: str | None,
    check: bool,
) -> None:
    """Kubernetes manifests for a spec, or an offline check of manifests.

    \b
      runner render SPEC.yaml --image IMAGE [--namespace NS] [--schedule CRON] [--out DIR]
      runner render --check FILE.yaml ...

    Prints a ConfigMap holding the spec file and a spark-operator SparkApplication (a
    ScheduledSparkApplication with --schedule) that runs it, resources and settings from
    the spec's `kubernetes:` block. Each ${env:NAME} of the spec becomes an environment
    variable from the Secret kubernetes.secret, key NAME. Same input, same output bytes.

    With --check, validates each document against the spark-operator CRD schemas with
    unknown fields refused, prints FILE: document N (Kind/name): field: problem, and exits
    2 on any problem. Needs no cluster and starts no JVM.
    """
    if check:
        if image or namespace or schedule or out:
            raise click.UsageError("--check takes manifest files only")
        _check_manifests(files)
        return
    if len(files) != 1:
        raise click.UsageError("give one SPEC to render (or --check FILE...)")
    if not image:
        raise click.UsageError("--image is required to render a spec")
    from runner.k8s.render import k8s_name, render_manifests, to_yaml
    from runner.spec import load_spec

    spec_file = files[0]
    spec = load_spec(spec_file, resolve_paths=False)  # the pods resolve ${env:NAME} in paths
    command = ["runner", "render", spec_file, "--image", image]
    command += ["--namespace", namespace] if namespace else []
    command += ["--schedule", schedule] if schedule else []
    docs = render_manifests(
        spec, Path(spec_file).read_text(encoding="utf-8"), image, namespace, schedule
    )
    text = to_yaml(docs, shlex.join(command))
    if out is None:
        click.echo(text, nl=False)
        return
    target = Path(out) / f"{k8s_name(spec.name)}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    click.echo(f"wrote {target}")


def _check_manifests(files: tuple[str, ...]) -> None:
    from runner.k8s.check import check_file

    bad = 0
    for path in files:
        report = check_file(path)
        for problem in report.problems:
            click.echo(str(problem))
        if report.skipped:
            click.echo(f"{path}: not checked (no schema here): {', '.join(report.skipped)}")
        if report.problems:
            bad += 1
        elif report.checked:
            click.echo(f"{path}: ok ({', '.join(report.checked)})")
    if bad:
        click.echo(f"{bad} of {len(files)} file(s) invalid", err=True)
        sys.exit(2)


_POD_ARGS = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


@cli.command(hidden=True, context_settings=_POD_ARGS)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def driver(args: tuple[str, ...]) -> None:
    """Spark's driver pod on Kubernetes: spark-submit in client mode (Spark passes ARGS)."""
    from runner.k8s.pod import driver_command

    command = driver_command(list(args), os.environ)
    os.execv(command[0], command)


@cli.command(hidden=True, context_settings=_POD_ARGS)
def executor() -> None:
    """Spark's executor pod on Kubernetes: the executor backend, set up from the environment."""
    from runner.k8s.pod import executor_command

    command = executor_command(os.environ)
    os.execvp(command[0], command)


def main() -> None:
    debug = "--debug" in sys.argv[1:]
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except RunnerError as exc:
        if debug:
            click.echo(scrub(traceback.format_exc()), err=True, nl=False)
        if isinstance(exc, InvalidSpecError):
            click.echo(scrub(str(exc)), err=True)  # FILE:LINE:COL: field: message lines
        else:
            kind = "error" if isinstance(exc, UserError) else "failed"
            click.echo(scrub(f"{kind}: {exc}"), err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:
        if debug:
            click.echo(scrub(traceback.format_exc()), err=True, nl=False)
        else:
            click.echo(
                scrub(f"failed: {type(exc).__name__}: {exc} (run with --debug for details)"),
                err=True,
            )
        sys.exit(1)
