"""delta-spark, the Delta protocol's reference reader, reads what delta-rs reads."""

from __future__ import annotations

import datetime as dt
import json
import struct
import uuid
import zlib
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable, TableFeatures, write_deltalake

from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.delta_spark import read_with_delta_spark
from tests.helpers import log_actions, write_batch, write_spec

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def _delta_rs_rows(path: Path) -> list[dict[str, Any]]:
    """Rows through delta-rs' DataFusion scan (deletion vectors honoured)."""
    return pa.table(DeltaTable(str(path)).scan().read_all()).to_pylist()


def _canonical(rows: list[dict[str, Any]]) -> list[tuple]:
    """Order-free rows: columns by name, timestamps as UTC instants."""

    def value(v: Any) -> Any:
        if isinstance(v, dt.datetime):  # Spark: naive local time; pyarrow: aware UTC
            return v.astimezone(dt.UTC)
        return v

    return sorted(
        (tuple((k, value(row[k])) for k in sorted(row)) for row in rows),
        key=repr,
    )


# ---------------------------------------------------------------- a hand-made deletion vector


def _z85(data: bytes) -> str:
    out = []
    for i in range(0, len(data), 4):
        n = int.from_bytes(data[i : i + 4], "big")
        chunk = []
        for _ in range(5):
            n, digit = divmod(n, 85)
            chunk.append(_Z85[digit])
        out += reversed(chunk)
    return "".join(out)


def _roaring_array(rows: list[int]) -> bytes:
    """The Delta protocol's RoaringBitmapArray ("portable") of a few rows below 65536.

    Written from the format, not by a library: magic, one 32-bit bucket (key 0) holding a
    portable 32-bit roaring bitmap of one array container (cookie 12346, no run containers).
    """
    values = sorted(rows)
    bitmap = struct.pack("<II", 12346, 1)  # cookie, container count
    bitmap += struct.pack("<HH", 0, len(values) - 1)  # container key, cardinality - 1
    bitmap += struct.pack("<I", 8 + 4 + 4)  # offset of the container's data
    bitmap += struct.pack(f"<{len(values)}H", *values)
    return struct.pack("<IQI", 1681511377, 1, 0) + bitmap


def _delete_rows_with_dv(table: Path, rows: list[int]) -> None:
    """Commit a deletion vector deleting `rows` of the table's only file (storage type u)."""
    delta = DeltaTable(str(table))
    delta.alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    delta = DeltaTable(str(table))
    (add,) = pa.table(delta.get_add_actions(flatten=True)).to_pylist()
    bitmap = _roaring_array(rows)
    dv_id = uuid.uuid4()
    (table / "dv").mkdir()
    (table / "dv" / f"deletion_vector_{dv_id}.bin").write_bytes(
        b"\x01" + struct.pack(">I", len(bitmap)) + bitmap + struct.pack(">I", zlib.crc32(bitmap))
    )
    now = int(dt.datetime.now(dt.UTC).timestamp() * 1000)
    file = {"path": add["path"], "partitionValues": {}, "size": add["size_bytes"]}
    descriptor = {
        "storageType": "u",
        "pathOrInlineDv": "dv" + _z85(dv_id.bytes),
        "offset": 1,
        "sizeInBytes": len(bitmap),
        "cardinality": len(rows),
    }
    stats = {"numRecords": add["num_records"], "tightBounds": False}
    actions = [
        {"commitInfo": {"timestamp": now, "operation": "DELETE"}},
        {"remove": {**file, "deletionTimestamp": now, "dataChange": True}},
        {
            "add": {
                **file,
                "modificationTime": now,
                "dataChange": True,
                "stats": json.dumps(stats),
                "deletionVector": descriptor,
            }
        },
    ]
    log = table / "_delta_log" / f"{delta.version() + 1:020d}.json"
    log.write_text("".join(json.dumps(a) + "\n" for a in actions))


def test_delta_spark_applies_deletion_vectors(needs_delta_spark, tmp_path):
    table = tmp_path / "dv"
    write_deltalake(str(table), pa.table({"k": list(range(10)), "s": list("abcdefghij")}))
    _delete_rows_with_dv(table, [1, 3])

    got = read_with_delta_spark(needs_delta_spark, table)
    assert sorted(r["k"] for r in got) == [0, 2, 4, 5, 6, 7, 8, 9]
    assert _canonical(got) == _canonical(_delta_rs_rows(table))


# ---------------------------------------------------------------- a runner-written table


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_delta_spark_reads_what_delta_rs_reads(needs_delta_spark, tmp_path, table_type):
    target = {
        "operation": "upsert",
        "table_type": table_type,
        "record_key": "id",
        "precombine_field": "ts",
        "delete_marker": "deleted",
        "key_generator": {"type": "SIMPLE", "partition_fields": "city"},
        "index": {"buckets": 2},
    }
    if table_type == "MERGE_ON_READ":  # deletion vectors, not whole-bucket rewrites
        target["compaction"] = {"max_delta_files": 100, "max_deleted_fraction": 0.9}
    spec = load_spec(write_spec(tmp_path, target))
    cities = ["ams", "sf", "nyc"]
    write_batch(
        tmp_path,
        pd.DataFrame(
            {
                "id": range(60),
                "city": [cities[i % 3] for i in range(60)],
                "ts": [1] * 60,
                "amount": [float(i) for i in range(60)],
                "deleted": [False] * 60,
            }
        ),
    )
    run_pipeline(spec, spark=needs_delta_spark)
    # updates 0..2, deletes 3 and 4, inserts 60
    write_batch(
        tmp_path,
        pd.DataFrame(
            {
                "id": [0, 1, 2, 3, 4, 60],
                "city": ["ams", "sf", "nyc", "ams", "sf", "ams"],
                "ts": [2] * 6,
                "amount": [100.0, 101.0, 102.0, 0.0, 0.0, 160.0],
                "deleted": [False, False, False, True, True, False],
            }
        ),
    )
    run_pipeline(spec, spark=needs_delta_spark)

    table = tmp_path / "table"
    if table_type == "MERGE_ON_READ":
        version = DeltaTable(str(table)).version()
        dvs = [a for a in log_actions(table, version) if (a.get("add") or {}).get("deletionVector")]
        assert dvs, "the second run wrote no deletion vector: this case would test nothing"
    by_delta_rs = _delta_rs_rows(table)
    assert sorted(r["id"] for r in by_delta_rs) == [0, 1, 2, *range(5, 61)]
    assert {r["id"]: r["amount"] for r in by_delta_rs}[1] == 101.0
    assert _canonical(read_with_delta_spark(needs_delta_spark, table)) == _canonical(by_delta_rs)
