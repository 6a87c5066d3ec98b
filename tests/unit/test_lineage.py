"""OpenLineage events (runner/observe/lineage.py) sent over HTTP to a collector on 127.0.0.1,
as Marquez would receive them: START and COMPLETE or FAIL with the same run id, the sources
as inputs, the target with its schema and row counts, the Airflow parent, no secret. No JVM.

No package on PyPI or npm ships OpenLineage's JSON Schema (openlineage-python's wheel and
sdist, openlineage-integration-common and apache-airflow-providers-openlineage hold none of
the core schema files), so an event is checked against openlineage-python's own models:
rebuilt from the JSON the collector got, with every required field, run id and time checked
by their validators and every facet by its class, it must serialize back to that same JSON.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
import types
import typing
import uuid
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any

import attr
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from openlineage.client.event_v2 import RunEvent
from openlineage.client.facet_v2 import (
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
from openlineage.client.serde import Serde
from structlog.testing import capture_logs

from runner.observe.lineage import Lineage, run_uuid
from runner.observe.lineage_events import TIMEOUT_SECONDS
from runner.observe.lineage_names import parents
from runner.observe.record import RunRecord
from runner.sources.dataset_names import path_dataset
from runner.sources.kinds.jdbc import jdbc_datasets
from runner.sources.kinds.kafka import kafka_datasets
from runner.spec.loader import load_spec
from runner.spec.model import JdbcSpec, KafkaSpec
from runner.spec.secrets import resolve
from tests.helpers import run_record
from tests.lineage_collector import Collector

SECRETS = {
    "SHOP_PASSWORD": "field-pw-7f3a9c",
    "SHOP_URL_PASSWORD": "url-pw-5d1e8b",
    "KAFKA_JAAS": "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="shop" password="jaas-pw-2c4f6a";',
}
PARENT_RUN = "01931a6e-7c3b-7d2e-8f1a-2b3c4d5e6f70"
ROOT_RUN = "01931a6e-6a00-7000-8000-000000000001"

SPEC = """\
name: orders
description: Orders and refunds of the shop
sources:
  - name: files
    format: json
    path: landing/orders/*.json
    schema: "order_id bigint, amount double"
  - name: events
    format: kafka
    schema: "order_id bigint, amount double"
    kafka:
      bootstrap_servers: "broker1:9092,broker2:9092"
      topics: [orders, refunds]
      options:
        security.protocol: SASL_SSL
        sasl.jaas.config: "${env:KAFKA_JAAS}"
  - name: customers
    format: jdbc
    jdbc:
      url: "jdbc:postgresql://app:${env:SHOP_URL_PASSWORD}@db.example:5432/shop?ssl=true"
      table: public.customers
      user: app
      password: "${env:SHOP_PASSWORD}"
transform:
  sql: "SELECT f.order_id, f.amount FROM files f JOIN customers c USING (order_id)
    UNION ALL SELECT order_id, amount FROM events"
target:
  path: warehouse/orders
  record_key: order_id
  merge_mode: commit_time
  index: {buckets: 4}
lineage:
  namespace: shop
"""

# The facet classes of openlineage-python, by the key an event holds them under.
FACETS: dict[str, type] = {
    "parent": parent_run.ParentRunFacet,
    "errorMessage": error_message_run.ErrorMessageRunFacet,
    "processing_engine": processing_engine_run.ProcessingEngineRunFacet,
    "tags": tags_run.TagsRunFacet,
    "jobType": job_type_job.JobTypeJobFacet,
    "documentation": documentation_job.DocumentationJobFacet,
    "schema": schema_dataset.SchemaDatasetFacet,
    "version": dataset_version_dataset.DatasetVersionDatasetFacet,
    "outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet,
}


@pytest.fixture
def environment(monkeypatch, tmp_path) -> Iterator[None]:
    """No OpenLineage setting of the machine's, no openlineage.yml where the client looks,
    the spec's secrets set; the variables the client adds itself removed afterwards."""
    for name in list(os.environ):
        if name.startswith("OPENLINEAGE"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    yield
    for name in [n for n in os.environ if n.startswith("OPENLINEAGE")]:
        os.environ.pop(name)  # OpenLineageClient aliases OPENLINEAGE_URL into the environment


@pytest.fixture
def collector(monkeypatch, environment) -> Iterator[Collector]:
    server = Collector()
    monkeypatch.setenv("OPENLINEAGE_URL", server.url)
    yield server
    server.server.shutdown()
    server.server.server_close()


def _spec(tmp_path: Path, text: str = SPEC) -> Any:
    (tmp_path / "p.yaml").write_text(text)
    spec = load_spec(tmp_path / "p.yaml")
    # what a run does with the references: resolve them where it connects
    for source in spec.sources:
        if source.jdbc:
            resolve([source.jdbc.url, source.jdbc.password])
        if source.kafka:
            resolve(dict(source.kafka.options))
    return spec


def _record(spec: Any, run_id: str, **changes: Any) -> RunRecord:
    values: dict[str, Any] = {
        "run_id": run_id,
        "kind": "run",
        "pipeline": spec.name,
        "table": "orders",
        "spec_hash": "0123456789abcdef",
        "operation": "upsert",
        "started_at": dt.datetime(2026, 11, 25, 8, 0, tzinfo=dt.UTC),
        "ended_at": dt.datetime(2026, 11, 25, 8, 1, tzinfo=dt.UTC),
        "outcome": "committed",
        "version": 0,
        "rows_read": 10,
        "inserted": 7,
        "updated": 2,
        "deleted": 1,
        "files_added": 4,
        "bytes_written": 12345,
    }
    return run_record(**{**values, **changes})


def _write_target(spec: Any) -> None:
    rows = pa.table(
        {
            "order_id": pa.array([1], pa.int64()),
            "amount": pa.array([2.5], pa.float64()),
            "customer": pa.array([{"name": "a", "since": 2020}]),
        }
    )
    write_deltalake(spec.target.path, rows)


def _structure(kind: Any, value: Any) -> Any:
    """value (JSON) as openlineage-python's model `kind`, its validators run; facets by key."""
    if value is None:
        return None
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if typing.get_origin(kind) is list:
        return [_structure(typing.get_args(kind)[0], item) for item in value]
    if typing.get_origin(kind) is dict:
        return {key: _structure(FACETS[key], item) for key, item in value.items()}
    if isinstance(kind, type) and attr.has(kind):
        attr.resolve_types(kind)
        fields = {f.name: f for f in attr.fields(kind)}
        assert set(value) <= set(fields), f"{kind.__name__}: unknown {set(value) - set(fields)}"
        return kind(
            **{
                fields[k].alias: _structure(fields[k].type, v)
                for k, v in value.items()
                if fields[k].init
            }
        )
    if isinstance(kind, type) and issubclass(kind, Enum):
        return kind(value)
    assert isinstance(value, kind), (value, kind)
    return value


def _valid(event: dict[str, Any]) -> None:
    rebuilt = _structure(RunEvent, event)
    assert Serde.to_dict(rebuilt) == event


def _job_run(facet: dict[str, Any]) -> tuple[str, str, str]:
    return facet["job"]["namespace"], facet["job"]["name"], facet["run"]["runId"]


def _named(datasets: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(d["namespace"], d["name"]) for d in datasets]


def test_a_run_sends_start_and_complete_with_its_datasets_and_parent(
    tmp_path, monkeypatch, collector
):
    monkeypatch.setenv("OPENLINEAGE_PARENT_ID", f"airflow/shop_dag.ingest_orders/{PARENT_RUN}")
    monkeypatch.setenv("OPENLINEAGE_ROOT_PARENT_ID", f"airflow/shop_dag/{ROOT_RUN}")
    spec = _spec(tmp_path)
    lineage = Lineage.for_spec(spec)
    assert lineage.enabled
    record = _record(spec, "a1b2c3d4e5f6")

    lineage.start(record.run_id, record.started_at)
    _write_target(spec)  # the run commits its table
    lineage.finish(record)

    start, complete = collector.events
    assert collector.paths == ["/api/v1/lineage"] * 2
    for event in (start, complete):
        _valid(event)
        assert event["run"]["runId"] == run_uuid("orders", "a1b2c3d4e5f6")
        assert uuid.UUID(event["run"]["runId"])
        assert (event["job"]["namespace"], event["job"]["name"]) == ("shop", "orders")
        assert _named(event["inputs"]) == [
            ("file", str(tmp_path / "landing/orders/*.json")),
            ("kafka://broker1:9092", "orders"),
            ("kafka://broker1:9092", "refunds"),
            ("postgres://db.example:5432", "shop.public.customers"),
        ]
        assert _named(event["outputs"]) == [("file", str(tmp_path / "warehouse/orders"))]
        parent = event["run"]["facets"]["parent"]
        assert _job_run(parent) == ("airflow", "shop_dag.ingest_orders", PARENT_RUN)
        assert _job_run(parent["root"]) == ("airflow", "shop_dag", ROOT_RUN)
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert start["eventTime"] == "2026-11-25T08:00:00+00:00"
    assert complete["eventTime"] == "2026-11-25T08:01:00+00:00"
    assert "facets" not in start["outputs"][0] or not start["outputs"][0]["facets"]
    output = complete["outputs"][0]
    fields = output["facets"]["schema"]["fields"]
    assert [(f["name"], f["type"]) for f in fields] == [
        ("order_id", "long"),
        ("amount", "double"),
        ("customer", "struct"),
    ]
    assert [(f["name"], f["type"]) for f in fields[2]["fields"]] == [
        ("name", "string"),
        ("since", "long"),
    ]
    assert output["facets"]["version"]["datasetVersion"] == "0"
    statistics = output["outputFacets"]["outputStatistics"]
    assert (statistics["rowCount"], statistics["size"], statistics["fileCount"]) == (10, 12345, 4)
    tags = complete["run"]["facets"]["tags"]["tags"]
    assert {"key": "runner.run_id", "value": "a1b2c3d4e5f6", "source": "RUNNER"} in tags
    assert complete["job"]["facets"]["documentation"]["description"] == (
        "Orders and refunds of the shop"
    )
    _no_secret(collector)


def _no_secret(collector: Collector) -> None:
    raw = b"\n".join(collector.bodies)
    for name, value in SECRETS.items():
        assert value.encode() not in raw, name
    assert b"jaas-pw" not in raw and b"sasl" not in raw and b"SASL_SSL" not in raw


def test_a_failed_run_sends_fail_with_its_error_and_no_secret(tmp_path, collector):
    spec = _spec(tmp_path)
    lineage = Lineage.for_spec(spec)
    # an error that echoes the URL as the run resolved it, password and all
    url = f"jdbc:postgresql://app:{SECRETS['SHOP_URL_PASSWORD']}@db.example:5432/shop"
    record = _record(
        spec,
        "0f0e0d0c0b0a",
        outcome="failed",
        version=None,
        error_class="EnvironmentProblem",
        error_message=f"cannot connect to {url}: connection refused",
    )
    lineage.start(record.run_id, record.started_at)
    lineage.finish(record)

    start, fail = collector.events
    _valid(fail)
    assert fail["eventType"] == "FAIL"
    assert fail["run"]["runId"] == start["run"]["runId"]
    message = fail["run"]["facets"]["errorMessage"]["message"]
    assert message.startswith("EnvironmentProblem: cannot connect to jdbc:postgresql://app:")
    assert message.endswith("@db.example:5432/shop: connection refused")
    output = fail["outputs"][0]
    assert "outputStatistics" not in output.get("outputFacets", {})
    assert "schema" not in output.get("facets", {})  # no table was ever written
    assert "parent" not in fail["run"]["facets"]
    _no_secret(collector)


def test_an_interrupted_compaction_is_closed_without_the_finders_parent(
    tmp_path, monkeypatch, collector
):
    monkeypatch.setenv("OPENLINEAGE_PARENT_ID", f"airflow/shop_dag.ingest_orders/{PARENT_RUN}")
    spec = _spec(tmp_path)
    record = _record(spec, "0123abcd4567", kind="compaction", outcome="interrupted", version=None)
    Lineage.for_spec(spec).start(record.run_id, record.started_at, kind="compaction")
    # a later run finds the killed one by its heartbeat and closes it
    Lineage.for_spec(spec).finish(record)

    start, fail = collector.events
    _valid(fail)
    assert (start["job"]["name"], fail["job"]["name"]) == ("orders.compaction",) * 2
    assert start["inputs"] == fail["inputs"] == []
    assert fail["eventType"] == "FAIL"
    assert fail["run"]["runId"] == start["run"]["runId"]
    assert fail["run"]["facets"]["errorMessage"]["message"] == "interrupted"
    assert "parent" in start["run"]["facets"] and "parent" not in fail["run"]["facets"]


def test_a_collector_that_is_down_is_a_warning_and_the_run_goes_on(
    tmp_path, monkeypatch, environment
):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OPENLINEAGE_URL", f"http://127.0.0.1:{port}")
    spec = _spec(tmp_path)
    lineage = Lineage.for_spec(spec)
    record = _record(spec, "deadbeef0001")
    begun = time.monotonic()
    with capture_logs() as logs:
        lineage.start(record.run_id, record.started_at)
        lineage.finish(record)
    took = time.monotonic() - begun

    failed = [entry for entry in logs if entry["event"] == "lineage_event_failed"]
    assert [(e["log_level"], e["event_type"]) for e in failed] == [
        ("warning", "START"),
        ("warning", "COMPLETE"),
    ]
    assert failed[0]["error_class"] == "ConnectionError"
    # no retries with backoff: the client's defaults would wait about 9 s per event
    assert took < 2 * TIMEOUT_SECONDS


def test_the_transport_of_an_openlineage_yml_is_used(tmp_path, monkeypatch, environment):
    server = Collector()
    try:
        config = tmp_path / "ol.yml"
        config.write_text(f"transport:\n  type: http\n  url: {server.url}\n")
        monkeypatch.setenv("OPENLINEAGE_CONFIG", str(config))
        monkeypatch.setenv("OPENLINEAGE_NAMESPACE", "prod")
        spec = _spec(tmp_path)
        lineage = Lineage.for_spec(spec)
        lineage.start("cafe00000001", dt.datetime(2026, 11, 25, tzinfo=dt.UTC))
        (event,) = server.events
        assert event["eventType"] == "START"
        assert event["job"]["namespace"] == "prod"
    finally:
        server.server.shutdown()
        server.server.server_close()


def test_without_a_transport_nothing_is_sent_or_printed(tmp_path, monkeypatch, environment, capfd):
    spec = _spec(tmp_path)
    lineage = Lineage.for_spec(spec)
    assert not lineage.enabled
    lineage.start("feed00000001", dt.datetime.now(dt.UTC))
    lineage.finish(_record(spec, "feed00000001"))
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")  # the client would print every event on stdout

    monkeypatch.setenv("OPENLINEAGE_URL", "http://127.0.0.1:9")
    assert Lineage.for_spec(spec).enabled
    off = _spec(tmp_path, SPEC.replace("  namespace: shop", "  enabled: false"))
    assert not Lineage.for_spec(off).enabled
    monkeypatch.setenv("OPENLINEAGE_DISABLED", "true")
    assert not Lineage.for_spec(spec).enabled


def test_a_config_that_names_no_transport_is_a_warning(tmp_path, monkeypatch, environment):
    config = tmp_path / "ol.yml"
    config.write_text("facets:\n  environment_variables: []\n")
    monkeypatch.setenv("OPENLINEAGE_CONFIG", str(config))
    with capture_logs() as logs:
        lineage = Lineage.for_spec(_spec(tmp_path))
    assert not lineage.enabled
    assert [e["event"] for e in logs] == ["lineage_not_configured"]


@pytest.mark.parametrize(
    ("path", "dataset"),
    [
        ("/data/in/*.csv", ("file", "/data/in/*.csv")),
        ("file:///data/orders", ("file", "/data/orders")),
        ("s3a://lake/raw/orders", ("s3://lake", "raw/orders")),
        ("s3://KEY:SECRET@lake/raw", ("s3://lake", "raw")),
        ("gs://bucket/a/b", ("gs://bucket", "a/b")),
        ("hdfs://nn:8020/warehouse/t", ("hdfs://nn:8020", "/warehouse/t")),
        (
            "abfss://box@acct.dfs.core.windows.net/t",
            ("abfss://box@acct.dfs.core.windows.net", "t"),
        ),
    ],
)
def test_paths_are_named_as_openlineage_names_them(path, dataset):
    assert path_dataset(path) == dataset


@pytest.mark.parametrize(
    ("url", "table", "dataset"),
    [
        (
            "jdbc:postgresql://db:5432/shop?user=u&password=pw&ssl=true",
            "public.orders",
            ("postgres://db:5432", "shop.public.orders"),
        ),
        ("jdbc:mysql://u:p/w@d@db:3306/shop", "orders", ("mysql://db:3306", "shop.orders")),
        (
            "jdbc:sqlserver://db:1433;databaseName=shop;user=u@corp;password=pw",
            "dbo.orders",
            ("sqlserver://db:1433", "shop.dbo.orders"),
        ),
        ("jdbc:oracle:thin:u/pw@//db:1521/svc", "S.T", ("oracle://db:1521", "svc.S.T")),
        ("jdbc:oracle:thin:u/pw@db:1521:ORCL", "S.T", ("oracle://db:1521", "ORCL.S.T")),
    ],
)
def test_a_jdbc_table_is_named_without_credentials(url, table, dataset):
    assert jdbc_datasets(JdbcSpec(url=url, table=table), "src") == [dataset]


def test_a_jdbc_query_names_the_tables_it_reads():
    query = (
        "WITH recent AS (SELECT * FROM sales.orders WHERE ts > now() - interval '1 day') "
        "SELECT * FROM recent JOIN public.customers c ON c.id = recent.customer_id"
    )
    spec = JdbcSpec(url="jdbc:postgresql://db:5432/shop", query=query)
    assert jdbc_datasets(spec, "src") == [
        ("postgres://db:5432", "shop.public.customers"),
        ("postgres://db:5432", "shop.sales.orders"),
    ]
    unreadable = JdbcSpec(url="jdbc:postgresql://db:5432/shop", query="SELEKT ((")
    assert jdbc_datasets(unreadable, "src") == [("postgres://db:5432", "shop.src")]


def test_a_topic_pattern_is_its_dataset():
    kafka = KafkaSpec(bootstrap_servers="SASL_SSL://b1:9093,b2:9093", topic_pattern="orders-.*")
    assert kafka_datasets(kafka) == [("kafka://b1:9093", "orders-.*")]


def test_the_parent_comes_from_airflow_variables_or_spark_properties():
    parent, root = parents({"OPENLINEAGE_PARENT_ID": f"air/flow/dag.task/{PARENT_RUN}"}, {})
    assert parent is not None and (parent.namespace, parent.name) == ("air/flow", "dag.task")
    assert root is None
    conf = {
        "spark.openlineage.parentJobNamespace": "airflow",
        "spark.openlineage.parentJobName": "dag.task",
        "spark.openlineage.parentRunId": PARENT_RUN,
    }
    parent, _ = parents({}, conf)
    assert parent is not None and parent.run_id == PARENT_RUN
    with capture_logs() as logs:
        assert parents({"OPENLINEAGE_PARENT_ID": "airflow/dag.task/not-a-uuid"}, conf) == (
            None,
            None,
        )
    assert [e["event"] for e in logs] == ["lineage_parent_ignored"]
