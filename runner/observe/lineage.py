"""OpenLineage events for a pipeline's runs: a START when a run begins, a COMPLETE or FAIL
when it ends, so that Marquez, OpenMetadata or Airflow's lineage view show what each run read
and wrote, and under which Airflow task it ran.

    lineage = Lineage.for_spec(spec)       # a no-op when lineage is off or has nowhere to go
    lineage.start(run_id, started_at)       # the run's id (runner.logs) and its start, UTC
    ...
    lineage.finish(record)                  # the run's RunRecord (runner/observe/record.py)

The events go where every OpenLineage client sends them: OPENLINEAGE_CONFIG (or an
openlineage.yml in the working directory or ~/.openlineage), OPENLINEAGE__TRANSPORT__*
variables, OPENLINEAGE_URL; with none of them, or `lineage.enabled: false` in the spec, or
OPENLINEAGE_DISABLED=true, none is built or sent (and openlineage-python is not imported).
The job is the pipeline (namespace: OPENLINEAGE_NAMESPACE, else the spec's lineage.namespace);
the run's OpenLineage id is a UUID derived from the runner's run id, the same for START and
its end, so that a later process can close a run another one started. Sending never fails a
run: an error is one warning, `lineage_event_failed`.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from runner.observe.lineage_names import Dataset, LineageJob, Parent, parents, source_datasets
from runner.observe.record import Kind, RunRecord, one_line
from runner.sources.dataset_names import path_dataset
from runner.spec.model import PipelineSpec
from runner.storage.location import locate

if TYPE_CHECKING:
    from deltalake import Schema
    from openlineage.client import OpenLineageClient
    from openlineage.client.event_v2 import RunEvent

log = structlog.get_logger(__name__)

# The namespace of the UUIDs made from the runner's run ids (any fixed UUID would do).
RUN_IDS = uuid.UUID("5c1e4a56-3b0d-4f7e-9a62-7d0f2c8e9b11")


def run_uuid(pipeline: str, run_id: str) -> str:
    """The OpenLineage runId of the runner's run `run_id` of `pipeline`: always the same."""
    return str(uuid.uuid5(RUN_IDS, f"{pipeline}/{run_id}"))


def _transport_configured() -> bool:
    """Some OpenLineage transport may be configured: a variable the client reads, or a
    config file where it looks for one (without importing the client)."""
    env = os.environ
    if env.get("OPENLINEAGE_URL") or env.get("OPENLINEAGE_CONFIG"):
        return True
    if any(name.startswith("OPENLINEAGE__TRANSPORT") for name in env):
        return True
    try:
        places = (Path.cwd(), Path("~/.openlineage").expanduser())
        return any((place / "openlineage.yml").is_file() for place in places)
    except (OSError, RuntimeError):  # no working directory, no home
        return False


def _disabled_by_environment() -> bool:
    return os.environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true"


class Lineage:
    """Sends a pipeline's run events; every method is a no-op when `enabled` is False."""

    def __init__(
        self,
        spec: PipelineSpec,
        client: OpenLineageClient | None = None,
        parent: tuple[Parent | None, Parent | None] = (None, None),
    ) -> None:
        self.spec = spec
        self._client = client
        self._parent, self._root = parent

    @classmethod
    def for_spec(cls, spec: PipelineSpec, spark_conf: Mapping[str, str] | None = None) -> Lineage:
        """The pipeline's lineage, or a disabled one: `lineage.enabled` false, no transport
        configured, OPENLINEAGE_DISABLED=true, or a configuration the client refuses (a
        warning). spark_conf: the session's properties, for the parent run Airflow injects
        as spark.openlineage.parent* (OPENLINEAGE_PARENT_ID wins)."""
        if not spec.lineage.enabled or _disabled_by_environment() or not _transport_configured():
            return cls(spec)
        try:
            from runner.observe.lineage_events import make_client

            client = make_client()
        except Exception as exc:  # a bad openlineage.yml, an unknown transport type
            log.warning("lineage_not_started", error=one_line(exc), error_class=type(exc).__name__)
            return cls(spec)
        if client is None:
            log.warning(
                "lineage_not_configured",
                reason="the OpenLineage configuration names no transport; no event is sent",
                config=os.environ.get("OPENLINEAGE_CONFIG"),
            )
            return cls(spec)
        return cls(spec, client, parents(os.environ, spark_conf or {}))

    @property
    def enabled(self) -> bool:
        return self._client is not None

    def start(self, run_id: str, started_at: dt.datetime, kind: Kind = "run") -> None:
        """Send the START event of the runner's run `run_id` (kind: a run of the pipeline,
        or a table service, whose job is `<pipeline>.<kind>`)."""
        if self._client is None:
            return
        from runner.observe.lineage_events import start_event

        self._send(
            "START",
            lambda: start_event(
                self._job(kind),
                run_uuid(self.spec.name, run_id),
                run_id,
                started_at,
                self._io(kind),
            ),
        )

    def finish(self, record: RunRecord) -> None:
        """Send the COMPLETE event of a run that succeeded (committed, nothing new, nothing
        to do, already committed), with the table's schema and the run's row counts; or the
        FAIL event of one that failed or was interrupted, with its error's message. An
        interrupted run is closed by a later process, whose parent is not that run's."""
        if self._client is None:
            return
        from runner.observe.lineage_events import end_event

        kind = "COMPLETE" if record.succeeded else "FAIL"
        schema = self._schema(record)
        job = self._job(record.kind)
        if record.outcome == "interrupted":
            job = replace(job, parent=None, root=None)
        self._send(
            kind,
            lambda: end_event(
                job,
                run_uuid(self.spec.name, record.run_id),
                record,
                self._io(record.kind),
                schema,
            ),
        )

    def _send(self, event_type: str, build: Callable[[], RunEvent]) -> None:
        assert self._client is not None
        try:
            event = build()
            self._client.emit(event)
        except Exception as exc:  # lineage is never worth a run
            log.warning(
                "lineage_event_failed",
                event_type=event_type,
                error=one_line(exc),
                error_class=type(exc).__name__,
            )
            return
        log.debug("lineage_event_sent", event_type=event_type, run_uuid=event.run.runId)

    def _job(self, kind: str) -> LineageJob:
        namespace = os.environ.get("OPENLINEAGE_NAMESPACE") or self.spec.lineage.namespace
        name = self.spec.name if kind == "run" else f"{self.spec.name}.{kind}"
        description = self.spec.description if kind == "run" else None
        return LineageJob(namespace, name, kind, description, self._parent, self._root)

    def _io(self, kind: str) -> tuple[list[Dataset], Dataset]:
        """The inputs (a run's sources; none for a table service, which rewrites its own
        table) and the output, the target."""
        inputs = (
            [d for source in self.spec.sources for d in source_datasets(source)]
            if kind == "run"
            else []
        )
        return inputs, path_dataset(self.spec.target.path)

    def _schema(self, record: RunRecord) -> Schema | None:
        """The target's Delta schema at the version the run committed (the latest, when it
        committed none); None when there is no table yet or it cannot be read."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            location = locate(self.spec.target.path)
            table = DeltaTable(
                location.uri, version=record.version, storage_options=location.storage_options()
            )
            return table.schema()
        except TableNotFoundError:
            return None
        except Exception as exc:  # the event goes without the schema
            log.warning("lineage_schema_unread", error=one_line(exc))
            return None
