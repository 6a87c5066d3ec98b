"""Change feeds (target.cdc) applied as SCD type 1 and type 2, against a reference written
one event at a time, on both table types, merged on the driver and in a Spark write job."""

from __future__ import annotations

import itertools
import json
import random

import pandas as pd
import pytest
from click.testing import CliRunner

from runner.actions.compact import compact_table
from runner.actions.expand import ExpansionRequest, expand_table
from runner.cli import cli
from runner.commands.read import read_rows
from runner.errors import UserError
from runner.pipeline.context import RunOptions
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.helpers import (
    CHANGE_FEED_SCHEMA,
    NEVER_REWRITE,
    check_merge_place,
    merge_place,
    read_table,
    write_batch,
    write_spec,
)

CITIES = ["ams", "sf", "nyc"]
DATA = ["id", "city", "name", "amount"]
HISTORY = ["valid_from", "valid_to", "is_current"]


def _target(table_type: str, merged_on: str, scd: int, ignore_nulls: bool = False) -> dict:
    return {
        "operation": "upsert",
        "table_type": table_type,
        **({"compaction": NEVER_REWRITE} if table_type == "MERGE_ON_READ" else {}),
        **merge_place(merged_on),
        "record_key": "id",
        "key_generator": {"type": "SIMPLE", "partition_fields": "city"},
        "cdc": {
            "sequence_by": "lsn",
            "operation_column": "op",
            "ignore_null_updates": ignore_nulls,
        },
        "scd": {"type": scd},
        "index": {"buckets": 4},
    }


def _value(v):
    return None if v is None or (isinstance(v, float) and pd.isna(v)) else v


class Reference:
    """Per key, the events the table's state stands for, materialized (nulls filled), in
    sequence order; a batch is applied one event at a time."""

    def __init__(self, scd: int, ignore_nulls: bool) -> None:
        self.scd, self.ignore_nulls = scd, ignore_nulls
        self.events: dict[int, list[dict]] = {}
        self.late = 0

    def apply(self, batch: pd.DataFrame) -> None:
        records = [{k: _value(v) for k, v in r.items()} for r in batch.to_dict("records")]
        by_key: dict[int, dict[int, dict]] = {}
        for row in records:  # one event per (key, lsn): the batch's last
            by_key.setdefault(row["id"], {})[row["lsn"]] = row
        for key, events in by_key.items():
            known = self.events.get(key, [])
            newest = max((e["lsn"] for e in known), default=None)
            fresh = [e for lsn, e in events.items() if lsn not in {k["lsn"] for k in known}]
            late = [e for e in fresh if newest is not None and e["lsn"] < newest]
            self.late += len(late)
            if self.scd == 1:
                fresh = [e for e in fresh if e not in late]
            merged = sorted(known + [dict(e) for e in fresh], key=lambda e: e["lsn"])
            if self.ignore_nulls:
                for before, event in itertools.pairwise(merged):
                    if event["op"] == "d" or before["op"] == "d":
                        continue
                    for f in ("name", "amount"):
                        if event[f] is None:
                            event[f] = before[f]
            self.events[key] = merged[-1:] if self.scd == 1 else merged

    def frame(self) -> pd.DataFrame:
        rows = []
        for events in self.events.values():
            for i, e in enumerate(events):
                if e["op"] == "d":
                    continue
                row = {f: e[f] for f in [*DATA, "lsn"]}
                if self.scd == 2:
                    end = events[i + 1]["lsn"] if i + 1 < len(events) else None
                    row.update(valid_from=e["lsn"], valid_to=end, is_current=end is None)
                rows.append(row)
        columns = [*DATA, "lsn", *(HISTORY if self.scd == 2 else [])]
        return _normalized(pd.DataFrame(rows, columns=columns), self.scd)


def _normalized(frame: pd.DataFrame, scd: int) -> pd.DataFrame:
    columns = [*DATA, "lsn", *(HISTORY if scd == 2 else [])]
    out = frame[columns].sort_values(["id", "lsn"]).reset_index(drop=True)
    out = out.astype({"id": "int64", "lsn": "int64", "amount": "float64"})
    if scd == 2:
        out = out.astype({"valid_from": "int64", "valid_to": "float64", "is_current": "bool"})
    return out.astype({"name": "object"}).where(out.notna(), None)


def _feed(rng: random.Random, n: int, lsns: range) -> pd.DataFrame:
    """Events in shuffled order: inserts, updates, deletes, re-deliveries of an event."""
    rows = []
    for _ in range(n):
        key = rng.randrange(16)
        rows.append(
            {
                "id": key,
                "city": CITIES[key % 3],
                "name": None if rng.random() < 0.3 else f"n{rng.randrange(1000)}",
                "amount": None if rng.random() < 0.3 else float(rng.randrange(100)),
                "lsn": rng.choice(lsns),
                "op": "d" if rng.random() < 0.2 else rng.choice("cu"),
            }
        )
    rows += rng.sample(rows, 5)  # delivered twice
    rng.shuffle(rows)
    return pd.DataFrame(rows)


@pytest.mark.parametrize("scd", [1, 2])
def test_a_change_feed_matches_the_reference(spark, tmp_path, table_type, merged_on, scd):
    rng = random.Random(f"cdc-{scd}-{table_type}-{merged_on}")
    spec = load_spec(write_spec(tmp_path, _target(table_type, merged_on, scd)))
    reference = Reference(scd, ignore_nulls=False)
    # the sequence ranges overlap: later batches bring events older than the table's state
    for step, lsns in enumerate([range(0, 60), range(30, 90), range(0, 120)]):
        batch = _feed(rng, 40, lsns)
        write_batch(tmp_path, batch, CHANGE_FEED_SCHEMA)
        late_before = reference.late
        summary = run_pipeline(spec, spark=spark)
        reference.apply(batch)
        check_merge_place(summary, merged_on)
        assert summary.scd_type == scd
        assert summary.late_events == reference.late - late_before
        pd.testing.assert_frame_equal(
            _normalized(read_table(tmp_path / "table"), scd),
            reference.frame(),
            check_dtype=False,
            obj=f"SCD type {scd} after batch {step}",
        )
    assert reference.late > 0, "the feed brought late events"
    if table_type == "MERGE_ON_READ":
        assert summary.buckets_with_deletion_vectors > 0


@pytest.mark.parametrize("scd", [1, 2])
def test_ignore_null_updates_keeps_the_values_before(spark, tmp_path, scd):
    spec = load_spec(write_spec(tmp_path, _target("COPY_ON_WRITE", "driver", scd, True)))
    rng = random.Random(f"nulls-{scd}")
    reference = Reference(scd, ignore_nulls=True)
    for lsns in [range(0, 60), range(20, 100)]:
        batch = _feed(rng, 40, lsns)
        write_batch(tmp_path, batch, CHANGE_FEED_SCHEMA)
        run_pipeline(spec, spark=spark)
        reference.apply(batch)
        pd.testing.assert_frame_equal(
            _normalized(read_table(tmp_path / "table"), scd), reference.frame(), check_dtype=False
        )


def _events(*events: tuple[int, str, int, str | None]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"id": key, "city": "ams", "name": name, "amount": 1.0, "lsn": lsn, "op": op}
            for key, op, lsn, name in events
        ]
    )


@pytest.mark.parametrize("table_type_", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_late_event_never_brings_a_deleted_key_back(spark, tmp_path, table_type_):
    spec = load_spec(write_spec(tmp_path, _target(table_type_, "driver", 1)))
    batches = [
        _events((1, "c", 5, "first"), (2, "c", 5, "two")),
        _events((1, "d", 10, None), (3, "d", 10, None)),  # 3 was never there
        _events((1, "u", 7, "late"), (3, "c", 4, "late")),  # older than the deletes
    ]
    for batch in batches:
        write_batch(tmp_path, batch, CHANGE_FEED_SCHEMA)
        summary = run_pipeline(spec, spark=spark)
    assert read_table(tmp_path / "table")["id"].tolist() == [2]
    assert (summary.late_events, summary.inserted, summary.updated) == (2, 0, 0)
    write_batch(tmp_path, _events((1, "c", 11, "again")), CHANGE_FEED_SCHEMA)
    run_pipeline(spec, spark=spark)  # newer than the delete: the key is back
    assert sorted(read_table(tmp_path / "table")["name"]) == ["again", "two"]


def test_history_as_of_a_business_time(spark, tmp_path):
    spec = load_spec(write_spec(tmp_path, _target("MERGE_ON_READ", "driver", 2)))
    write_batch(
        tmp_path,
        _events((1, "c", 10, "a"), (1, "u", 20, "b"), (2, "c", 15, "x")),
        CHANGE_FEED_SCHEMA,
    )
    run_pipeline(spec, spark=spark)
    write_batch(tmp_path, _events((1, "u", 15, "late"), (2, "d", 30, None)), CHANGE_FEED_SCHEMA)
    summary = run_pipeline(spec, spark=spark)
    assert (summary.late_events, summary.versions_closed, summary.deleted) == (1, 3, 1)

    def names_at(moment: int) -> dict[int, str]:
        rows = read_rows(spec.target.path, as_of_business_time=str(moment)).rows
        return dict(
            zip(rows.column("id").to_pylist(), rows.column("name").to_pylist(), strict=True)
        )

    assert names_at(9) == {}
    assert names_at(12) == {1: "a"}
    assert names_at(15) == {1: "late", 2: "x"}
    assert names_at(29) == {1: "b", 2: "x"}
    assert names_at(30) == {1: "b"}

    # the command: JSON lines of the versions valid then; a value the sequence cannot hold
    result = CliRunner().invoke(cli, ["read", spec.target.path, "--as-of-business-time", "15"])
    assert result.exit_code == 0, result.output
    assert sorted(json.loads(line)["name"] for line in result.stdout.splitlines()) == [
        "late",
        "x",
    ]
    bad = CliRunner().invoke(cli, ["read", spec.target.path, "--as-of-business-time", "soon"])
    assert "is not a int64 like the table's lsn" in str(bad.exception)


def test_as_of_business_time_needs_a_history(spark, tmp_path):
    spec = load_spec(write_spec(tmp_path, _target("COPY_ON_WRITE", "driver", 1)))
    write_batch(tmp_path, _events((1, "c", 10, "a")), CHANGE_FEED_SCHEMA)
    run_pipeline(spec, spark=spark)
    with pytest.raises(UserError, match="keeps no history"):
        read_rows(spec.target.path, as_of_business_time="10")


def test_a_batch_run_again_changes_nothing(spark, tmp_path):
    spec = load_spec(write_spec(tmp_path, _target("COPY_ON_WRITE", "driver", 2)))
    write_batch(tmp_path, _events((1, "c", 10, "a"), (1, "u", 20, "b")), CHANGE_FEED_SCHEMA)
    first = run_pipeline(spec, spark=spark, options=RunOptions(batch_id="b1"))
    again = run_pipeline(spec, spark=spark, options=RunOptions(batch_id="b1"))
    assert again.batch_already_committed and again.version is None
    assert first.version is not None
    assert len(read_table(tmp_path / "table")) == 2
    # the same events without a batch id are re-deliveries: nothing changes either
    redelivered = run_pipeline(spec, spark=spark)
    assert (redelivered.version, redelivered.duplicates_dropped) == (None, 2)


def test_compaction_keeps_the_deleted_keys_remembered_and_expansion_refuses(spark, tmp_path):
    spec = load_spec(write_spec(tmp_path, _target("MERGE_ON_READ", "driver", 1)))
    batches = [
        _events(*[(k, "c", 5, f"k{k}") for k in range(12)]),
        _events(*[(k, "d", 10, None) for k in range(0, 12, 2)]),  # every other key deleted
    ]
    for batch in batches:
        write_batch(tmp_path, batch, CHANGE_FEED_SCHEMA)
        run_pipeline(spec, spark=spark)
    compacted = compact_table(spec, spark=spark)
    assert compacted.buckets > 0
    with pytest.raises(UserError, match="remembers deleted keys"):
        expand_table(spec, ExpansionRequest(8, "multiple_rehash"), spark=spark)
    write_batch(tmp_path, _events(*[(k, "u", 7, "late") for k in range(12)]), CHANGE_FEED_SCHEMA)
    summary = run_pipeline(spec, spark=spark)
    assert (summary.late_events, summary.updated) == (6, 6)  # the deleted ones are late
    assert sorted(read_table(tmp_path / "table")["id"]) == list(range(1, 12, 2))
