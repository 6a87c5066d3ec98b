"""structlog set-up: JSON lines when stderr is not a terminal, readable lines when it is."""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import MutableMapping
from typing import Any

import structlog

from runner.spec.secrets import scrub

# Events whose figures the command prints on stdout just after them: a readable log line
# keeps only what ties it to that output (JSON lines keep every figure, for log stores).
BRIEF_IN_READABLE_LOGS = {"run_finished": ("pipeline", "version", "instant")}
EVERY_LINE = ("event", "level", "timestamp", "run_id")


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
        *([] if json_logs else [_brief]),
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


def _brief(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> Any:
    """The keys a readable line of an event in BRIEF_IN_READABLE_LOGS keeps."""
    kept = BRIEF_IN_READABLE_LOGS.get(event.get("event", ""))
    if kept is None:
        return event
    return {k: v for k, v in event.items() if k in kept or k in EVERY_LINE}


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
