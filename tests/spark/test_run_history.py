"""The run history: every run (committed, nothing new, failed), expansion and compaction
leaves one record beside the table; a dry run counts what a run would commit and leaves
nothing; a history that cannot be written never fails a run."""

from __future__ import annotations

import json
import time

import pytest
import structlog
import yaml
from click.testing import CliRunner
from deltalake import DeltaTable

from runner.actions.compact import CompactSummary, compact_table
from runner.actions.expand import ExpandSummary, ExpansionRequest, expand_table
from runner.cli import cli
from runner.errors import BadRecordsError
from runner.observe import history
from runner.observe.observed import Observer
from runner.observe.record import now
from runner.pipeline.context import RunOptions
from runner.spec import load_spec
from tests.helpers import city_content, city_rows, city_target, file_bytes, write_batch


def _spec(tmp_path, name="t", **extra):
    spec = {
        "name": name,
        "sources": [{"name": "src", "format": "parquet", "path": "in", "incremental": "new_files"}],
        "target": {"path": "table", **city_target("upsert", table_type="MERGE_ON_READ")},
        **extra,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return load_spec(path)


def test_each_run_and_service_leaves_one_record(spark, tmp_path):
    spec = _spec(tmp_path)
    observer = Observer(spec)
    write_batch(tmp_path, city_rows(range(20), ts=1))
    v1 = observer.run(spark).version
    assert v1 is not None
    assert observer.run(spark).nothing_new

    # a dry run merges for real and counts, but writes nothing and moves no checkpoint
    write_batch(tmp_path, city_rows(range(10, 30), ts=2))
    table = tmp_path / "table"
    files_before = file_bytes(table)
    dry = observer.run(spark, RunOptions(dry_run=True))
    assert dry.dry_run and dry.version is None
    assert (dry.inserted, dry.updated, dry.files_added) == (10, 10, dry.files_added)
    assert dry.files_added > 0 and dry.bytes_written > 0
    assert file_bytes(table) == files_before
    assert not list(tmp_path.glob("_runner_dry_run*"))
    real = observer.run(spark)  # the same batch: the dry run moved no checkpoint
    assert (real.version, real.inserted, real.updated) == (v1 + 1, dry.inserted, dry.updated)
    assert real.files_added == dry.files_added
    assert real.bytes_written == pytest.approx(dry.bytes_written, rel=0.01)  # other instants

    # an expectation that fails the run: recorded as failed, with its error and stage
    rules = [{"name": "ts_positive", "sql": "ts > 0", "action": "fail"}]
    strict = Observer(_spec(tmp_path, name="strict", expectations=rules))
    write_batch(tmp_path, city_rows(range(5), ts=0))
    with pytest.raises(BadRecordsError):
        strict.run(spark)
    assert DeltaTable(str(table)).version() == v1 + 1

    compacted = Observer(spec).service(
        "compaction", lambda: compact_table(spec, spark=spark), CompactSummary.record
    )
    fold = ("committed", v1 + 2) if compacted.version else ("nothing_to_do", None)
    request = ExpansionRequest(8, None, (), False)
    # as `runner expand` does: the summary and the record both count from the command's
    # start (here a second before the work), not from when the record began
    began, began_at = time.perf_counter(), now()
    time.sleep(1)
    expanded = Observer(spec).service(
        "expansion",
        lambda: expand_table(spec, request, spark=spark, started=began)[1],
        ExpandSummary.record,  # type: ignore[arg-type]
        began_at,
    )

    assert expanded is not None and expanded.version is not None
    records = history.read(str(tmp_path / "_runner_history" / "table"))[::-1]
    assert [(r["pipeline"], r["kind"], r["outcome"], r["version"]) for r in records] == [
        ("t", "run", "committed", v1),
        ("t", "run", "nothing_new", None),
        ("t", "run", "committed", v1 + 1),
        ("strict", "run", "failed", None),
        ("t", "compaction", *fold),
        ("t", "expansion", "committed", expanded.version),
    ]
    first, _, second, failed, _, expansion = records
    assert expansion["started_at"] == began_at and expanded.seconds >= 1
    assert abs(expansion["seconds"] - expanded.seconds) < 0.2
    assert (first["inserted"], second["inserted"], second["updated"]) == (20, 10, 10)
    # the history's figures are the summary's (--summary-json's), name for name
    shared = set(history.SCHEMA.names) & set(real.to_dict()) - {
        "run_id",
        "stage_seconds",
        "sources",
    }
    assert {k: second[k] for k in shared} == {k: real.to_dict()[k] for k in shared}
    assert first["checkpoints_after"]["src"] == second["checkpoints_before"]["src"]
    assert first["files_added"] > 0 and first["bytes_written"] > 0
    assert {"keys", "write", "commit"} <= set(first["stage_seconds"])
    assert failed["error_class"] == "BadRecordsError" and failed["failed_stage"] == "keys"
    assert "ts_positive" in failed["error_message"]
    assert len({r["run_id"] for r in records}) == len(records)
    assert city_content(table).shape[0] == 30

    shown = CliRunner().invoke(cli, ["history", str(tmp_path / "t.yaml"), "--failed"])
    assert shown.exit_code == 0, shown.output
    assert "failed" in shown.output and "committed" not in shown.output
    assert "BadRecordsError in stage keys" in shown.output
    as_json = CliRunner().invoke(cli, ["history", str(table), "--json", "-n", "2"])
    assert [json.loads(line)["kind"] for line in as_json.output.splitlines()] == [
        "expansion",
        "compaction",
    ]


def test_a_history_that_cannot_be_written_never_fails_the_run(spark, tmp_path):
    (tmp_path / "blocker").write_text("a file where the history's directory would be")
    spec = _spec(tmp_path, history={"path": "blocker/history"})
    write_batch(tmp_path, city_rows(range(4), ts=1))
    with structlog.testing.capture_logs() as logs:
        summary = Observer(spec).run(spark)
    assert summary.version is not None
    assert [e for e in logs if e["event"] == "history_not_written"]
    assert city_content(tmp_path / "table").shape[0] == 4
