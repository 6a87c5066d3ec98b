"""The `runner` group and the error handling: user errors exit 2 with one line, failures 1.

`runner SPEC.yaml` is `runner run SPEC.yaml`. A traceback shows only with --debug; every
message is scrubbed of resolved secrets (runner/spec/secrets.py).
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
import traceback

import click

from runner import __version__
from runner.cli import deploy_commands, init_command, pipeline_commands, table_commands
from runner.errors import InvalidSpecError, RunnerError, UserError
from runner.spec.nearest import nearest_name, nearest_path
from runner.spec.secrets import scrub

_COMMAND_CUTOFF = 0.75  # `reed` is `read`; `orders` is no `render`


class _DefaultToRun(click.Group):
    """`runner SPEC.yaml` is `runner run SPEC.yaml`, unless SPEC.yaml is a command's name
    mistyped (`runner reed`: no such file, and near `read`), which click then names."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        i = 0
        while i < len(args) and args[i].startswith("-"):
            i += 2 if args[i] == "--log-format" else 1  # skip the group's own options
        if i < len(args) and args[i] not in self.commands and not self._mistyped(args[i]):
            args = [*args[:i], "run", *args[i:]]
        return super().parse_args(ctx, args)

    def _mistyped(self, word: str) -> bool:
        if word.endswith((".yaml", ".yml")) or os.path.lexists(word) or nearest_path(word):
            return False  # a spec's path, or a file's name mistyped: `runner run` says which
        return nearest_name(word, self.commands, cutoff=_COMMAND_CUTOFF) is not None


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
      runner run PIPELINES_DIR        run a set of pipelines, upstreams first, in one application
      runner init DATA                a spec to start from, made from a sample of DATA
      runner validate PIPELINE.yaml   check specs without starting Spark
      runner plan PIPELINE.yaml --buckets 32     what an expansion would do
      runner expand PIPELINE.yaml --buckets 32   grow the table's buckets
      runner inspect TABLE_DIR        rows, bytes and skew per bucket
      runner clean PIPELINE.yaml      remove files no reader needs
      runner restore PIPELINE.yaml --to 3        undo a bad batch: version 3's rows back
      runner read TABLE_DIR --since INSTANT     rows committed after an instant
      runner sync PIPELINE.yaml       register the table in its catalog (target.catalog)
      runner render PIPELINE.yaml --image IMAGE   SparkApplication for Kubernetes
    """
    from runner import logs

    logs.configure(
        "debug" if debug else "info", None if log_format == "auto" else log_format == "json"
    )
    ctx.obj = {"debug": debug}


for command in (
    *init_command.COMMANDS,
    *pipeline_commands.COMMANDS,
    *table_commands.COMMANDS,
    *deploy_commands.COMMANDS,
):
    cli.add_command(command)


def main() -> None:
    try:
        code = run_command()
    finally:
        _finalize_s3()
    _exit_before_teardown(code)


def run_command() -> int:
    """The command of sys.argv, run with the CLI's error handling; its exit code."""
    try:
        _main()
    except SystemExit as done:
        return _exit_code(done)
    return 0


def _exit_code(done: SystemExit) -> int:
    if done.code is None or isinstance(done.code, int):
        return done.code or 0
    print(done.code, file=sys.stderr)  # sys.exit("message"), as Python prints it
    return 1


def _exit_before_teardown(code: int) -> None:
    """End the process once the command is done, without the interpreter's teardown.

    pyarrow's dataset scans (delta-rs' `to_pyarrow_table` among them) can leave threads
    that its C++ teardown meets half-destroyed: the process then aborts after its work is
    done, "terminate called without an active exception", exit 134 (apache/arrow#34314;
    `runner history` did, about one run in two). What Python's own exit does first is done
    here: the other non-daemon threads joined, the atexit handlers (logging's flush, Spark's
    gateway) run, the streams flushed; then os._exit skips the C++ teardown."""
    main_thread = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main_thread and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _finalize_s3() -> None:
    """Shut pyarrow's S3 client down while the interpreter is whole. Left to pyarrow's own
    exit hook, an S3 file system still alive (or its threads still running) as the
    interpreter is torn down can abort the process after its work is done ("terminate
    called without an active exception", apache/arrow#34314 and #41087)."""
    if "pyarrow" not in sys.modules:
        return
    # imported here if the command did not: pyarrow's dataset and parquet readers (and
    # delta-rs' Arrow export) can start its S3 subsystem without the Python module
    import pyarrow.fs

    gc.collect()  # the file systems the command's objects held
    pyarrow.fs.ensure_s3_finalized()


def _main() -> None:
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
            _echo_notes(exc)
        sys.exit(exc.exit_code)
    except Exception as exc:
        if debug:
            click.echo(scrub(traceback.format_exc()), err=True, nl=False)
        else:
            click.echo(
                scrub(f"failed: {type(exc).__name__}: {exc} (run with --debug for details)"),
                err=True,
            )
            _echo_notes(exc)
        sys.exit(1)


def _echo_notes(exc: BaseException) -> None:
    """What the failure left done (exception notes: a schema rewrite committed before it)."""
    for note in getattr(exc, "__notes__", ()):
        click.echo(scrub(f"  note: {note}"), err=True)
