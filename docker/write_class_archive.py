"""Run one tiny pipeline locally, so that its JVM writes Java's class-data archive of the
classes a run loads (runner/jvm/java_cds.py) into the image user's cache as it exits."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from runner.pipeline.run import run_pipeline
from runner.spec import load_spec

with tempfile.TemporaryDirectory() as tmp:
    work = Path(tmp)
    (work / "in").mkdir()
    rows = pa.table({"id": [1, 2], "city": ["a", "b"], "ts": [1, 1], "v": ["x", "y"]})
    pq.write_table(rows, work / "in" / "rows.parquet")
    spec = {
        "name": "class-archive",
        "spark": {"master": "local[2]"},
        "sources": [{"name": "rows", "format": "parquet", "path": "in"}],
        "target": {
            "path": "table",
            "record_key": "id",
            "precombine_field": "ts",
            "key_generator": {"partition_fields": "city"},
            "index": {"buckets": 2},
        },
    }
    (work / "spec.yaml").write_text(yaml.safe_dump(spec))
    for _ in range(2):  # a load, then an upsert: the classes of both
        run_pipeline(load_spec(work / "spec.yaml"))
