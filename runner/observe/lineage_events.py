"""A run's OpenLineage events, built with openlineage-python's models and sent by its client.

Imported only when a transport is configured: the client takes about 0.3 s to import. The
transport is the one the client itself would pick (OPENLINEAGE_CONFIG, an openlineage.yml in
the working directory or ~/.openlineage, OPENLINEAGE__TRANSPORT__* variables, then
OPENLINEAGE_URL), except that nothing configured means no events, never the client's
fallback of printing them on stdout. An HTTP transport the configuration leaves without a
timeout gets a short one and no retries: a collector that is down costs a run seconds, not
minutes. Every string of every event, whatever added it, is scrubbed on its way out.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from typing import Any

import attr
from deltalake import Field, Schema
from deltalake.schema import StructType
from openlineage.client import OpenLineageClient
from openlineage.client.client import Event
from openlineage.client.constants import __version__ as client_version
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    JobFacet,
    RunFacet,
    dataset_version_dataset,
    documentation_job,
    error_message_run,
    job_type_job,
    output_statistics_output_dataset,
    parent_run,
    processing_engine_run,
    schema_dataset,
    tags_run,
)
from openlineage.client.transport import Transport, get_default_factory
from openlineage.client.transport.noop import NoopConfig, NoopTransport

from runner import __version__
from runner.observe.lineage_names import Dataset, LineageJob, Parent
from runner.observe.record import RunRecord
from runner.spec.secrets import scrub
from runner.spec.urls import url_endpoint

# Who made the events (a URI the spec asks for; the project publishes no web page).
PRODUCER = f"urn:runner:{__version__}"
TIMEOUT_SECONDS = 3.0  # an HTTP transport's, unless its configuration sets one
NO_RETRY = {"total": 0, "connect": 0, "read": 0, "status": 0, "other": 0}


def make_client() -> OpenLineageClient | None:
    """The client with the transport the OpenLineage configuration gives, None when it gives
    none (the client would print the events on stdout)."""
    client = OpenLineageClient(transport=NoopTransport(NoopConfig()))
    config = dict(client.config.transport or {})
    if config.get("type"):
        if config["type"] == "http":
            config = _http_config(config)
        transport = get_default_factory().create(config)
    elif os.environ.get("OPENLINEAGE_URL"):
        transport = get_default_factory().create(_url_config(os.environ))
    else:
        return None
    client.transport = _Scrubbing(transport)
    return client


def _url_config(environ: Mapping[str, str]) -> dict[str, Any]:
    """The HTTP transport OPENLINEAGE_URL, OPENLINEAGE_ENDPOINT and OPENLINEAGE_API_KEY
    describe (as the client reads them), with the short timeout."""
    config: dict[str, Any] = {
        "type": "http",
        "url": environ["OPENLINEAGE_URL"],
        "endpoint": environ.get("OPENLINEAGE_ENDPOINT", "api/v1/lineage"),
    }
    if environ.get("OPENLINEAGE_API_KEY"):
        config["auth"] = {"type": "api_key", "apiKey": environ["OPENLINEAGE_API_KEY"]}
    return _http_config(config)


def _http_config(config: dict[str, Any]) -> dict[str, Any]:
    """An HTTP transport's configuration with the short timeout and no retries unless it
    sets them, its URL's `${env:NAME}` references resolved and its `user:password@` taken
    out into a basic-auth header (unless the configuration names an `auth` of its own)."""
    config = {"timeout": TIMEOUT_SECONDS, "retry": NO_RETRY, **config}
    if not isinstance(config.get("url"), str):
        return config  # the client's own error names what is missing
    collector = url_endpoint(config["url"], "the OpenLineage URL")
    config["url"] = collector.url
    if collector.authorization and not config.get("auth"):
        headers = dict(config.get("custom_headers") or {})
        config["custom_headers"] = {"Authorization": collector.authorization, **headers}
    return config


class _Scrubbing(Transport):
    """A transport that scrubs every string of an event, then hands it on: the last step
    before the event leaves, after the client added its own facets."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.name = inner.name

    def emit(self, event: Event) -> Any:
        return self.inner.emit(_scrubbed(event))

    def close(self, timeout: float = -1) -> bool:
        return self.inner.close(timeout)


def _scrubbed(value: Any) -> Any:
    """value with every string scrubbed; attrs objects (events, facets) changed in place."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [_scrubbed(item) for item in value]
    if isinstance(value, dict):
        return {key: _scrubbed(item) for key, item in value.items()}
    if attr.has(type(value)):
        for field in attr.fields(type(value)):
            setattr(value, field.name, _scrubbed(getattr(value, field.name)))
    return value


def start_event(
    job: LineageJob, run_uuid: str, run_id: str, at: dt.datetime, io: tuple[list[Dataset], Dataset]
) -> RunEvent:
    """The START event: the job, its parent, the inputs and the output (no facets yet)."""
    inputs, output = io
    return RunEvent(
        eventType=RunState.START,
        eventTime=_instant(at),
        run=Run(runId=run_uuid, facets=_run_facets(job, run_id)),
        job=_job(job),
        inputs=[InputDataset(namespace=ns, name=name) for ns, name in inputs],
        outputs=[OutputDataset(namespace=output[0], name=output[1])],
        producer=PRODUCER,
    )


def end_event(
    job: LineageJob,
    run_uuid: str,
    record: RunRecord,
    io: tuple[list[Dataset], Dataset],
    schema: Schema | None,
) -> RunEvent:
    """The COMPLETE event of a run that succeeded (output with its schema, version and
    statistics), or the FAIL event of one that did not (with its error)."""
    inputs, output = io
    facets = _run_facets(job, record.run_id)
    if not record.succeeded:
        facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=_error(record), programmingLanguage="python", producer=PRODUCER
        )
    return RunEvent(
        eventType=RunState.COMPLETE if record.succeeded else RunState.FAIL,
        eventTime=_instant(record.ended_at),
        run=Run(runId=run_uuid, facets=facets),
        job=_job(job),
        inputs=[InputDataset(namespace=ns, name=name) for ns, name in inputs],
        outputs=[_output(output, record, schema)],
        producer=PRODUCER,
    )


def _output(output: Dataset, record: RunRecord, schema: Schema | None) -> OutputDataset:
    facets: dict[str, Any] = {}
    if schema is not None:
        facets["schema"] = schema_dataset.SchemaDatasetFacet(
            fields=[_field(f) for f in schema.fields], producer=PRODUCER
        )
    if record.version is not None:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
            datasetVersion=str(record.version), producer=PRODUCER
        )
    statistics: dict[str, Any] = {}
    if record.succeeded:
        # the rows the run changed in the table; bytes and files it added
        statistics["outputStatistics"] = (
            output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                rowCount=record.write.rows_changed,
                size=record.write.bytes_written,
                fileCount=record.write.files_added,
                producer=PRODUCER,
            )
        )
    return OutputDataset(
        namespace=output[0], name=output[1], facets=facets, outputFacets=statistics
    )


def _field(field: Field) -> schema_dataset.SchemaDatasetFacetFields:
    """A Delta schema field: its type's name (long, string, decimal(10,2), struct, array,
    map), and a struct's own fields."""
    kind = field.type
    nested = [_field(f) for f in kind.fields] if isinstance(kind, StructType) else []
    return schema_dataset.SchemaDatasetFacetFields(
        name=field.name, type=str(kind.type), fields=nested
    )


def _run_facets(job: LineageJob, run_id: str) -> dict[str, RunFacet]:
    facets: dict[str, RunFacet] = {
        "processing_engine": processing_engine_run.ProcessingEngineRunFacet(
            version=__version__,
            name="runner",
            openlineageAdapterVersion=client_version,
            producer=PRODUCER,
        ),
        # the runner's own id of the run: `runner history` shows it
        "tags": tags_run.TagsRunFacet(
            tags=[tags_run.TagsRunFacetFields(key="runner.run_id", value=run_id, source="RUNNER")],
            producer=PRODUCER,
        ),
    }
    if job.parent is not None:
        facets["parent"] = _parent_facet(job.parent, job.root)
    return facets


def _parent_facet(parent: Parent, root: Parent | None) -> parent_run.ParentRunFacet:
    return parent_run.ParentRunFacet(
        run=parent_run.Run(runId=parent.run_id),
        job=parent_run.Job(namespace=parent.namespace, name=parent.name),
        root=(
            parent_run.Root(
                run=parent_run.RootRun(runId=root.run_id),
                job=parent_run.RootJob(namespace=root.namespace, name=root.name),
            )
            if root is not None
            else None
        ),
        producer=PRODUCER,
    )


def _job(job: LineageJob) -> Job:
    facets: dict[str, JobFacet] = {
        "jobType": job_type_job.JobTypeJobFacet(
            processingType="BATCH",
            integration="RUNNER",
            jobType="JOB" if job.kind == "run" else job.kind.upper(),
            producer=PRODUCER,
        )
    }
    if job.description:
        facets["documentation"] = documentation_job.DocumentationJobFacet(
            description=job.description, producer=PRODUCER
        )
    return Job(namespace=job.namespace, name=job.name, facets=facets)


def _error(record: RunRecord) -> str:
    """The failure in one line: the error's class and message, or the outcome."""
    parts = [p for p in (record.error_class, record.error_message) if p]
    return ": ".join(parts) if parts else str(record.outcome)


def _instant(at: dt.datetime) -> str:
    """An ISO 8601 instant with its offset (a naive time is taken as UTC)."""
    return (at if at.tzinfo else at.replace(tzinfo=dt.UTC)).isoformat()
