"""Small builders for tests: specs on disk, input batches, tables read back with delta-rs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from deltalake import DeltaTable

# A change feed's rows (target.cdc): the key, its partition, two columns, the sequence and
# the operation (c/u/d)
CHANGE_FEED_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("city", pa.string()),
        ("name", pa.string()),
        ("amount", pa.float64()),
        ("lsn", pa.int64()),
        ("op", pa.string()),
    ]
)


def write_spec(directory: Path, target: dict[str, Any], name: str = "t", **extra: Any) -> Path:
    """A spec reading parquet from <directory>/in into <directory>/table."""
    spec = {
        "name": name,
        "sources": [{"name": "src", "format": "parquet", "path": "in"}],
        "target": {"path": "table", **target},
        **extra,
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def city_target(operation: str, **extra: Any) -> dict[str, Any]:
    """A target keyed by `id`, partitioned by `city`, 4 buckets, ordered by `ts`."""
    return {
        "operation": operation,
        "record_key": "id",
        "precombine_field": "ts",
        "key_generator": {"partition_fields": "city"},
        "index": {"buckets": 4},
        **extra,
    }


def city_rows(ids: Any, ts: int, city: list[str] | None = None) -> pd.DataFrame:
    """Rows for city_target: odd ids in "ams", even ones in "sf" unless `city` says."""
    ids = list(ids)
    return pd.DataFrame(
        {
            "id": ids,
            "city": city or ["ams" if i % 2 else "sf" for i in ids],
            "ts": [ts] * len(ids),
            "v": [f"v{ts}-{i}" for i in ids],
        }
    )


def city_content(path: Path) -> pd.DataFrame:
    """A city_target table's rows (delta-rs), sorted by id, without the meta columns."""
    frame = read_table(path)
    return frame[["id", "city", "ts", "v"]].sort_values("id").reset_index(drop=True)


def keys_target(directory: Path, key_generator: dict[str, Any], record_key: Any):
    """The Target of a minimal spec with this key generator, loaded (and so validated)."""
    from runner.spec import load_spec

    spec = {
        "name": "k",
        "sources": [{"name": "s", "format": "json", "path": "in"}],
        "target": {
            "path": "t",
            "operation": "insert",
            "record_key": record_key,
            "key_generator": key_generator,
            "index": {"buckets": 8},
        },
    }
    (directory / "k.yaml").write_text(yaml.safe_dump(spec))
    return load_spec(directory / "k.yaml").target


def write_batch(directory: Path, frame: pd.DataFrame, schema: pa.Schema | None = None) -> None:
    """Replace the input of the next run with this frame."""
    inp = directory / "in"
    inp.mkdir(exist_ok=True)
    for old in inp.glob("*.parquet"):
        old.unlink()
    table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
    pq.write_table(table, inp / "batch.parquet")


def read_table(path: Path) -> pd.DataFrame:
    """The table's rows through delta-rs: scan() where deletion vectors may exist (a
    MERGE_ON_READ table), else to_pyarrow_table() (scan() fails on a file path with ':')."""
    table = DeltaTable(str(path))
    if "deletionVectors" in (table.protocol().reader_features or []):
        return pa.table(table.scan().read_all()).to_pandas()
    return table.to_pyarrow_table().to_pandas()


def log_actions(table: Path, version: int) -> list[dict]:
    """The add/remove actions of one commit, straight from the Delta log JSON."""
    import json

    log = table / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def live_paths(table: Path, version: int | None = None) -> set[str]:
    """Relative paths of the table's live files (at a version), as the Delta log names them."""
    actions = pa.table(DeltaTable(str(table), version=version).get_add_actions(flatten=True))
    return set(actions.column("path").to_pylist())


def file_bytes(root: Path) -> dict[str, bytes]:
    """Every file under root with its bytes: what a "left as it was" check compares."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def assert_stale_writer_refused(stale: Any) -> None:
    """A writer that read the table before an expansion (`stale`, its TableSnapshot) cannot
    commit a rewrite of one of the files it read: the layout changed under it."""
    import pytest

    from runner.delta.transaction import Commit, commit
    from runner.errors import CommitConflictError
    from runner.pipeline.commit_stage import RunRule

    some_file = stale.files()[0]
    rewrite = Commit(
        writer="run",
        operation="WRITE",
        metadata={"operation": "upsert"},
        removed=(some_file,),
        buckets=frozenset({(some_file.partition_path, some_file.bucket)}),
        schema=stale.arrow_schema(),
    )
    with pytest.raises(CommitConflictError, match=r"settings .* changed"):
        commit(stale, rewrite, RunRule())


# MERGE_ON_READ with thresholds no bucket reaches: every change goes through deletion vectors
NEVER_REWRITE = {"max_delta_files": 1000, "max_deleted_fraction": 1.0}


def merge_place(merged_on: str) -> dict[str, Any]:
    """Target settings that merge a batch there: "driver" (the default) or "spark"."""
    return {"driver_merge": {"max_rows": 0}} if merged_on == "spark" else {}


def check_merge_place(summary: Any, merged_on: str) -> None:
    expected = "the driver" if merged_on == "driver" else "Spark executors"
    assert summary.merged_on.startswith(expected), summary.merged_on


def assert_rows_not_shuffled(frame: Any, stored_columns: list[str]) -> None:
    """A rehash's Spark plan (runner/actions/rehash_bitmaps.py): its scan reads none of
    `stored_columns` (the rows stay in their files), and its one exchange carries partial
    bitmaps, after the aggregate that folds each task's rows into them."""
    plan = frame._jdf.queryExecution().executedPlan().toString()
    read = [line for line in plan.splitlines() if "ReadSchema" in line]
    assert read and not any(f"{c}:" in line for line in read for c in stored_columns), plan
    assert plan.count("Exchange ") == 1 and "partial_bit_or" in plan, plan


def run_record(**fields: Any) -> Any:
    """A RunRecord from flat fields, as the history names them: the figures (rows_read,
    inserted, bytes_written...) go into its typed figures."""
    from runner.observe.record import RunRecord
    from runner.summary import VerdictFigures, WriteFigures

    def part(kind: Any) -> Any:
        return kind(**{k: fields.pop(k) for k in list(fields) if k in kind.__dataclass_fields__})

    verdicts, write = part(VerdictFigures), part(WriteFigures)
    return RunRecord(**fields, verdicts=verdicts, write=write)
