"""The commands that deploy the runner: render (Kubernetes manifests, or their offline
check), fetch-jars (Spark's S3 connector), and the hidden driver and executor commands that
the image's pods run."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from runner.errors import UserError

if TYPE_CHECKING:
    from runner.k8s.render import Rendered


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--image", help="Container image of the runner (see the Dockerfile).")
@click.option("--namespace", help="Namespace of the objects (default: kubernetes.namespace).")
@click.option(
    "--schedule",
    metavar="CRON",
    help="Render a ScheduledSparkApplication on this cron schedule: '0 3 * * *', @hourly, "
    "'@every 5m' (as the spark-operator reads them).",
)
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
      runner render DIR --image IMAGE ...       (a set of specs: one application)
      runner render --check FILE.yaml ...

    Prints a ConfigMap holding the spec file and a spark-operator SparkApplication (a
    ScheduledSparkApplication with --schedule) that runs it, resources and settings from
    the spec's `kubernetes:` block. A directory of specs (or several specs, of one
    directory) gives one ConfigMap of their files and one application that runs them as
    `runner run` runs a set; their kubernetes: blocks must be the same. Each ${env:NAME}
    of a spec becomes an environment variable from the Secret kubernetes.secret, key NAME.
    Same input, same output bytes.

    With --check, validates each document against the spark-operator CRD schemas with
    unknown fields refused, reads the schedule, pod memory and CPU and memory limits as the
    operator, Spark and Kubernetes read them, prints FILE: document N (Kind/name): field:
    problem, and exits 2 on any problem. Needs no cluster and starts no JVM.
    """
    if check:
        if image or namespace or schedule or out:
            raise click.UsageError("--check takes manifest files only")
        _check_manifests(files)
        return
    if not image:
        raise click.UsageError("--image is required to render a spec")
    from runner.cli.spec_sets import is_set
    from runner.k8s.render import render_spec_file

    if is_set(files):
        rendered = _render_set(files, image, namespace, schedule)
    else:
        rendered = render_spec_file(files[0], image, namespace, schedule)
    if out is None:
        click.echo(rendered.text, nl=False)
        return
    click.echo(f"wrote {rendered.write_into(Path(out))}")


def _render_set(
    files: tuple[str, ...], image: str, namespace: str | None, schedule: str | None
) -> Rendered:
    """A set's manifests: the set checked as `runner validate DIR` checks it (the pods
    resolve ${env:NAME} in paths), its specs in the order they run."""
    from runner.errors import InvalidSpecError
    from runner.k8s.render import render_set
    from runner.pipeline.shared_spark import check_set
    from runner.pipeline.spec_set import find_spec_files

    found = find_spec_files(files)
    specs, problems = check_set(found.files, parse_transform=False, resolve_paths=False)
    if specs is None:
        raise InvalidSpecError(problems)
    name = Path(files[0]).resolve().name if len(files) == 1 else specs.members[0].name
    command = ["runner", "render", *files, "--image", image]
    command += ["--namespace", namespace] if namespace else []
    command += ["--schedule", schedule] if schedule else []
    specs_run = [m.spec for m in specs.members]
    return render_set(specs_run, name, image, namespace, schedule, command)


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


CONNECTORS = ("s3", "kafka", "avro")


@click.command("fetch-jars")
@click.option(
    "--into",
    type=click.Path(file_okay=False),
    help="Also copy them into DIR (docker/jars for an image build).",
)
@click.option(
    "--connector",
    "names",
    type=click.Choice(CONNECTORS),
    multiple=True,
    help="Only this connector (repeatable); default: all of them.",
)
@click.option("--check", is_flag=True, help="Only say whether Spark has them; fetch nothing.")
def fetch_jars(into: str | None, names: tuple[str, ...], check: bool) -> None:
    """Fetch Spark's connectors from Maven Central: S3 (hadoop-aws and its AWS SDK bundle),
    Kafka (spark-sql-kafka-0-10 and kafka-clients) and Avro (spark-avro).

    Spark needs S3's to read sources on s3:// and to expand tables there (about 650 MB),
    Kafka's for kafka sources and Avro's for their Avro values (a few MB; a run fetches
    these two itself when missing). The jars go into the jar cache (~/.cache/runner/jars;
    RUNNER_JAR_CACHE moves it), where every later run finds them. Needs `mvn`. An image
    built after `runner fetch-jars --into docker/jars` has them on Spark's classpath.
    """
    problems = []
    for name in names or CONNECTORS:
        problem = _fetch_connector(name, Path(into) if into else None, check)
        if problem:
            problems.append(problem)
    if problems:
        raise UserError("; ".join(problems))


def _fetch_connector(name: str, into: Path | None, check: bool) -> str | None:
    """Fetch (or with `check` look for) one connector, printing its jars; a problem found
    by --check is returned."""
    from runner.jvm import s3_connector, spark_connectors

    if name == "s3":
        what = s3_connector.describe()
        on_classpath, found = s3_connector.on_spark_classpath(), s3_connector.connector_jars()
        size = " (about 650 MB)"
    else:
        connector = spark_connectors.kafka() if name == "kafka" else spark_connectors.avro()
        what, on_classpath, found = (
            connector.describe(),
            connector.on_spark_classpath(),
            connector.cached_jars(),
        )
        size = ""
    if check:
        if on_classpath:
            click.echo(f"{what}: on Spark's classpath ({s3_connector.spark_jar_dir()})")
        elif found is None:
            return f"{what}: not fetched yet; run `runner fetch-jars --connector {name}`"
        else:
            click.echo(f"{what}: {', '.join(found)}")
        return None
    if found is None:
        click.echo(f"fetching {what} from Maven Central{size}...", err=True)
    fetched = s3_connector.fetch(into) if name == "s3" else spark_connectors.fetch(connector, into)
    for jar in fetched:
        click.echo(jar)
    return None


_POD_ARGS = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


@click.command(hidden=True, context_settings=_POD_ARGS)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def driver(args: tuple[str, ...]) -> None:
    """Spark's driver pod on Kubernetes: spark-submit in client mode (Spark passes ARGS)."""
    from runner.k8s.pod import driver_command

    command = driver_command(list(args), os.environ)
    os.execv(command[0], command)


@click.command(hidden=True, context_settings=_POD_ARGS)
def executor() -> None:
    """Spark's executor pod on Kubernetes: the executor backend, set up from the environment."""
    from runner.k8s.pod import executor_command

    command = executor_command(os.environ)
    os.execvp(command[0], command)


COMMANDS = (render, fetch_jars, driver, executor)
