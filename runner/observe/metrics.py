"""A pipeline's Prometheus metrics in one process, and the three ways they go out.

`PipelineMetrics` holds what the process has seen: its counters add up every run it
observed (a counter never goes down within a process), its gauges show the last run.
Everything goes out rendered from it, so a one-shot run and the rounds of
`runner run --continuous` take the same path:

- **Pushgateway** (`metrics.pushgateway`, else $RUNNER_PUSHGATEWAY): after each run, a POST
  (pushadd) to the group job=`metrics.job`, pipeline=NAME. A POST replaces only the metric
  names it carries, so a failed run, which has no last-success time of its own, leaves the
  one pushed before. A one-shot process pushes its one run: after a run with nothing new,
  the counters read 0, not the previous run's figures.
- **Textfile** (`metrics.textfile`): the same text, written to a temporary file and renamed,
  for node-exporter's textfile collector. The file's last-success time is read back when
  the process starts, so a failed run rewrites the file without losing it.
- **HTTP** (`metrics.port`, `serve()`): /metrics for Prometheus to scrape while the process
  lives (`--continuous`).

A push or a write that fails is a warning (`metrics_push_failed`,
`metrics_textfile_failed`), never an error: the run's work is done by then.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from wsgiref.simple_server import WSGIServer

import structlog
from prometheus_client import (
    CollectorRegistry,
    generate_latest,
    pushadd_to_gateway,
    start_http_server,
    write_to_textfile,
)
from prometheus_client.core import Metric
from prometheus_client.exposition import default_handler
from prometheus_client.parser import text_string_to_metric_families

from runner.errors import UserError
from runner.observe.record import RunRecord, one_line
from runner.observe.run_metrics import (
    LAST_SUCCESS,
    TableState,
    Values,
    counter_zeros,
    families,
    run_values,
    table_state,
)
from runner.spec.model import MetricsSpec, PipelineSpec
from runner.spec.secrets import scrub
from runner.spec.urls import Endpoint, url_endpoint

log = structlog.get_logger(__name__)

PUSHGATEWAY_ENV = "RUNNER_PUSHGATEWAY"
PUSH_TIMEOUT_SECONDS = 10.0  # a Pushgateway that does not answer delays the run's end this much


class PipelineMetrics:
    """The metrics of one pipeline's runs in this process: a Prometheus collector, in its
    own registry (`registry`; the default registry stays untouched)."""

    def __init__(
        self,
        pipeline: str,
        table: str,
        settings: MetricsSpec | None = None,
        expectations: Sequence[str] = (),
    ) -> None:
        self.pipeline = pipeline
        self.table = table
        self.settings = settings or MetricsSpec()
        self.expectations = tuple(expectations)
        self._lock = threading.Lock()  # the HTTP server's thread collects while runs add
        self._counters: Values = counter_zeros(self.expectations)
        self._gauges: Values = {}
        self._last_success = _textfile_last_success(self.settings.textfile, pipeline)
        self._server: tuple[WSGIServer, threading.Thread] | None = None
        self.served_with_a_set = False  # its families are on a set's endpoint (SetMetrics)
        self.registry = CollectorRegistry()
        self.registry.register(self)

    @classmethod
    def for_spec(cls, spec: PipelineSpec) -> PipelineMetrics:
        """The spec's pipeline, target and `metrics` block."""
        names = [e.name for e in spec.expectations]
        return cls(spec.name, spec.target.path, spec.metrics, names)

    @property
    def push_url(self) -> str | None:
        return self.settings.pushgateway or os.environ.get(PUSHGATEWAY_ENV) or None

    @property
    def wanted(self) -> bool:
        """Some way out is set: a Pushgateway, a textfile, or a running server."""
        return bool(
            self.push_url or self.settings.textfile or self._server or self.served_with_a_set
        )

    def observe(self, record: RunRecord) -> None:
        """After each run: add it (with the target's state read from its log), then push
        and write the textfile as the spec says; a way out that fails is a warning, not an
        error. Records of table services (kind other than "run") are not a pipeline's
        runs: they change nothing here."""
        if record.kind != "run" or not self.wanted:
            return
        self.add(record, table_state(self.table))
        self.push()
        self.write_textfile()

    def add(self, record: RunRecord, table: TableState | None = None) -> None:
        """Add a run: counters grow by its figures, gauges become its values (the
        last-success time stays when it failed; no table metrics without `table`)."""
        values = run_values(record, table, self.expectations)
        with self._lock:
            for metric, by_label in values.items():
                if metric.type == "counter":
                    total = self._counters.setdefault(metric, {})
                    for label, value in by_label.items():
                        total[label] = total.get(label, 0.0) + value
            self._gauges = {m: v for m, v in values.items() if m.type == "gauge"}
            if LAST_SUCCESS in values:
                self._last_success = values[LAST_SUCCESS][""]

    def collect(self) -> Iterable[Metric]:
        """What the registry renders: the counters so far, the last run's gauges."""
        with self._lock:
            values = {m: dict(v) for m, v in {**self._counters, **self._gauges}.items()}
            if self._last_success is not None:
                values[LAST_SUCCESS] = {"": self._last_success}
        return families(values, self.pipeline, self.table)

    def exposition(self) -> str:
        """The metrics in Prometheus' text format, as every way out sends them."""
        return generate_latest(self.registry).decode()

    def push(self) -> bool:
        """Push to the Pushgateway, if one is set; False when none is or the push failed.
        The URL's `${env:NAME}` references are resolved and its `user:password@` goes in a
        basic-auth header; an unset variable is a failed push too."""
        url = self.push_url
        if not url:
            return False
        shown = scrub(url)
        try:
            gateway = url_endpoint(url, "metrics.pushgateway")
            shown = scrub(gateway.url)
            pushadd_to_gateway(
                gateway.url,
                job=self.settings.job,
                registry=self.registry,
                grouping_key={"pipeline": self.pipeline},
                timeout=PUSH_TIMEOUT_SECONDS,
                handler=_authorized(gateway),
            )
        except Exception as exc:  # the run's work is done: a lost push is only a warning
            log.warning(
                "metrics_push_failed",
                pushgateway=shown,
                error=f"{type(exc).__name__}: {scrub(one_line(exc))}",
            )
            return False
        return True

    def write_textfile(self) -> bool:
        """Write the textfile, if one is set; False when none is or the write failed."""
        path = self.settings.textfile
        if not path:
            return False
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            write_to_textfile(path, self.registry)  # a temporary file, renamed
        except Exception as exc:
            log.warning("metrics_textfile_failed", path=path, error=f"{type(exc).__name__}: {exc}")
            return False
        return True

    def serve(self, port: int | None = None, addr: str = "0.0.0.0") -> int | None:
        """Serve /metrics over HTTP on `port` (default: `metrics.port`; 0: any free one)
        from a daemon thread, until close(). The port it listens on; None when no port is
        set. A port that cannot be bound is a UserError."""
        port = self.settings.port if port is None else port
        if port is None or self._server is not None:
            return self._server[0].server_port if self._server else None
        self._server = serve_registry(self.registry, port, addr)
        return self._server[0].server_port

    def close(self) -> None:
        """Stop the HTTP server, if one runs."""
        stop_serving(self._server)
        self._server = None

    def __enter__(self) -> PipelineMetrics:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _authorized(gateway: Endpoint) -> Callable[..., Callable[[], None]]:
    """prometheus_client's request handler, with the gateway's basic-auth header when its
    URL named a user."""

    def handler(
        url: str, method: str, timeout: float | None, headers: list[tuple[str, str]], data: bytes
    ) -> Callable[[], None]:
        if gateway.authorization:
            headers = [*headers, ("Authorization", gateway.authorization)]
        return default_handler(url, method, timeout, headers, data)

    return handler


def _textfile_last_success(path: str | None, pipeline: str) -> float | None:
    """The pipeline's last-success time in an existing textfile: a failed run writes the
    file again without losing it. None when there is no such file or value."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == LAST_SUCCESS.name and sample.labels.get("pipeline") == pipeline:
                    return float(sample.value)
    except (OSError, ValueError):  # no file yet, or not ours to read
        return None
    return None


def serve_registry(
    registry: CollectorRegistry, port: int, addr: str = "0.0.0.0"
) -> tuple[WSGIServer, threading.Thread]:
    """/metrics of `registry` over HTTP from a daemon thread; a port that cannot be bound is
    a UserError."""
    try:
        server = start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        raise UserError(
            f"metrics.port {port}: cannot serve the metrics on {addr}:{port} ({exc}); "
            "choose a free port in the spec's metrics block"
        ) from exc
    log.info("metrics_served", url=f"http://{addr}:{server[0].server_port}/metrics")
    return server


class SetMetrics:
    """The metrics of a set's pipelines on one endpoint (`runner run DIR --continuous`):
    each pipeline's families, their samples together (the pipeline label tells them
    apart). `members` gives the pipelines' metrics as the set's rounds make them."""

    def __init__(self, members: Callable[[], Iterable[PipelineMetrics]]) -> None:
        self._members = members
        self._server: tuple[WSGIServer, threading.Thread] | None = None

    def collect(self) -> Iterable[Metric]:
        merged: dict[str, Metric] = {}
        for member in self._members():
            for family in member.collect():
                if family.name in merged:
                    merged[family.name].samples.extend(family.samples)
                else:
                    merged[family.name] = family
        return list(merged.values())

    def serve(self, port: int) -> int:
        registry = CollectorRegistry()
        registry.register(self)
        self._server = serve_registry(registry, port)
        return self._server[0].server_port

    def close(self) -> None:
        stop_serving(self._server)
        self._server = None


def stop_serving(served: tuple[WSGIServer, threading.Thread] | None) -> None:
    if served is not None:
        server, thread = served
        server.shutdown()
        server.server_close()
        thread.join()
