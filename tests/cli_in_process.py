"""`runner ARGS` in the test's own process, as a user meets it, without a process per case.

The CLI's own entry and error handling run (runner/cli/main.py `run_command`: a user's problem is
one line and exit 2, a failure one line and exit 1, --debug a traceback), with stdout,
stderr and the exit code captured as a subprocess's would be; `main()` is not called, as it
ends the process. A run that reaches Spark uses the tests' shared session (`shared_session`):
`SparkSession.builder.getOrCreate()` on a running session would apply the runner's settings
to it (shuffle partitions, time zone) and change them for the tests that follow.

What only a process shows stays with subprocess tests: the JVM's own output on stderr (this
process's JVM writes where it was started), exit codes of a kill or a signal, the process's
working directory, the class-data archive and the S3 finalizer at exit.
"""

from __future__ import annotations

import contextlib
import gc
import io
import sys
from collections.abc import Mapping
from dataclasses import dataclass

import pytest
import structlog

# the modules that start a run's or a table service's session (runner/jvm/session.py)
SESSION_USERS = (
    "runner.pipeline.inputs",
    "runner.actions.expand",
    "runner.actions.compact",
    "runner.commands.keys",
)


@dataclass(frozen=True)
class Done:
    """What a finished `runner` process leaves: subprocess.CompletedProcess's fields."""

    returncode: int
    stdout: str
    stderr: str


def shared_session(monkeypatch: pytest.MonkeyPatch, spark: object) -> None:
    """In-process commands run on `spark` (the tests' session), its settings unchanged."""
    for module in SESSION_USERS:
        monkeypatch.setattr(f"{module}.spark_session", lambda *args, **kwargs: spark)


def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-process command that starts Spark fails (exit 1, "the command started Spark")."""

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the command started Spark")

    for module in SESSION_USERS:
        monkeypatch.setattr(f"{module}.spark_session", started)


def run_cli(*args: str, env: Mapping[str, str] | None = None) -> Done:
    """`runner ARGS` through the CLI's own error handling, `env` set for the command only."""
    from runner.cli.main import run_command
    from runner.spec import secrets

    out, err = io.StringIO(), io.StringIO()
    configured = structlog.get_config()  # runner/logs.py binds its log lines to our stderr
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["runner", *args])
        patch.setattr(secrets, "_RESOLVED", {})  # no value resolved yet, as in a new process
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = run_command()
        finally:
            # as main() does before the process ends (_finalize_s3): the files a failed
            # write left open, held in reference cycles, are closed
            gc.collect()
            structlog.configure(**configured)
            structlog.contextvars.clear_contextvars()
    return Done(code, out.getvalue(), err.getvalue())
