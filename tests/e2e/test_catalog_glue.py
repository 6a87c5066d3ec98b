"""target.catalog with AWS Glue (moto's Glue API on 127.0.0.1): the table's entry after a
run that finds the catalog down, after the next run, after an added column, after a
widened type and after a restore, as Athena and Trino read it; `runner sync`.

The runs go through the CLI in-process on the tests' session (tests/cli_in_process.py).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable

from runner.observe.history import read as read_history
from tests.cli_in_process import no_spark, run_cli, shared_session
from tests.helpers import city_rows, city_target, write_batch, write_spec
from tests.s3 import KEY, SECRET, free_port, moto_server

DATA = pa.schema([("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64())])


@pytest.fixture(scope="module")
def glue():
    """moto's server and a Glue client of it (the runner gets its own from the spec)."""
    boto3 = pytest.importorskip("boto3")
    with moto_server() as endpoint:
        yield boto3.client(
            "glue",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=KEY,
            aws_secret_access_key=SECRET,
        )


# the runner's credentials, from the environment as boto3 reads them
ENV = {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET}


def _spec(tmp_path, endpoint: str, **catalog):
    catalog = {"type": "glue", "database": "lake", "table": "trips", **catalog}
    target = city_target("upsert", schema_evolution="widen")
    return write_spec(
        tmp_path,
        {**target, "catalog": {**catalog, "region": "us-east-1", "endpoint_url": endpoint}},
    )


def _run(spec, tmp_path, frame, schema=DATA, env=ENV):
    write_batch(tmp_path, frame, schema)
    summary = tmp_path / "summary.json"
    done = run_cli("run", str(spec), "--summary-json", str(summary), env=env)
    assert done.returncode == 0, done.stderr
    return done, json.loads(summary.read_text())


def _entry(glue) -> dict:
    return glue.get_table(DatabaseName="lake", Name="trips")["Table"]


def _columns(entry: dict) -> dict[str, str]:
    return {c["Name"]: c["Type"] for c in entry["StorageDescriptor"]["Columns"]}


def test_glue_entry_follows_the_table(tmp_path, spark, monkeypatch, glue):
    shared_session(monkeypatch, spark)
    table = tmp_path / "table"
    location = table.as_uri()

    # the catalog is down (a closed port): the run commits, warns, and records it
    spec = _spec(tmp_path, f"http://127.0.0.1:{free_port()}")
    done, summary = _run(spec, tmp_path, city_rows(range(10), ts=1))
    first = summary["version"]
    assert first is not None and DeltaTable(str(table)).version() == first
    assert summary["catalog"]["done"] == "failed" and summary["catalog"]["error"]
    assert "catalog_not_registered" in done.stderr
    assert "catalog      glue lake.trips: not registered" in done.stdout
    with pytest.raises(glue.exceptions.EntityNotFoundException):
        _entry(glue)
    (record,) = read_history(str(tmp_path / "_runner_history" / "table"))
    assert record["outcome"] == "committed" and "not registered" in record["catalog"]
    shown = run_cli("history", str(spec))
    assert "catalog glue lake.trips: not registered" in shown.stdout

    # the catalog answers: the next run registers (its schema did not change); the
    # endpoint, an ${env:NAME} reference, is resolved when it is used
    _spec(tmp_path, "${env:GLUE_ENDPOINT}")
    env = {**ENV, "GLUE_ENDPOINT": glue.meta.endpoint_url}
    _, summary = _run(spec, tmp_path, city_rows(range(5, 15), ts=2), env=env)
    assert (summary["catalog"]["done"], summary["catalog"]["version"]) == ("created", first + 1)
    entry = _entry(glue)
    storage = entry["StorageDescriptor"]
    assert entry["TableType"] == "EXTERNAL_TABLE"
    assert {"spark.sql.sources.provider": "delta", "table_type": "DELTA"}.items() <= entry[
        "Parameters"
    ].items()
    assert storage["Location"] == location
    assert storage["SerdeInfo"]["Parameters"] == {"path": location}
    columns = _columns(entry)
    assert list(columns) == [f.name for f in DeltaTable(str(table)).schema().fields]
    assert {k: columns[k] for k in DATA.names} == {"id": "bigint", "city": "string", "ts": "bigint"}

    # what others set on the entry (a description, a parameter) stays through updates
    glue.update_table(
        DatabaseName="lake",
        TableInput={
            **{k: entry[k] for k in ("Name", "TableType", "StorageDescriptor")},
            "Description": "trips by city",
            "Parameters": {**entry["Parameters"], "team": "geo"},
        },
    )
    # an added column, then a widened type: the entry follows each
    added = DATA.append(pa.field("qty", pa.int32()))
    _run(spec, tmp_path, city_rows(range(3), ts=3).assign(qty=7), added, env)
    entry = _entry(glue)
    assert _columns(entry)["qty"] == "int"
    assert (entry["Description"], entry["Parameters"]["team"]) == ("trips by city", "geo")
    widened = DATA.append(pa.field("qty", pa.int64()))
    _, summary = _run(spec, tmp_path, city_rows(range(3), ts=4).assign(qty=2**40), widened, env)
    assert summary["catalog"]["done"] == "updated"
    assert _columns(_entry(glue))["qty"] == "bigint"
    assert _entry(glue)["StorageDescriptor"]["Location"] == location

    # on demand, without a JVM: the entry is current
    no_spark(monkeypatch)
    synced = run_cli("sync", str(spec), env=env)
    assert synced.returncode == 0, synced.stderr
    latest = DeltaTable(str(table)).version()
    assert synced.stdout.startswith(f"glue lake.trips: unchanged, version {latest}, 9 column(s)")

    # a restore to the version before the added column: the entry follows the table back
    restored = run_cli("restore", str(spec), "--to", str(first + 1), env=env)
    assert restored.returncode == 0, restored.stderr
    assert "catalog: glue lake.trips: updated, version" in restored.stderr
    assert "qty" not in _columns(_entry(glue))


def test_sync_without_a_catalog_or_a_table(tmp_path, glue):
    plain = write_spec(tmp_path, city_target("upsert"), name="plain")
    done = run_cli("sync", str(plain))
    assert (done.returncode, done.stderr.strip()) == (
        2,
        f"error: {plain}: no target.catalog to register the table in; add one",
    )
    spec = _spec(tmp_path, glue.meta.endpoint_url)
    done = run_cli("sync", str(spec), env=ENV)
    assert done.returncode == 2 and "no Delta table at" in done.stderr
    # the spec's catalog section is checked without connecting
    text = yaml.safe_load(spec.read_text())
    text["target"]["catalog"] |= {"uri": "thrift://h:9083", "database": "Lake"}
    spec.write_text(yaml.safe_dump(text))
    done = run_cli("validate", str(spec))
    assert done.returncode == 2
    assert "target.catalog.uri: applies to a catalog of type hive, not glue" in done.stdout
    assert "target.catalog.database: 'Lake': use lowercase letters, digits and _" in done.stdout
