"""structlog set-up: JSON lines when stderr is not a terminal, readable lines when it is."""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import MutableMapping
from typing import Any

import structlog

from runner.spec.secrets import scrub


def configure(level: str = "info", json_logs: bool | None = None) -> None:
    """Configure structlog once per process; logs go to stderr so stdout stays for results."""
    if json_logs is None:
        json_logs = not sys.stderr.isatty()
    renderer = (
        structlog.processors.JSONRenderer()
        if json_logs
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _scrub_secrets,
        renderer,
    ]
    if sys.stderr.isatty():
        processors.append(_over_progress_line)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def _scrub_secrets(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> Any:
    """No resolved `${env:NAME}` value reaches a log line, whatever logged it."""
    return {k: scrub(v) if isinstance(v, str) else v for k, v in event.items()}


def _over_progress_line(_logger: Any, _method: str, line: str) -> str:
    """On a terminal, a log line replaces the progress line runner/progress.py may have
    left there (it is drawn again below), instead of running on after it."""
    return "\r\x1b[K" + line


def start_run() -> str:
    """Give this run an id and bind it to every later log event."""
    run_id = uuid.uuid4().hex[:12]
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(run_id=run_id)
    return run_id
