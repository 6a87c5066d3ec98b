"""`runner validate`: every problem as FILE:LINE:COL: field.path: message, exit 2; no JVM."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import cli

ROOT = Path(__file__).resolve().parents[2]

GOOD = """\
name: trips
sources:
  - name: trips
    format: parquet
    path: data/trips
target:
  path: warehouse/trips
  operation: upsert
  record_key: [trip_id]
  precombine_field: ts
  key_generator:
    type: SIMPLE
    partition_fields: [city]
  index:
    hash_fields: [trip_id]
    buckets: 16
"""


def _validate(tmp_path: Path, text: str) -> tuple[int, list[str]]:
    spec = tmp_path / "p.yaml"
    spec.write_text(textwrap.dedent(text))
    result = CliRunner().invoke(cli, ["validate", str(spec)])
    lines = [line.replace(str(spec), "p.yaml") for line in result.stdout.splitlines()]
    return result.exit_code, lines


def test_a_valid_spec_passes(tmp_path):
    assert _validate(tmp_path, GOOD) == (0, ["p.yaml: ok"])


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "    buckets: 16",
            "    buckets: 0",
            "p.yaml:16:14: target.index.buckets: must be at least 1, got 0",
        ),
        (
            "    buckets: 16",
            "    buckets: sixteen",
            'p.yaml:16:14: target.index.buckets: expected integer, got string "sixteen"',
        ),
        (
            "    buckets: 16",
            "    buckts: 16",
            "p.yaml:16:5: target.index.buckts: unknown key (did you mean 'buckets'?)",
        ),
        (
            "    format: parquet",
            "    format: parqet",
            'p.yaml:4:13: sources[0].format: "parqet" is not one of: parquet, csv, json, orc, '
            "delta, jdbc (did you mean 'parquet'?)",
        ),
        (
            "    hash_fields: [trip_id]",
            "    hash_fields: [trip_id, city]",
            "p.yaml:15:28: target.index.hash_fields[1]: hash field 'city' is not a record key "
            "field ['trip_id']; the bucket index hashes a subset of the record key",
        ),
        (
            "  path: warehouse/trips\n",
            "",
            "p.yaml:7:3: target.path: required key missing",
        ),
        (
            "  precombine_field: ts\n",
            "",
            "p.yaml:7:3: target.precombine_field: upsert with merge_mode event_time needs a "
            "precombine_field to order records; set one, or set merge_mode: commit_time "
            "(the latest write wins)",
        ),
        (
            "  record_key: [trip_id]",
            "  record_key: [trip_id, day]",
            "p.yaml:9:15: target.record_key: key generator SIMPLE takes one record key field, "
            "got 2; use type: COMPLEX for several",
        ),
        (
            "sources:\n",
            "description: a\ndescription: b\nsources:\n",
            "p.yaml:3:1: description: duplicate key: YAML keeps only the last one; "
            "remove one of them",
        ),
        (
            "    path: data/trips",
            "    path: ${env:DATA DIR}/trips",
            "p.yaml:5:11: sources[0].path: ${env:DATA DIR} is not a valid environment "
            "reference; write ${env:NAME} with NAME made of letters, digits and underscores",
        ),
        (
            "    path: data/trips",
            "    path: data/trips\n    incremental: {since: last}",
            "p.yaml:6:18: sources[0].incremental: does not apply to format parquet; it takes "
            "new_files",
        ),
        (
            "    path: data/trips",
            "    path: data/trips\n    incremental: all_files",
            'p.yaml:6:18: sources[0].incremental: string "all_files" is not valid here; write '
            "new_files, {since: last} or {column: NAME}",
        ),
        (
            "    format: parquet\n    path: data/trips",
            "    format: jdbc",
            "p.yaml:3:5: sources[0].jdbc: required key missing",
        ),
        (
            "    format: parquet\n    path: data/trips",
            "    format: jdbc\n    jdbc: {url: 'jdbc:postgresql://db/x'}",
            "p.yaml:5:11: sources[0].jdbc: give exactly one of table and query",
        ),
        (
            "target:\n",
            "expectations:\n  - {name: fare_ok, sql: fare >= 0, action: quarantine}\ntarget:\n",
            "p.yaml:7:45: expectations[0].action: action quarantine needs "
            "target.quarantine.path, the table the rows go to; add it, or use action drop or fail",
        ),
        (
            "target:\n",
            "expectations:\n  - {name: ok, sql: a > 0}\n  - {name: ok, sql: b > 0}\ntarget:\n",
            "p.yaml:8:12: expectations[1].name: duplicate expectation name (also expectations[0])",
        ),
        (
            "  path: warehouse/trips\n",
            "  path: warehouse/trips\n  quarantine: {path: warehouse/trips}\n",
            "p.yaml:8:22: target.quarantine.path: the quarantine table must not be the target "
            "table; give it its own path",
        ),
        (
            "  operation: upsert",
            "  operation: insert\n  merge_mode: partial_update",
            "p.yaml:9:15: target.merge_mode: partial_update merges a record with the stored one, "
            "which only upsert does, not insert",
        ),
        (
            "  operation: upsert",
            "  operation: upsert\n  merge_mode: custom",
            "p.yaml:9:15: target.merge_mode: custom needs target.merger.class, the "
            "package.module:ClassName of your merger",
        ),
        (
            "  operation: upsert",
            "  operation: upsert\n  merger: {class: 'm:Sum'}",
            "p.yaml:9:11: target.merger: applies to merge_mode custom, not event_time",
        ),
        (
            "  operation: upsert",
            "  operation: upsert\n  merge_mode: custom\n  merger: {class: summing}",
            'p.yaml:10:19: target.merger.class: "summing" is not valid here; write '
            "package.module:ClassName (the module's import path, a colon, the class)",
        ),
        (
            "  index:",
            "  index: [",
            "p.yaml:16:5: not valid YAML: expected ',' or ']', but got '<scalar>'",
        ),
    ],
)
def test_each_problem_is_located_and_exits_2(tmp_path, old, new, expected):
    assert old in GOOD
    code, lines = _validate(tmp_path, GOOD.replace(old, new))
    assert code == 2
    assert expected in lines, lines


def test_all_problems_are_reported_at_once(tmp_path):
    text = GOOD.replace("buckets: 16", "buckets: 0").replace("format: parquet", "format: avro")
    code, lines = _validate(tmp_path, text)
    assert code == 2 and len(lines) == 2
    assert lines[0].startswith("p.yaml:4:13: sources[0].format:")
    assert lines[1].startswith("p.yaml:16:14: target.index.buckets:")


def test_many_files_one_bad(tmp_path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(GOOD)
    bad.write_text(GOOD.replace("operation: upsert", "operation: merge"))
    result = CliRunner().invoke(cli, ["validate", str(good), str(bad)])
    assert result.exit_code == 2
    assert f"{good}: ok" in result.stdout
    assert f"{bad}:8:14: target.operation:" in result.stdout
    assert "1 of 2 spec(s) invalid" in result.stderr


def test_bundled_pipelines_are_valid():
    specs = sorted(str(p) for p in (ROOT / "pipelines").glob("*.yaml"))
    assert specs
    result = CliRunner().invoke(cli, ["validate", *specs])
    assert result.exit_code == 0, result.stdout


def test_validate_starts_no_jvm(tmp_path):
    spec = tmp_path / "p.yaml"
    spec.write_text(GOOD)
    code = (
        "import sys; from runner.cli import main; sys.argv = ['runner', 'validate', "
        f"{str(spec)!r}]\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
        "assert 'pyspark' not in sys.modules, 'validate imported pyspark'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "ok" in done.stdout


def test_a_user_class_and_a_type_together_are_refused(tmp_path):
    text = GOOD.replace("    type: SIMPLE\n", "    type: SIMPLE\n    class: my.keys:Gen\n")
    code, lines = _validate(tmp_path, text)
    assert code == 2
    assert any("target.key_generator.class: give either class" in line for line in lines), lines


def test_a_user_class_must_name_module_and_class(tmp_path):
    text = GOOD.replace("    type: SIMPLE\n", "    class: my.keys.Gen\n")
    code, lines = _validate(tmp_path, text)
    assert code == 2 and "target.key_generator.class" in lines[0]
    assert "write package.module:ClassName" in lines[0]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "    path: data/trips",
            "    path: data/trips\n    on_bad_record: drop",
            "p.yaml:6:20: sources[0].on_bad_record: applies to csv and json, whose records can "
            "fail to parse; parquet records are typed",
        ),
        (
            "    format: parquet\n    path: data/trips",
            "    format: json\n    path: data/trips\n    options: {mode: DROPMALFORMED}",
            "p.yaml:6:21: sources[0].options.mode: the runner decides what happens to records "
            "that do not parse: use on_bad_record (fail, quarantine or drop) instead of this "
            "Spark option",
        ),
        (
            "    format: parquet\n    path: data/trips",
            "    format: csv\n    path: data/trips\n    on_bad_record: quarantine",
            "p.yaml:6:20: sources[0].on_bad_record: quarantine needs target.quarantine.path, the "
            "table the records go to; add it, or use drop or fail",
        ),
        (
            "    path: data/trips",
            "    path: data/trips\n    on_bad_file: ignore",
            'p.yaml:6:18: sources[0].on_bad_file: "ignore" is not one of: fail, skip',
        ),
    ],
)
def test_bad_input_settings_are_checked(tmp_path, old, new, expected):
    code, lines = _validate(tmp_path, GOOD.replace(old, new))
    assert (code, lines) == (2, [expected])


def test_hudi_merge_properties_set_the_merge_mode_and_ordering_field(tmp_path):
    from runner.spec import load_spec

    text = GOOD.replace(
        "  precombine_field: ts\n",
        "  properties:\n"
        "    hoodie.datasource.write.payload.class: "
        "org.apache.hudi.common.model.PartialUpdateAvroPayload\n"
        "    hoodie.datasource.write.precombine.field: ts\n",
    )
    (tmp_path / "p.yaml").write_text(text)
    target = load_spec(tmp_path / "p.yaml").target
    assert (target.merge_mode, target.precombine_field) == ("partial_update", "ts")


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        (
            "    hoodie.write.record.merge.mode: COMMIT_TIME_ORDERING\n  merge_mode: event_time\n",
            "target.merge_mode: event_time disagrees with target.properties, which give "
            "commit_time; set it one way",
        ),
        (
            "    hoodie.datasource.write.payload.class: com.example.MyPayload\n",
            "target.properties.hoodie.datasource.write.payload.class: "
            "hoodie.datasource.write.payload.class com.example.MyPayload: the runner merges as",
        ),
        (
            "    hoodie.datasource.write.operation: upsert\n",
            "target.properties.hoodie.datasource.write.operation: not a merge property the "
            "runner reads",
        ),
    ],
)
def test_hudi_merge_properties_are_checked(tmp_path, properties, expected):
    text = GOOD.replace(
        "  precombine_field: ts\n", f"  precombine_field: ts\n  properties:\n{properties}"
    )
    code, lines = _validate(tmp_path, text)
    assert code == 2
    assert any(expected in line for line in lines), lines


def test_a_change_feed_spec_loads_with_its_sequence_as_the_ordering(tmp_path):
    from runner.spec import load_spec

    text = GOOD.replace(
        "  precombine_field: ts\n",
        "  cdc:\n    sequence_by: lsn\n    operation_column: op\n    delete_values: [D]\n"
        "  scd:\n    type: 2\n    end_column: until\n",
    )
    assert _validate(tmp_path, text) == (0, ["p.yaml: ok"])
    target = load_spec(tmp_path / "p.yaml").target
    assert target.precombine_field == "lsn" and target.keeps_history
    assert (target.cdc.delete_values, target.scd.history_columns) == (
        ("D",),
        ("valid_from", "until", "is_current"),
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            "  precombine_field: ts\n  scd:\n    type: 2\n",
            "p.yaml:12:5: target.scd: needs target.cdc: the history is built from a change "
            "feed's events (at least cdc.sequence_by, the column that orders them)",
        ),
        (
            "  cdc:\n    sequence_by: lsn\n  delete_marker: gone\n",
            "p.yaml:12:18: target.delete_marker: a change feed's deletes come from "
            "cdc.operation_column and cdc.delete_values; drop delete_marker",
        ),
        (
            "  cdc:\n    sequence_by: lsn\n    delete_values: [x]\n",
            "p.yaml:12:20: target.cdc.delete_values: needs cdc.operation_column to look in",
        ),
        (
            "  cdc:\n    sequence_by: lsn\n  scd:\n    type: 2\n    current_column: lsn\n",
            "p.yaml:14:21: target.scd.current_column: 'lsn' is already used by another cdc or "
            "scd column; give each its own name",
        ),
    ],
)
def test_change_feed_settings_are_checked(tmp_path, change, expected):
    code, lines = _validate(tmp_path, GOOD.replace("  precombine_field: ts\n", change))
    assert (code, lines) == (2, [expected])
