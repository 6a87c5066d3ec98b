"""target.catalog with a Hive Metastore (a real one on 127.0.0.1, tests/hive_metastore.py):
the table's entry after a run that finds the metastore down, after the next run, after an
added column and a widened type; `runner sync`; the table read by name from a Spark session
of its own with delta-spark's catalog (the rows, and the column the schema change added).

The runs go through the CLI in-process on the tests' session (tests/cli_in_process.py).
"""

from __future__ import annotations

import json

import pyarrow as pa
from deltalake import DeltaTable

from runner.observe.history import read as read_history
from tests.cli_in_process import no_spark, run_cli, shared_session
from tests.helpers import city_rows, city_target, write_batch, write_spec
from tests.hive_metastore import hive_metastore, read_by_name
from tests.s3 import free_port

__all__ = ["hive_metastore"]

DATA = pa.schema([("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64())])


def _spec(tmp_path, uri: str):
    catalog = {"type": "hive", "uri": uri, "database": "lake", "table": "trips"}
    return write_spec(
        tmp_path, {**city_target("upsert", schema_evolution="widen"), "catalog": catalog}
    )


def _run(spec, tmp_path, frame, schema=DATA, env=None):
    write_batch(tmp_path, frame, schema)
    summary = tmp_path / "summary.json"
    done = run_cli("run", str(spec), "--summary-json", str(summary), env=env)
    assert done.returncode == 0, done.stderr
    return done, json.loads(summary.read_text())


def _entry(uri: str):
    """The table as the metastore holds it, through Hive's Thrift API."""
    from pymetastore.hive_metastore import ThriftHiveMetastore
    from pymetastore.hive_metastore.ttypes import GetTableRequest
    from thrift.protocol.TBinaryProtocol import TBinaryProtocol
    from thrift.transport import TSocket, TTransport

    host, port = uri.removeprefix("thrift://").split(":")
    transport = TTransport.TBufferedTransport(TSocket.TSocket(host, int(port)))
    transport.open()
    try:
        client = ThriftHiveMetastore.Client(TBinaryProtocol(transport))
        return client.get_table_req(GetTableRequest(dbName="lake", tblName="trips")).table
    finally:
        transport.close()


def _columns(entry) -> dict[str, str]:
    return {c.name: c.type for c in entry.sd.cols}


def test_hive_entry_follows_the_table_and_spark_reads_it_by_name(
    tmp_path, spark, monkeypatch, hive_metastore
):
    shared_session(monkeypatch, spark)
    table = tmp_path / "table"
    location = table.as_uri()

    # the metastore is down (a closed port): the run commits, warns, and records it
    spec = _spec(tmp_path, f"thrift://127.0.0.1:{free_port()}")
    done, summary = _run(spec, tmp_path, city_rows(range(10), ts=1))
    first = summary["version"]
    assert first is not None and DeltaTable(str(table)).version() == first
    failed = summary["catalog"]
    assert failed["done"] == "failed" and "Could not connect" in failed["error"]
    assert "catalog_not_registered" in done.stderr
    assert "catalog      hive lake.trips: not registered" in done.stdout
    (record,) = read_history(str(tmp_path / "_runner_history" / "table"))
    assert record["outcome"] == "committed" and "not registered" in record["catalog"]

    # the metastore answers: the next run registers, creating the database; the URI, an
    # ${env:NAME} reference, is resolved when it is used
    _spec(tmp_path, "${env:HMS_URI}")
    env = {"HMS_URI": hive_metastore}
    _, summary = _run(spec, tmp_path, city_rows(range(5, 15), ts=2), env=env)
    assert (summary["catalog"]["done"], summary["catalog"]["version"]) == ("created", first + 1)
    assert summary["catalog"]["database_created"] is True
    entry = _entry(hive_metastore)
    assert entry.tableType == "EXTERNAL_TABLE"
    wanted = {"spark.sql.sources.provider": "delta", "table_type": "DELTA", "EXTERNAL": "TRUE"}
    assert wanted.items() <= entry.parameters.items()
    assert entry.sd.location == "file:" + str(table)  # the metastore's form of file:///...
    assert entry.sd.serdeInfo.parameters == {"path": location}
    columns = _columns(entry)
    assert list(columns) == [f.name for f in DeltaTable(str(table)).schema().fields]
    assert {k: columns[k] for k in DATA.names} == {"id": "bigint", "city": "string", "ts": "bigint"}

    # an added column, then a widened type: the entry follows each
    added = DATA.append(pa.field("qty", pa.int32()))
    _, summary = _run(spec, tmp_path, city_rows(range(3), ts=3).assign(qty=7), added, env)
    assert summary["catalog"]["done"] == "updated"
    assert _columns(_entry(hive_metastore))["qty"] == "int"
    widened = DATA.append(pa.field("qty", pa.int64()))
    _, summary = _run(spec, tmp_path, city_rows(range(3), ts=4).assign(qty=2**40), widened, env)
    assert summary["catalog"]["done"] == "updated"
    assert _columns(_entry(hive_metastore))["qty"] == "bigint"

    # on demand, without a JVM: the entry is current
    no_spark(monkeypatch)
    synced = run_cli("sync", str(spec), env=env)
    assert synced.returncode == 0, synced.stderr
    latest = DeltaTable(str(table)).version()
    assert synced.stdout.startswith(f"hive lake.trips: unchanged, version {latest}, 9 column(s)")

    # by name, from Spark with delta-spark's catalog: the rows and the added column
    rows = read_by_name(hive_metastore, "SELECT id, qty FROM lake.trips ORDER BY id", tmp_path)
    assert rows == [{"id": i, "qty": 2**40 if i < 3 else None} for i in range(15)]


def test_a_metastore_uri_is_thrift_host_port(tmp_path):
    spec = _spec(tmp_path, "http://hms:9083")
    done = run_cli("validate", str(spec))
    assert done.returncode == 2
    assert "target.catalog.uri: 'http://hms:9083': use thrift://host:port" in done.stdout
