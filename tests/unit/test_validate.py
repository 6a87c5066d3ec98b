"""`runner validate`: every problem as FILE:LINE:COL: field.path: message, exit 2; no JVM."""

from __future__ import annotations

import json
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
            "delta, jdbc, kafka (did you mean 'parquet'?)",
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
            "  operation: upsert",
            "  operation: upsert\n  bulk_insert_sort: by_key",
            "p.yaml:9:21: target.bulk_insert_sort: applies to operation bulk_insert, not upsert",
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


def _validate_without_jvm(spec: Path) -> str:
    """`runner validate SPEC` in a new process, failing if it imported pyspark; its stdout."""
    # main() ends the process itself, after the atexit handlers: the check is one of them
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: 'pyspark' in sys.modules and print('validate imported "
        "pyspark', file=sys.stderr))\n"
        f"from runner.cli import main; sys.argv = ['runner', 'validate', {str(spec)!r}]\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode in (0, 2), done.stderr  # valid, or invalid as the test wants
    assert "validate imported pyspark" not in done.stderr
    return done.stdout


def test_validate_starts_no_jvm(tmp_path):
    spec = tmp_path / "p.yaml"
    spec.write_text(GOOD)
    assert "ok" in _validate_without_jvm(spec)


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
            "  operation: upsert",
            "  operation: upsert\n  on_schema_mismatch: quarantine",
            "p.yaml:9:23: target.on_schema_mismatch: quarantine needs target.quarantine.path, "
            "the table the records go to; add it, or use fail or refuse",
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


def _with_transform(sql: str) -> str:
    return GOOD.replace("target:\n", f"transform:\n  sql: {json.dumps(sql)}\ntarget:\n")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM trips",
        "select trip_id, ts from trips where fare > 0;",
        "WITH t AS (SELECT * FROM trips) SELECT * FROM t",
        "VALUES (1, 'a', 2)",
        "TABLE trips",
        "FROM trips SELECT *",
        "SELECT * FROM trips UNION ALL SELECT * FROM trips",
        "(SELECT * FROM trips) INTERSECT (SELECT * FROM trips)",
        "SELECT * FROM trips EXCEPT SELECT * FROM trips",
        "-- the trips\nSELECT 'a;b' AS x, * FROM trips; -- done; really",
        # Spark syntax sqlglot does not read: validate lets it pass, a run's Spark parser
        # decides (tests/spark/test_bad_input.py refuses the second one there)
        "TABLE trips |> WHERE fare > 0",
        "WITH t AS (SELECT 1) INSERT OVERWRITE DIRECTORY '/x' USING parquet SELECT * FROM t",
    ],
)
def test_a_transform_query_passes(tmp_path, sql):
    assert _validate(tmp_path, _with_transform(sql)) == (0, ["p.yaml: ok"])


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "INSERT OVERWRITE DIRECTORY '/home/me/data' USING parquet SELECT * FROM trips",
            "is an INSERT OVERWRITE DIRECTORY statement, not a query: the transform must be "
            "one query (SELECT, WITH ... SELECT, VALUES, TABLE t, FROM t SELECT, or a UNION, "
            "INTERSECT or EXCEPT of them), whose result is the batch",
        ),
        ("CREATE TABLE t AS SELECT * FROM trips", "is a CREATE TABLE statement, not a query"),
        ("create temporary view v as select * from trips", "is a CREATE TEMPORARY VIEW "),
        ("/* tidy up */ (DROP TABLE trips)", "is a DROP TABLE statement"),
        ("SET spark.sql.shuffle.partitions=1", "is a SET statement"),
        ("RESET", "is a RESET statement"),
        ("ADD JAR /tmp/x.jar", "is an ADD JAR statement"),
        ("CACHE TABLE trips", "is a CACHE TABLE statement"),
        ("REFRESH TABLE trips", "is a REFRESH TABLE statement"),
        ("MSCK REPAIR TABLE trips", "is an MSCK REPAIR TABLE statement"),
        ("WITH t AS (SELECT * FROM trips) INSERT INTO x SELECT * FROM t", "is an INSERT "),
        ("FROM trips INSERT INTO x SELECT *", "is an INSERT statement"),
        ("SELECT * FROM trips; DROP TABLE trips", "holds 2 statements separated by ';'"),
        ("SELECT * FROM trips;\nSELECT 1", "holds 2 statements separated by ';'"),
        ("-- nothing yet", "holds no statement, only comments or ';'"),
    ],
)
def test_a_transform_that_is_not_one_query_is_refused(tmp_path, sql, expected):
    code, lines = _validate(tmp_path, _with_transform(sql))
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"p.yaml:7:8: transform.sql: {expected}"), lines


def test_validate_reads_a_transform_without_a_jvm(tmp_path):
    spec = tmp_path / "p.yaml"
    spec.write_text(_with_transform("CREATE TABLE t AS SELECT * FROM trips"))
    assert "transform.sql: is a CREATE TABLE statement" in _validate_without_jvm(spec)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("  precombine_string_order: true\n", None),
        (
            "  precombine_string_order: yes please\n",
            'p.yaml:11:28: target.precombine_string_order: expected boolean, got string "yes '
            'please"',
        ),
    ],
)
def test_precombine_string_order_is_a_boolean(tmp_path, change, expected):
    text = GOOD.replace("  precombine_field: ts\n", "  precombine_field: ts\n" + change)
    code, lines = _validate(tmp_path, text)
    assert (code, lines) == ((2, [expected]) if expected else (0, ["p.yaml: ok"]))


def test_precombine_string_order_needs_an_ordering_field(tmp_path):
    text = GOOD.replace(
        "  precombine_field: ts\n", "  merge_mode: commit_time\n  precombine_string_order: true\n"
    )
    assert _validate(tmp_path, text) == (
        2,
        [
            "p.yaml:11:28: target.precombine_string_order: applies to a precombine_field (or "
            "cdc.sequence_by), and there is none"
        ],
    )


# A lone source (no transform) that declares its schema: every field the target names must
# be one of its columns, checked before Spark starts (the run would stop at it later).
SCHEMA_LINE = (
    '    schema: "trip_id long, city string, loc struct<lat:double,lon:double>, '
    '`fare usd` decimal(10,2), ts long, op string, gone boolean"\n'
)
COLUMNS = f"""\
name: trips
sources:
  - name: trips
    format: json
    path: data/trips
{SCHEMA_LINE}target:
  path: warehouse/trips
  operation: upsert
  record_key: [trip_id]
  precombine_field: ts
  key_generator:
    type: SIMPLE
    partition_fields: [city]
  index:
    buckets: 16
"""
NOT_IN = "is not a column of source 'trips'"
TIMESTAMP = "    timestamp: {type: EPOCHMILLISECONDS, output_format: yyyy/MM/dd}\n"


def test_a_field_missing_from_the_declared_schema_is_named_with_the_fix(tmp_path):
    text = COLUMNS.replace("record_key: [trip_id]", "record_key: [trip_idd]")
    assert _validate(tmp_path, text) == (
        2,
        [
            f"p.yaml:10:16: target.record_key[0]: record key field 'trip_idd' {NOT_IN} (did "
            "you mean 'trip_id'?); its schema declares trip_id, city, loc, fare usd, ts, op, "
            "gone: fix the name, or the schema in sources[0].schema"
        ],
    )


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "record_key: [trip_id]",
            "record_key: tripid",
            [
                f"p.yaml:10:15: target.record_key: record key field 'tripid' {NOT_IN} (did "
                "you mean 'trip_id'?)"
            ],
        ),
        (
            "precombine_field: ts",
            "precombine_field: TS",  # the run's checks match names case included
            [
                f"p.yaml:11:21: target.precombine_field: precombine field 'TS' {NOT_IN} (did "
                "you mean 'ts'? names differ only in case)"
            ],
        ),
        (
            "partition_fields: [city]",
            "partition_fields: [cty]",
            [
                "p.yaml:14:24: target.key_generator.partition_fields[0]: partition field "
                f"'cty' {NOT_IN} (did you mean 'city'?)"
            ],
        ),
        (
            "    type: SIMPLE\n    partition_fields: [city]\n",
            '    type: CUSTOM\n    partition_fields: "city:SIMPLE,tss:TIMESTAMP"\n' + TIMESTAMP,
            [
                "p.yaml:14:23: target.key_generator.partition_fields: partition field 'tss' "
                f"{NOT_IN} (did you mean 'ts'?)"
            ],
        ),
        (
            "    type: SIMPLE\n    partition_fields: [city]\n",
            "    type: TIMESTAMP\n    partition_fields: [tss]\n" + TIMESTAMP,
            [
                "p.yaml:14:24: target.key_generator.partition_fields[0]: partition field "
                f"'tss' {NOT_IN} (did you mean 'ts'?)"
            ],
        ),
        (
            "    type: SIMPLE\n    partition_fields: [city]\n",
            "    class: my.keys:Gen\n    partition_fields: [cty]\n",  # a user's generator too
            [
                "p.yaml:14:24: target.key_generator.partition_fields[0]: partition field "
                f"'cty' {NOT_IN} (did you mean 'city'?)"
            ],
        ),
        (
            "record_key: [trip_id]",
            "record_key: [lok.lat]",  # a nested field is checked by its column
            [
                f"p.yaml:10:16: target.record_key[0]: record key field 'lok.lat' {NOT_IN} "
                "(did you mean 'loc'?)"
            ],
        ),
        (
            "  index:\n",
            "  index:\n    hash_fields: [trip_idd]\n",
            [
                "p.yaml:16:19: target.index.hash_fields[0]: hash field 'trip_idd' is not a "
                "record key field ['trip_id']",
                f"p.yaml:16:19: target.index.hash_fields[0]: index hash field 'trip_idd' "
                f"{NOT_IN} (did you mean 'trip_id'?)",
            ],
        ),
        (
            "  precombine_field: ts\n",
            "  properties: {hoodie.datasource.write.precombine.field: tss}\n",
            [
                "p.yaml:11:58: target.properties.hoodie.datasource.write.precombine.field: "
                f"precombine field 'tss' {NOT_IN} (did you mean 'ts'?)"
            ],
        ),
        (
            "  record_key: [trip_id]\n  precombine_field: ts\n  key_generator:\n    type: SIMPLE\n",
            "  precombine_field: ts\n  key_generator:\n    type: SIMPLE\n"
            "    properties: {hoodie.datasource.write.recordkey.field: tripid}\n",
            [
                "p.yaml:13:59: target.key_generator.properties.hoodie.datasource.write."
                f"recordkey.field: record key field 'tripid' {NOT_IN} (did you mean 'trip_id'?)"
            ],
        ),
        (
            "  precombine_field: ts\n",
            "  precombine_field: ts\n  delete_marker: gonne\n",
            [
                f"p.yaml:12:18: target.delete_marker: delete marker 'gonne' {NOT_IN} (did "
                "you mean 'gone'?)"
            ],
        ),
        (
            "  precombine_field: ts\n",
            "  cdc: {sequence_by: lsn, operation_column: opp}\n",
            [
                f"p.yaml:11:22: target.cdc.sequence_by: cdc.sequence_by 'lsn' {NOT_IN}; its",
                "p.yaml:11:45: target.cdc.operation_column: cdc.operation_column 'opp' "
                f"{NOT_IN} (did you mean 'op'?)",
            ],
        ),
    ],
)
def test_each_field_the_target_names_is_checked_where_it_is_written(tmp_path, old, new, expected):
    assert old in COLUMNS
    code, lines = _validate(tmp_path, COLUMNS.replace(old, new))
    assert code == 2 and len(lines) == len(expected), lines
    for line, start in zip(lines, expected, strict=True):
        assert line.startswith(start), lines


@pytest.mark.parametrize(
    "changes",
    [
        [("record_key: [trip_id]", "record_key: [loc.lat]")],  # a nested field's column
        [("precombine_field: ts", "precombine_field: fare usd")],  # a backticked name
        [("  index:\n", "  delete_marker: gone\n  index:\n")],
        [("operation: upsert", "operation: delete"), ("field: ts", "field: nope")],  # unused
        # where the batch's columns are only known once Spark reads the input:
        [(SCHEMA_LINE, ""), ("[trip_id]", "[nope]")],
        [("format: json", "format: delta"), ("[trip_id]", "[nope]")],
        [
            ("target:", "transform: {sql: SELECT 1 AS nope FROM trips}\ntarget:"),
            ("[trip_id]", "[nope]"),
        ],
        [(SCHEMA_LINE, '    schema: "struct<trip_id:long>"\n'), ("[trip_id]", "[nope]")],
    ],
)
def test_fields_pass_where_they_match_or_the_columns_are_unknown(tmp_path, changes):
    text = COLUMNS
    for old, new in changes:
        assert old in text
        text = text.replace(old, new)
    assert _validate(tmp_path, text) == (0, ["p.yaml: ok"])


# Paths are resolved when the spec is loaded: a reference in one must be set.
@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("  path: warehouse/trips", "  path: ${env:RUNNER_TEST_WH}/trips", "7:9: target.path"),
        ("    path: data/trips", "    path: data/${env:RUNNER_TEST_WH}", "5:11: sources[0].path"),
        (
            "  index:\n",
            "  quarantine: {path: '${env:RUNNER_TEST_WH}/q'}\n  index:\n",
            "14:22: target.quarantine.path",
        ),
        (
            "    format: parquet\n    path: data/trips\n",
            "    format: jdbc\n    jdbc: {url: 'jdbc:postgresql://db/x', table: t, "
            "jar: '${env:RUNNER_TEST_WH}/pg.jar'}\n",
            "5:58: sources[0].jdbc.jar",
        ),
    ],
)
def test_an_unset_variable_in_a_path_is_named_with_its_field(
    tmp_path, monkeypatch, old, new, where
):
    monkeypatch.delenv("RUNNER_TEST_WH", raising=False)
    code, lines = _validate(tmp_path, GOOD.replace(old, new))
    assert (code, lines) == (
        2,
        [
            f"p.yaml:{where}: environment variable RUNNER_TEST_WH is not set; export it (a "
            "path is resolved when the spec is loaded; on Kubernetes: key RUNNER_TEST_WH of "
            "the Secret kubernetes.secret)"
        ],
    )
    monkeypatch.setenv("RUNNER_TEST_WH", "")
    assert (
        "RUNNER_TEST_WH is empty; give a value to it"
        in _validate(tmp_path, GOOD.replace(old, new))[1][0]
    )
    monkeypatch.setenv("RUNNER_TEST_WH", "/somewhere")
    assert _validate(tmp_path, GOOD.replace(old, new)) == (0, ["p.yaml: ok"])


def test_paths_are_resolved_from_the_environment_and_shown_as_references(tmp_path, monkeypatch):
    from runner.spec import load_spec
    from runner.spec.secrets import scrub

    spec = tmp_path / "p.yaml"
    spec.write_text(
        GOOD.replace("  path: warehouse/trips", "  path: ${env:RUNNER_TEST_WH}/trips")
        .replace("    path: data/trips", "    path: ${env:RUNNER_TEST_IN}")
        .replace("  index:\n", "  quarantine: {path: '${env:RUNNER_TEST_Q}'}\n  index:\n")
    )
    monkeypatch.setenv("RUNNER_TEST_WH", "/lake/wh-7f3e")
    monkeypatch.setenv("RUNNER_TEST_IN", "landing/in-7f3e")  # relative: to the spec's directory
    monkeypatch.setenv("RUNNER_TEST_Q", "s3://bucket-7f3e/q")
    loaded = load_spec(spec)
    assert loaded.target.path == "/lake/wh-7f3e/trips"
    assert loaded.sources[0].path == str(tmp_path / "landing" / "in-7f3e")
    assert loaded.target.quarantine.path == "s3://bucket-7f3e/q"
    assert scrub(f"table {loaded.target.path}") == "table ${env:RUNNER_TEST_WH}/trips"
    # `runner render` keeps them as written: the pods resolve them
    monkeypatch.delenv("RUNNER_TEST_WH")
    kept = load_spec(spec, resolve_paths=False)
    assert kept.target.path == "${env:RUNNER_TEST_WH}/trips"


JDBC = """\
name: orders
sources:
  - name: orders
    format: jdbc
    jdbc:
      url: jdbc:postgresql://db:5432/shop
      table: orders
      user: ${env:SHOP_USER}
      password: ${env:SHOP_PASSWORD}
target:
  path: warehouse/orders
  operation: insert
  record_key: [id]
  index: {buckets: 4}
"""
USE_A_REFERENCE = (
    "a password must not be written in the spec; export it as an environment variable and "
    "write ${env:NAME} here (on Kubernetes: key NAME of the Secret kubernetes.secret)"
)
URL_PASSWORD = (
    "the URL holds a password written out; export it as an environment variable and write "
    "${env:NAME} in its place (for JDBC, better: drop it from the url and set "
    "jdbc.password: ${env:NAME})"
)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "password: ${env:SHOP_PASSWORD}",
            "password: hunter2-x",
            f"p.yaml:9:17: sources[0].jdbc.password: {USE_A_REFERENCE}",
        ),
        (
            "password: ${env:SHOP_PASSWORD}",
            "password: pre-${env:SHOP_PASSWORD}",  # part of it written out
            f"p.yaml:9:17: sources[0].jdbc.password: {USE_A_REFERENCE}",
        ),
        (
            "      password: ${env:SHOP_PASSWORD}\n",
            "      password: ${env:SHOP_PASSWORD}\n    options: {Password: hunter2-x}\n",
            f"p.yaml:10:25: sources[0].options.Password: {USE_A_REFERENCE}",
        ),
        (
            "shop\n",
            "shop?user=u&password=hunter2-x\n",
            f"p.yaml:6:12: sources[0].jdbc.url: {URL_PASSWORD}",
        ),
        (
            "shop\n",
            "shop?ssl=true&PWD=hunter2-x\n",
            f"p.yaml:6:12: sources[0].jdbc.url: {URL_PASSWORD}",
        ),
        (
            "jdbc:postgresql://db:5432/shop\n",
            "jdbc:sqlserver://db;user=u;passwd=hunter2-x\n",
            f"p.yaml:6:12: sources[0].jdbc.url: {URL_PASSWORD}",
        ),
        (
            "jdbc:postgresql://db:5432/shop\n",
            "'jdbc:mysql://u:hunter2-x@db/shop'\n",
            f"p.yaml:6:12: sources[0].jdbc.url: {URL_PASSWORD}",
        ),
    ],
)
def test_a_password_written_in_the_spec_is_refused_and_not_shown(tmp_path, old, new, expected):
    assert old in JDBC
    code, lines = _validate(tmp_path, JDBC.replace(old, new))
    assert (code, lines) == (2, [expected])


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("password: ${env:SHOP_PASSWORD}", "password: ''"),  # no password
        ("shop\n", "shop?user=u&password=${env:SHOP_PASSWORD}&ssl=true\n"),
        ("jdbc:postgresql://db:5432/shop\n", "'jdbc:mysql://u:${env:SHOP_PASSWORD}@db/shop'\n"),
    ],
)
def test_password_references_pass(tmp_path, monkeypatch, old, new):
    monkeypatch.delenv("SHOP_PASSWORD", raising=False)  # resolved when connecting, not here
    assert _validate(tmp_path, JDBC.replace(old, new)) == (0, ["p.yaml: ok"])


def test_partition_directories_of_a_source_count_as_its_columns(tmp_path):
    """Spark adds `dt=...` directories' names to a file source's declared schema, so a key
    on one is no mistake; a name neither declared nor a directory still is."""
    data = tmp_path / "data" / "trips" / "dt=2026-11-25" / "hr=07"
    data.mkdir(parents=True)
    text = COLUMNS.replace("precombine_field: ts", "precombine_field: hr")
    assert _validate(tmp_path, text) == (0, ["p.yaml: ok"])
    code, lines = _validate(tmp_path, text.replace("field: hr", "field: hrs"))
    assert code == 2 and "precombine field 'hrs'" in lines[0], lines
    remote = text.replace("path: data/trips", "path: s3://bucket/trips")
    assert _validate(tmp_path, remote) == (0, ["p.yaml: ok"])  # only Spark can tell there


def test_an_error_prints_what_the_failure_left_done(capsys):
    """A failure's notes (a schema rewrite committed before it) follow its error line."""
    from runner.cli.main import _echo_notes

    failure = OSError("disk full")
    failure.add_note("the table's schema rewrite (note dropped) was committed as version 3")
    _echo_notes(failure)
    assert capsys.readouterr().err == (
        "  note: the table's schema rewrite (note dropped) was committed as version 3\n"
    )
