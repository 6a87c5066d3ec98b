"""A real Hive Metastore on 127.0.0.1 for tests (target.catalog type hive).

`hive_metastore` (module fixture) starts Hive 2.3.10's metastore (`HiveMetaStore -p PORT`)
from the jars pyspark ships (hive-metastore-2.3.10, Derby, DataNucleus, hadoop-client) on a
free port, with an embedded Derby database and a warehouse in a throwaway directory (the
schema made at start: datanucleus.schema.autoCreateAll), and yields its `thrift://` URI; on
leaving it stops the process and deletes the directory. Its output goes to `console.log`
there; a metastore that does not start fails the test with its tail.

Why 2.3.10 and not the standalone metastore 4.x (org.apache.hive:hive-standalone-metastore-
server 4.0.1 also serves runner/catalog/hive.py): Spark 4.2's built-in Hive client is 2.3.10,
and it reads a table with `get_table`, which Hive 4's metastore no longer has ("Invalid
method name: 'get_table'"), so a test's Spark session could not read the entry by name
(docs/catalogs.md says what a Hive 4 metastore needs on the Spark side). These jars need no
fetch: they are pyspark's own.

`read_by_name(uri, sql)` runs a query in a Spark session of its own (a subprocess: the
session catalog and extensions are static settings) with the Hive session catalog at `uri`
and delta-spark's catalog and extension, and returns the rows as JSON objects.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest

from tests.delta_spark import EXTENSION, delta_jars, delta_spark_problem
from tests.kafka_server import die_with_parent, read_log, terminate
from tests.s3 import free_port

START_TIMEOUT_S = 90
JARS = Path(pyspark.__file__).parent / "jars"
SETTINGS = {
    "javax.jdo.option.ConnectionURL": "jdbc:derby:;databaseName={base}/db;create=true",
    "datanucleus.schema.autoCreateAll": "true",
    "hive.metastore.schema.verification": "false",
    "hive.metastore.warehouse.dir": "{base}/warehouse",
    "hive.async.log.enabled": "false",  # its async logger needs LMAX Disruptor, not in pyspark
}
READER = """\
import json, sys
from runner.jvm.session import spark_session
from runner.spec.model import SparkSettings
uri, jars, extension, sql = sys.argv[1:]
conf = {
    "spark.sql.catalogImplementation": "hive",
    "spark.hadoop.hive.metastore.uris": uri,
    "spark.sql.extensions": extension,
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.shuffle.partitions": "1",
    "spark.ui.enabled": "false",
}
# the runner's own start (its class-data archive, the quick JIT): seconds faster
spark = spark_session(SparkSettings("local[1]", conf), "hive-reader", jars.split(","), True)
print(json.dumps([row.asDict() for row in spark.sql(sql).collect()]))
"""


@contextlib.contextmanager
def running_metastore() -> Iterator[str]:
    """A metastore started from pyspark's jars; its URI. Stopped, its directory deleted, on
    leaving."""
    base = Path(tempfile.mkdtemp(prefix="runner-hms-"))
    console = base / "console.log"
    process = None
    try:
        port = free_port()
        settings = [f"-D{k}={v.format(base=base)}" for k, v in SETTINGS.items()]
        java = (
            os.path.join(os.environ["JAVA_HOME"], "bin", "java")
            if "JAVA_HOME" in os.environ
            else "java"
        )
        with console.open("ab") as out:
            process = subprocess.Popen(
                [
                    java,
                    "-Xmx384m",
                    *settings,
                    "-cp",
                    f"{JARS}/*",
                    "org.apache.hadoop.hive.metastore.HiveMetaStore",
                    "-p",
                    str(port),
                ],
                cwd=base,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
        _wait_until_listening(process, port, console)
        _first_call(port, base)
        yield f"thrift://127.0.0.1:{port}"
    finally:
        terminate(process)
        shutil.rmtree(base, ignore_errors=True)


def _wait_until_listening(process: subprocess.Popen[bytes], port: int, console: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(
        f"the Hive Metastore did not answer on 127.0.0.1:{port} (exit {process.poll()})\n"
        + read_log(console)[-3000:]
    )


def _first_call(port: int, where: Path) -> None:
    """A table `scratch.scratch` registered, waited for as long as it takes: the metastore
    creates its Derby tables on the first calls that need them, which took past the
    runner's 20 s answer limit on a machine busy with the rest of the suite."""
    from runner.catalog import hive
    from runner.catalog.entry import TableEntry
    from runner.spec.model import CatalogSpec

    uri = f"thrift://127.0.0.1:{port}"
    entry = TableEntry((where / "scratch").as_uri(), (("id", "bigint"),), {})
    limit = hive.READ_TIMEOUT_MS
    hive.READ_TIMEOUT_MS = START_TIMEOUT_S * 1000
    try:
        hive.sync_hive(CatalogSpec("hive", "scratch", "scratch", uri=uri), entry)
    finally:
        hive.READ_TIMEOUT_MS = limit


@pytest.fixture(scope="module")
def hive_metastore() -> Iterator[str]:
    """A running Hive Metastore on 127.0.0.1, holding only `scratch.scratch` (_first_call);
    its thrift:// URI."""
    from runner.jvm.session import java_problem

    problem = java_problem()
    if problem:
        pytest.skip(f"no Hive Metastore: it needs Java: {problem}")
    with contextlib.ExitStack() as stack:
        try:
            uri = stack.enter_context(running_metastore())
        except RuntimeError as exc:
            pytest.fail(str(exc), pytrace=False)
        yield uri


def read_by_name(uri: str, sql: str, where: Path) -> list[dict[str, Any]]:
    """`sql`'s rows from a Spark session of its own reading the metastore at `uri` with
    delta-spark's catalog, run in `where` (its spark-warehouse goes there); skips when
    delta-spark's jars cannot be had."""
    jars = delta_jars()
    if not jars:
        pytest.skip(f"delta-spark unavailable: {delta_spark_problem()}")
    done = subprocess.run(
        [sys.executable, "-c", READER, uri, ",".join(jars), EXTENSION, sql],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        cwd=where,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
