"""The runner on a Spark standalone cluster (tests/cluster/conftest.py): executors in other
processes with their own working directories and Python workers, tables on moto's S3 API.

Every step is a new Spark application started as a user starts it: `runner run`, `runner
compact`, `runner expand` with `spark.master: spark://...` in the spec, and `spark-submit`
of the SparkApplication's main file (runner/driver.py, /opt/runner/driver.py in the
image). Batches are merged by executor tasks (`driver_merge.max_rows: 0`), not on the
driver. The results are compared with a pandas reference.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import yaml

from tests.cluster.conftest import Cluster, cluster_environment
from tests.helpers import write_batch
from tests.s3 import connector_jars, moto_server, s3_environment

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
RUNNER = [sys.executable, "-m", "runner"]
BUCKET = "cluster-tests"
DATA_COLUMNS = ["id", "city", "ts", "amount"]
CITIES = ("ams", "sf", "nyc")
RUN_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def s3() -> dict[str, str]:
    """A moto S3 API with one bucket; the environment that reaches it."""
    boto3 = pytest.importorskip("boto3")
    with moto_server() as endpoint:
        boto3.client("s3", endpoint_url=endpoint, **_keys()).create_bucket(Bucket=BUCKET)
        yield s3_environment(endpoint)


def _keys() -> dict[str, str]:
    return {"aws_access_key_id": "testing-key", "aws_secret_access_key": "testing-secret",
            "region_name": "us-east-1"}  # fmt: skip


def _batch(ids: range, ts: int, gone: frozenset[int] = frozenset()) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": list(ids),
            "city": [CITIES[i % 3] for i in ids],
            "ts": [ts] * len(ids),
            "amount": [float(i * ts) for i in ids],
            "gone": [i in gone for i in ids],
        }
    )


def _upserted(stored: pd.DataFrame, batch: pd.DataFrame) -> pd.DataFrame:
    """The batch's rows replace stored rows of the same key; `gone` rows delete them."""
    kept = stored[~stored["id"].isin(batch["id"])]
    return pd.concat([kept, batch[~batch["gone"]]])[DATA_COLUMNS]


def _normalized(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame[DATA_COLUMNS].astype({"id": "int64", "ts": "int64", "amount": "float64"})
    return out.sort_values("id").reset_index(drop=True)


def _spec(work: Path, name: str, cluster: Cluster, sources=None, **target) -> Path:
    spec = {
        "name": name,
        "spark": {
            "master": cluster.master,
            "conf": {
                "spark.executor.memory": "512m",
                "spark.cores.max": "2",
                "spark.driver.host": "127.0.0.1",
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "4",
            },
        },
        "sources": sources or [{"name": "src", "format": "parquet", "path": "in"}],
        "target": {
            "record_key": "id",
            "precombine_field": "ts",
            "key_generator": {"type": "SIMPLE", "partition_fields": "city"},
            "index": {"buckets": 2},
            "driver_merge": {"max_rows": 0},  # executor tasks merge, not the driver
            **target,
        },
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _run(command: list[str], work: Path, cluster: Cluster, s3: dict[str, str]) -> str:
    env = {**cluster_environment(), **s3}
    done = subprocess.run(
        command, cwd=work, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    if done.returncode != 0:
        pytest.fail(
            f"{' '.join(command)} exited {done.returncode}\n{done.stdout[-3000:]}\n"
            f"{done.stderr[-5000:]}\n{cluster.where_to_look()}"
        )
    return done.stdout


def _read(uri: str, work: Path, cluster: Cluster, s3: dict[str, str]) -> pd.DataFrame:
    out = _run([*RUNNER, "read", uri], work, cluster, s3)
    return _normalized(pd.DataFrame([json.loads(line) for line in out.splitlines()]))


def _summary(work: Path) -> dict:
    return json.loads((work / "summary.json").read_text())


def test_copy_on_write_table_on_s3_through_runner_and_spark_submit(cluster, s3, tmp_path):
    uri = f"s3://{BUCKET}/warehouse/cow"
    first = _batch(range(0, 60), ts=5)
    write_batch(tmp_path, first)
    spec = _spec(tmp_path, "cow", cluster, path=uri, operation="upsert", delete_marker="gone")
    _run([*RUNNER, "run", str(spec), "--summary-json", "summary.json"], tmp_path, cluster, s3)
    assert _summary(tmp_path)["inserted"] == 60

    # the SparkApplication's driver: spark-submit of the image's main file with the spec
    second = _batch(range(40, 100), ts=7, gone=frozenset({41, 45, 90}))
    write_batch(tmp_path, second)
    submit = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master", cluster.master,
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.executor.memory=512m",
        str(ROOT / "runner" / "driver.py"),
        str(spec), "--summary-json", "summary.json",
    ]  # fmt: skip
    _run(submit, tmp_path, cluster, s3)
    summary = _summary(tmp_path)
    assert summary["merged_on"].startswith("Spark executors"), summary["merged_on"]
    assert (summary["updated"], summary["deleted"], summary["inserted"]) == (18, 2, 39)

    expected = _normalized(_upserted(first[DATA_COLUMNS], second))
    pd.testing.assert_frame_equal(_read(uri, tmp_path, cluster, s3), expected, check_dtype=False)
    used = cluster.executor_dirs()
    assert all(used.values()), f"an application ran on one worker only: {used}"


def test_merge_on_read_and_compaction_on_s3_through_the_cluster(cluster, s3, tmp_path):
    uri = f"s3://{BUCKET}/warehouse/mor"
    spec = _spec(
        tmp_path, "mor", cluster, path=uri, operation="upsert", table_type="MERGE_ON_READ",
        delete_marker="gone", compaction={"max_delta_files": 10, "max_deleted_fraction": 0.9},
    )  # fmt: skip
    expected = pd.DataFrame(columns=DATA_COLUMNS)
    for batch in (_batch(range(0, 50), ts=1), _batch(range(30, 70), ts=2, gone=frozenset({31}))):
        write_batch(tmp_path, batch)
        _run([*RUNNER, "run", str(spec), "--summary-json", "summary.json"], tmp_path, cluster, s3)
        expected = _upserted(expected, batch)
    assert _summary(tmp_path)["buckets_with_deletion_vectors"] > 0
    pd.testing.assert_frame_equal(
        _read(uri, tmp_path, cluster, s3), _normalized(expected), check_dtype=False
    )
    compacted = json.loads(_run([*RUNNER, "compact", str(spec), "--json"], tmp_path, cluster, s3))
    assert compacted["deleted_rows"] == 20 and compacted["version"] is not None
    pd.testing.assert_frame_equal(
        _read(uri, tmp_path, cluster, s3), _normalized(expected), check_dtype=False
    )


def test_s3_sources_and_bucket_expansion_through_the_cluster(cluster, s3, tmp_path):
    """Spark's S3 connector on a cluster: executors read new files from S3 and, for the
    expansion, the table's files there, with the settings the driver's environment gave."""
    if not connector_jars():
        pytest.skip("Spark's S3 connector could not be fetched (see tests/s3.py)")
    landing, uri = f"s3://{BUCKET}/landing/grow", f"s3://{BUCKET}/warehouse/grow"
    root = landing[len("s3://") :]
    fs = pafs.S3FileSystem(
        access_key=s3["AWS_ACCESS_KEY_ID"],
        secret_key=s3["AWS_SECRET_ACCESS_KEY"],
        region=s3["AWS_REGION"],
        endpoint_override=s3["AWS_ENDPOINT_URL"].split("://", 1)[1],
        scheme="http",
    )
    rows = _batch(range(0, 300), ts=1)
    for name, part in (("a", rows[:200]), ("b", rows[200:])):
        table = pa.Table.from_pandas(part, preserve_index=False)
        pq.write_table(table, f"{root}/{name}.parquet", filesystem=fs)
    source = {"name": "src", "format": "parquet", "path": landing, "incremental": "new_files"}
    spec = _spec(tmp_path, "grow", cluster, [source], path=uri, operation="bulk_insert")
    _run([*RUNNER, "run", str(spec), "--summary-json", "summary.json"], tmp_path, cluster, s3)
    assert _summary(tmp_path)["sources"]["src"]["files"] == 2
    expanded = _run(
        [*RUNNER, "expand", str(spec), "--buckets", "4", "--json"], tmp_path, cluster, s3
    )
    grown = json.loads(expanded)["result"]
    assert grown["rows"] == 300 and grown["version"] == 2
    pd.testing.assert_frame_equal(
        _read(uri, tmp_path, cluster, s3), _normalized(rows), check_dtype=False
    )
    inspected = json.loads(_run([*RUNNER, "inspect", uri, "--json"], tmp_path, cluster, s3))
    assert inspected["buckets_default"] == 4 and inspected["rows"] == 300
    for partition in inspected["partitions"]:  # every new bucket holds rows
        assert [b["bucket"] for b in partition["bucket_detail"] if b["rows"]] == [0, 1, 2, 3]
    used = cluster.executor_dirs()
    assert all(used.values()), f"an application ran on one worker only: {used}"


def test_a_kafka_source_read_by_the_cluster_s_executors(cluster, s3, tmp_path, kafka_broker):
    """Spark's Kafka connector reaches the executors with spark.jars; each of the topic's
    partitions is a task, and the offsets read are the ones the commit records."""
    topic = kafka_broker.unique_topic("cluster")
    kafka_broker.create_topic(topic, partitions=4)
    rows = _batch(range(0, 80), ts=3)
    values = [json.dumps(r) for r in rows[DATA_COLUMNS].to_dict("records")]
    kafka_broker.produce(topic, values, partitions=[i % 4 for i in range(80)])
    kafka = {"bootstrap_servers": kafka_broker.bootstrap, "topics": [topic]}
    source = {
        "name": "events",
        "format": "kafka",
        "schema": "id bigint, city string, ts bigint, amount double",
        "incremental": {"since": "last"},
        "kafka": kafka,
    }
    uri = f"s3://{BUCKET}/warehouse/kafka"
    spec = _spec(tmp_path, "kafka", cluster, sources=[source], path=uri, operation="upsert")
    _run([*RUNNER, "run", str(spec), "--summary-json", "summary.json"], tmp_path, cluster, s3)
    summary = _summary(tmp_path)
    assert summary["inserted"] == 80
    ends = {str(p): o for p, o in kafka_broker.end_offsets(topic).items()}
    assert summary["sources"]["events"]["until"] == {topic: ends}
    table = _read(uri, tmp_path, cluster, s3)
    assert sorted(table["id"]) == list(range(80))
