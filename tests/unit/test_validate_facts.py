"""`runner validate` knows what it can know without a JVM (issue 58, item 1): every problem of a
spec in one pass, a column transform.sql or an expectation reads that the sources lack, a
string ordering column, a chained Delta source whose table keeps no change data feed; each as
FILE:LINE:COL: field: what is wrong and the fix."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner
from deltalake import write_deltalake

from runner.cli import cli

SPEC = """\
name: trips
sources:
  - name: trips
    format: json
    path: data/trips
    schema: "trip_id long, city string, ts long, amount double, note string"
transform:
  sql: |
    SELECT trip_id, city, ts,
      amount
    FROM trips
expectations:
  - name: positive
    sql: amount > 0
target:
  path: warehouse/trips
  operation: upsert
  record_key: [trip_id]
  precombine_field: ts
  key_generator: {type: SIMPLE, partition_fields: [city]}
  index: {buckets: 4}
"""


def _validate(tmp_path: Path, text: str) -> tuple[int, list[str]]:
    spec = tmp_path / "p.yaml"
    spec.write_text(textwrap.dedent(text))
    result = CliRunner().invoke(cli, ["validate", str(spec)])
    lines = [line.replace(str(tmp_path), "T") for line in result.stdout.splitlines()]
    return result.exit_code, lines


def test_the_spec_passes_as_written(tmp_path):
    assert _validate(tmp_path, SPEC) == (0, ["T/p.yaml: ok"])


def test_a_schema_error_no_longer_hides_the_semantic_ones(tmp_path):
    text = SPEC.replace("  index: {buckets: 4}", "  index: {buckets: 4, hash_fields: [city]}")
    text = text.replace("  precombine_field: ts", "  precombine_feild: ts\n  filter_dupes: yes")
    assert _validate(tmp_path, text) == (
        2,
        [
            "T/p.yaml:16:3: target.precombine_field: upsert with merge_mode event_time needs a "
            "precombine_field to order records; set one, or set merge_mode: commit_time (the "
            "latest write wins)",
            "T/p.yaml:19:3: target.precombine_feild: unknown key (did you mean "
            "'precombine_field'?)",
            "T/p.yaml:20:17: target.filter_dupes: applies to operation insert, not upsert",
            "T/p.yaml:22:37: target.index.hash_fields[0]: hash field 'city' is not a record key "
            "field ['trip_id']; the bucket index hashes a subset of the record key",
        ],
    )
    # the valid parts are checked against the sources too
    text = SPEC.replace("  index: {buckets: 4}", "  index: {buckets: 4, buckts: 8}")
    text = text.replace("      amount\n", "      amout\n")
    assert _validate(tmp_path, text) == (
        2,
        [
            "T/p.yaml:10:7: transform.sql: column 'amout' is not a column "
            "of source 'trips' (did you mean 'amount'?); source 'trips' has trip_id, city, ts, "
            "amount, note: fix the query, or the source's schema",
            "T/p.yaml:21:23: target.index.buckts: unknown key (did you mean 'buckets'?)",
        ],
    )


def test_a_wrong_value_is_said_once_and_the_rest_still_checked(tmp_path):
    """A wrong value is left out of the later checks: what they would say of it unsaid."""
    text = SPEC.replace("  precombine_field: ts", "  precombine_field: [ts]")
    text = text.replace("sql: amount > 0", "sql: amout > 0 AND city IS NOT NULL")
    assert _validate(tmp_path, text) == (
        2,
        [
            "T/p.yaml:14:10: expectations[0].sql: expectation 'positive' reads column 'amout', "
            "which is not among the transform's output columns (did you mean 'amount'?): "
            "trip_id, city, ts, amount; fix its SQL",
            "T/p.yaml:19:21: target.precombine_field: expected string, got list",
        ],
    )


def test_unknown_columns_of_a_query_over_several_sources_and_qualified_names(tmp_path):
    text = SPEC.replace(
        "    schema:",
        "    schema:",
    ).replace(
        "transform:",
        "  - name: fares\n    format: parquet\n    path: data/fares\n"
        '    schema: "trip_id long, fare double"\ntransform:',
    )
    joined = text.replace(
        "    SELECT trip_id, city, ts,\n      amount\n    FROM trips\n",
        "    SELECT t.trip_id, t.city, t.ts, f.fair AS amount\n"
        "    FROM trips t JOIN fares f ON t.trip_id = f.trip_id WHERE cty <> ''\n",
    )
    code, lines = _validate(tmp_path, joined)
    assert code == 2
    assert lines == [
        "T/p.yaml:13:37: transform.sql: column 'fair' is not a column of any of sources "
        "'trips', 'fares' (did you mean 'fare'?); source 'trips' has trip_id, city, ts, amount, "
        "note; source 'fares' has trip_id, fare: fix the query, or the source's schema"
    ]
    unqualified = joined.replace("f.fair AS amount", "f.fare AS amount")
    code, lines = _validate(tmp_path, unqualified)
    assert code == 2 and lines[0].startswith(
        "T/p.yaml:14:62: transform.sql: column 'cty' is not a column of "
        "any of sources 'trips', 'fares' (did you mean 'city'?)"
    )
    fine = unqualified.replace("cty <> ''", "upper(City) <> '' ORDER BY amount")  # any case
    assert _validate(tmp_path, fine) == (0, ["T/p.yaml: ok"])


def test_columns_spark_alone_knows_are_not_guessed(tmp_path):
    text = SPEC.replace(
        '    schema: "trip_id long, city string, ts long, amount double, note string"\n', ""
    )
    assert _validate(tmp_path, text.replace("      amount\n", "      amout\n"))[0] == 0
    # a table that is no source may be in Spark's catalog: the query is Spark's to resolve
    catalog = SPEC.replace("    FROM trips\n", "    FROM trips JOIN dim.cities USING (city)\n")
    assert _validate(tmp_path, catalog.replace("      amount\n", "      area\n")) == (
        0,
        ["T/p.yaml: ok"],
    )


def test_a_string_ordering_column_is_refused_as_the_run_refuses_it(tmp_path):
    text = SPEC.replace("ts long", "ts string")
    fix = (
        ", so records would be ordered as text ('9' above '10'). Declare its type: in the "
        "source's schema (`ts long`, `ts timestamp`, ...) or with CAST(ts AS BIGINT) AS ts in "
        "transform.sql; or set target.precombine_string_order: true if text order is meant"
    )
    assert _validate(tmp_path, text) == (
        2,
        [f"T/p.yaml:19:21: target.precombine_field: precombine_field 'ts' is a string column{fix}"],
    )
    cast = text.replace("city, ts,", "city, CAST(ts AS BIGINT) AS ts,")
    assert _validate(tmp_path, cast) == (0, ["T/p.yaml: ok"])
    meant = text.replace(
        "  precombine_field: ts", "  precombine_field: ts\n  precombine_string_order: true"
    )
    assert _validate(tmp_path, meant) == (0, ["T/p.yaml: ok"])
    hudi = text.replace(
        "  precombine_field: ts", "  properties: {hoodie.datasource.write.precombine.field: ts}"
    )
    code, lines = _validate(tmp_path, hudi)
    assert code == 2 and lines[0].startswith(
        "T/p.yaml:19:58: target.properties.hoodie.datasource.write.precombine.field: "
        "precombine_field 'ts' is a string column"
    )
    feed = text.replace("  precombine_field: ts", "  cdc: {sequence_by: ts}")
    code, lines = _validate(tmp_path, feed)
    assert code == 2 and lines[0].startswith(
        "T/p.yaml:19:22: target.cdc.sequence_by: cdc.sequence_by 'ts' is a string column, so "
        "events would be ordered as text"
    )


CHAINED = """\
name: chained
sources:
  - name: upstream
    format: delta
    path: upstream
    incremental: {since: last}
target:
  path: downstream
  operation: upsert
  merge_mode: commit_time
  record_key: id
  key_generator: {type: NON_PARTITIONED}
  index: {buckets: 2}
"""


def test_a_chained_delta_source_needs_its_table_s_change_data_feed(tmp_path):
    rows = pa.table({"id": pa.array([1], pa.int64()), "v": ["a"]})
    write_deltalake(str(tmp_path / "upstream"), rows)
    assert _validate(tmp_path, CHAINED) == (
        2,
        [
            "T/p.yaml:6:18: sources[0].incremental: source 'upstream': T/upstream keeps no "
            "change data feed, so its deletes cannot be handed on; set target.change_data_feed: "
            "true in the pipeline that writes it (deletes are then recorded from its next run "
            "on), or set `deletes: ignore` in this source's incremental to read its inserted "
            "and updated rows only"
        ],
    )
    ignoring = CHAINED.replace("{since: last}", "{since: last, deletes: ignore}")
    assert _validate(tmp_path, ignoring) == (0, ["T/p.yaml: ok"])
    # the expectation reads the source table's columns, the change feed's too
    checked = (
        CHAINED + "expectations:\n  - {name: e, sql: 'vv IS NOT NULL AND _change_type <> \"\"'}\n"
    )
    feed = {"delta.enableChangeDataFeed": "true"}
    shutil.rmtree(tmp_path / "upstream")
    write_deltalake(str(tmp_path / "upstream"), rows, configuration=feed)
    code, lines = _validate(tmp_path, checked)
    assert code == 2 and lines == [
        "T/p.yaml:15:21: expectations[0].sql: expectation 'e' reads column 'vv', which is not "
        "among the source's columns (did you mean 'v'?): id, v, _change_type, "
        "_commit_version, _commit_timestamp; fix its SQL"
    ]
