"""Input the runner cannot read: corrupt or vanished files, text records that do not parse.

Each case checks what a user sees (the file, the line, the reason), that a failed run leaves
the table as it was, and that the skip and record actions keep every other row.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable

from runner.errors import BadRecordsError, SchemaChangeError, UnreadableFileError, UserError
from runner.pipeline.run import run_pipeline
from runner.sources.bad_input import reading
from runner.sources.plan import refuse_statements
from runner.spec import load_spec
from tests.helpers import file_bytes, read_table

pytestmark = pytest.mark.spark

SCHEMA = "id long, city string, v long"
GOOD = [{"id": 1, "city": "a", "v": 10}, {"id": 2, "city": "b", "v": 20}]


def _spec(tmp_path: Path, source: dict, **target) -> Path:
    spec = {
        "name": "bad",
        "sources": [{"name": "src", "path": "in", **source}],
        "target": {
            "path": "table",
            "operation": "upsert",
            "record_key": "id",
            "precombine_field": "v",
            "key_generator": {"type": "SIMPLE", "partition_fields": "city"},
            "index": {"buckets": 4},
            **target,
        },
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    (tmp_path / "in").mkdir(exist_ok=True)
    return path


def _json_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


def _rows(table: Path) -> list[dict]:
    frame = read_table(table)[["id", "city", "v"]].sort_values("id")
    return frame.to_dict("records")


def test_malformed_json_records_fail_the_run_naming_file_and_line(spark, tmp_path):
    spec = _spec(tmp_path, {"format": "json", "schema": SCHEMA})
    _json_lines(tmp_path / "in" / "a.json", [json.dumps(r) for r in GOOD])
    run_pipeline(load_spec(spec), spark=spark)
    before = file_bytes(tmp_path / "table")
    _json_lines(
        tmp_path / "in" / "a.json",
        [json.dumps(GOOD[0]), '{"id": 3, "city": "c", "v": "ten"}', "{not json"],
    )

    with pytest.raises(BadRecordsError) as failed:
        run_pipeline(load_spec(spec), spark=spark)

    message = str(failed.value)
    assert "2 record(s) are rejected; nothing was written" in message
    assert "malformed_record 2" in message
    assert f"{tmp_path}/in/a.json:2: " in message and '"v": "ten"' in message
    assert f"{tmp_path}/in/a.json:3: " in message and "{not json" in message
    assert "on_bad_record" in message
    assert file_bytes(tmp_path / "table") == before


def test_malformed_csv_records_are_dropped_and_counted_even_in_columns_a_pass_skips(
    spark, tmp_path
):
    # the bad value sits in `v`, a column the bucket-count pass does not need for a
    # commit_time upsert: the write must still agree with the counts
    spec = _spec(
        tmp_path,
        {"format": "csv", "schema": SCHEMA, "on_bad_record": "drop"},
        merge_mode="commit_time",
    )
    (tmp_path / "in" / "a.csv").write_text("1,a,10\n2,b,not-a-number\n3,c,30\n4,d\n")

    summary = run_pipeline(load_spec(spec), spark=spark)

    assert summary.rows_read == 4 and summary.rows_dropped == 2
    assert summary.rejected_by_rule == {"malformed_record": 2}
    assert summary.inserted == 2
    assert _rows(tmp_path / "table") == [
        {"id": 1, "city": "a", "v": 10},
        {"id": 3, "city": "c", "v": 30},
    ]


def test_malformed_records_go_to_quarantine_as_they_were_read(spark, tmp_path):
    spec = _spec(
        tmp_path,
        {"format": "json", "schema": SCHEMA, "on_bad_record": "quarantine"},
        quarantine={"path": "quarantine", "max_fraction": 0.5},
    )
    bad_line = '{"id": 9, "city": "z", "v": [1]}'
    _json_lines(tmp_path / "in" / "a.json", [*(json.dumps(r) for r in GOOD), bad_line])

    summary = run_pipeline(load_spec(spec), spark=spark)

    assert summary.rows_quarantined == 1 and summary.inserted == 2
    quarantined = DeltaTable(str(tmp_path / "quarantine")).to_pandas()
    assert quarantined["_rule"].tolist() == ["malformed_record"]
    assert quarantined["_record"].tolist() == [bad_line]
    assert "a.json" in quarantined["_reason"][0]
    assert _rows(tmp_path / "table") == GOOD


def test_records_of_an_inferred_json_schema_that_do_not_parse_are_caught(spark, tmp_path):
    spec = _spec(tmp_path, {"format": "json", "on_bad_record": "drop"})
    _json_lines(tmp_path / "in" / "a.json", [*(json.dumps(r) for r in GOOD), "oops"])

    summary = run_pipeline(load_spec(spec), spark=spark)

    assert summary.rows_dropped == 1 and summary.inserted == 2
    assert _rows(tmp_path / "table") == GOOD


def _parquet(path: Path, rows: list[dict]) -> None:
    pq.write_table(pa.Table.from_pylist(rows), path)


def test_a_corrupt_parquet_file_stops_the_run_with_its_name_and_reason(spark, tmp_path):
    spec = _spec(tmp_path, {"format": "parquet"})
    _parquet(tmp_path / "in" / "good.parquet", GOOD)
    run_pipeline(load_spec(spec), spark=spark)
    before = file_bytes(tmp_path / "table")
    (tmp_path / "in" / "x.parquet").write_bytes(b"this is not parquet at all")

    with pytest.raises(UnreadableFileError) as failed:
        run_pipeline(load_spec(spec), spark=spark)

    assert failed.value.exit_code == 2
    message = str(failed.value)
    assert message.startswith(f"source 'src' cannot read {tmp_path}/in/x.parquet: ")
    assert "is not a Parquet file" in message and "on_bad_file: skip" in message
    assert "\tat org.apache" not in message
    assert file_bytes(tmp_path / "table") == before


def test_skipped_files_are_named_quarantined_and_passed_by_the_checkpoint(spark, tmp_path):
    spec = _spec(
        tmp_path,
        {"format": "parquet", "incremental": "new_files", "on_bad_file": "skip"},
        quarantine={"path": "quarantine"},
    )
    _parquet(tmp_path / "in" / "a.parquet", GOOD[:1])
    (tmp_path / "in" / "b.parquet").write_bytes(b"garbage")
    whole = pa.Table.from_pylist(GOOD[1:])
    pq.write_table(whole, tmp_path / "c.parquet")
    data = (tmp_path / "c.parquet").read_bytes()
    (tmp_path / "in" / "c.parquet").write_bytes(data[: len(data) // 2])  # truncated

    summary = run_pipeline(load_spec(spec), spark=spark)

    skipped = {Path(f["path"]).name: f["reason"] for f in summary.files_skipped}
    assert set(skipped) == {"b.parquet", "c.parquet"}
    assert all("not a Parquet file" in reason for reason in skipped.values())
    assert "skipped      2 unreadable file(s)" in summary.render()
    assert summary.version is not None and _rows(tmp_path / "table") == GOOD[:1]
    quarantined = DeltaTable(str(tmp_path / "quarantine")).to_pandas()
    assert quarantined["_rule"].tolist() == ["unreadable_file"] * 2
    files = sorted(json.loads(r)["file"] for r in quarantined["_record"])
    assert files == [f"{tmp_path}/in/b.parquet", f"{tmp_path}/in/c.parquet"]

    # they are not read again: the checkpoint passed them
    again = run_pipeline(load_spec(spec), spark=spark)
    assert again.nothing_new and again.files_skipped == []


def test_a_file_gone_between_listing_and_reading_is_named(spark, tmp_path):
    spec = load_spec(_spec(tmp_path, {"format": "json", "schema": SCHEMA}))
    _json_lines(tmp_path / "in" / "a.json", ['{"id": 1}'])
    frame = spark.read.schema("id long").json(str(tmp_path / "in"))
    (tmp_path / "in" / "a.json").unlink()

    with pytest.raises(UnreadableFileError) as failed, reading(spec.sources):
        frame.count()

    assert failed.value.path == f"{tmp_path}/in/a.json"
    assert failed.value.source == "src" and not failed.value.skippable
    assert "does not exist" in failed.value.reason


def test_rows_from_good_files_are_kept_whole(spark, tmp_path):
    """A source with no bad record is read exactly as before: the checks change nothing."""
    spec = _spec(tmp_path, {"format": "csv", "schema": SCHEMA, "options": {"header": True}})
    pd.DataFrame(GOOD).to_csv(tmp_path / "in" / "a.csv", index=False)

    summary = run_pipeline(load_spec(spec), spark=spark)

    assert summary.rows_read == 2 and summary.rejected_by_rule == {}
    assert _rows(tmp_path / "table") == GOOD


# transform.sql is one query: Spark's parser is asked before spark.sql() runs anything

TO_DIRECTORY = "INSERT OVERWRITE DIRECTORY '{mine}' USING parquet SELECT * FROM"
STATEMENTS = [
    (f"{TO_DIRECTORY} src", "an INSERT OVERWRITE DIRECTORY"),
    # sqlglot cannot read this one, so `runner validate` lets it pass: the run refuses it
    (f"WITH s AS (SELECT * FROM src) {TO_DIRECTORY} s", "an INSERT OVERWRITE DIRECTORY"),
    ("INSERT INTO src SELECT * FROM src", "an INSERT INTO"),
    ("CREATE TABLE made USING parquet AS SELECT * FROM src", "a CREATE TABLE"),
    ("create temporary view made as select * from src", "a CREATE TEMPORARY VIEW"),
    ("DROP VIEW src", "a DROP VIEW"),
    ("SET spark.sql.shuffle.partitions=1", "a SET"),
    ("-- first\n/* then */ SET spark.sql.shuffle.partitions=1;\n", "a SET"),
    ("ADD JAR {mine}/x.jar", "an ADD JAR"),
    ("CACHE TABLE src", "a CACHE TABLE"),
    ("REFRESH TABLE src", "a REFRESH TABLE"),
    ("MSCK REPAIR TABLE src", "an MSCK REPAIR TABLE"),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "kind"), STATEMENTS)
def test_a_transform_statement_is_refused_before_spark_runs_it(spark, tmp_path, sql, kind):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("a user's file")
    spark.range(2).createOrReplaceTempView("src")
    session = spark._jsparkSession
    warehouse = Path(spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:"))
    before = (
        file_bytes(mine),
        spark.conf.get("spark.sql.shuffle.partitions"),
        session.sparkContext().listJars().size(),
        warehouse.exists(),
    )

    with pytest.raises(UserError) as refused:
        refuse_statements(spark, sql.format(mine=mine), "p.yaml")

    assert str(refused.value).startswith(
        f"transform.sql in p.yaml is {kind} statement, not a query: the transform must be one "
        "query (SELECT, WITH ... SELECT, VALUES, TABLE t, FROM t SELECT, or a UNION"
    )
    after = (
        file_bytes(mine),
        spark.conf.get("spark.sql.shuffle.partitions"),
        session.sparkContext().listJars().size(),
        warehouse.exists(),
    )
    assert after == before  # nothing ran: no files, settings, jars or warehouse
    catalog = session.sessionState().catalog()  # temporary views only: no warehouse either
    assert catalog.getTempView("src").isDefined() and not catalog.getTempView("made").isDefined()
    assert session.sharedState().cacheManager().isEmpty()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM src",
        "SELECT * FROM src;",
        "SELECT ';' AS x, id FROM src ;; -- done; really\n",
        "/* a; */ WITH s AS (SELECT * FROM src) SELECT * FROM s",
        "VALUES (1), (2)",
        "TABLE src",
        "FROM src SELECT id",
        "SELECT id FROM src UNION SELECT id FROM src",
        "(SELECT id FROM src) INTERSECT (SELECT id FROM src);",
        "SELECT id FROM src EXCEPT SELECT id FROM src",
        "TABLE src |> WHERE id > 0",  # Spark 4's pipe syntax
    ],
)
def test_a_transform_query_passes_sparks_parser(spark, sql):
    spark.range(2).createOrReplaceTempView("src")
    refuse_statements(spark, sql, "p.yaml")  # no error
    assert spark.sql(sql).columns  # and it runs as the batch


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT * FROM src; DROP VIEW src", "Syntax error at or near 'DROP'"),
        ("SELECT id FROM src WHERE id >", "Syntax error at or near end of input"),
        ("-- nothing yet", "Syntax error at or near end of input"),
    ],
)
def test_a_transform_that_does_not_parse_shows_sparks_error(spark, sql, message):
    spark.range(2).createOrReplaceTempView("src")
    with pytest.raises(UserError, match=f"^transform.sql in p.yaml: .*{message}"):
        refuse_statements(spark, sql, "p.yaml")
    assert spark._jsparkSession.sessionState().catalog().getTempView("src").isDefined()


def _nothing_written(table: Path) -> bool:
    return not table.exists() or file_bytes(table) == {}


def _with_transform(spec: Path, sql: str) -> Path:
    data = yaml.safe_load(spec.read_text())
    spec.write_text(yaml.safe_dump({**data, "transform": {"sql": sql}}, sort_keys=False))
    return spec


def test_a_run_whose_transform_is_a_statement_writes_nothing(spark, tmp_path):
    """The run's own check, whatever `runner validate` said: a user's directory stays as
    it was, and no table and no warehouse directory appear."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "data.csv").write_text("id,city\n1,a\n")
    before = file_bytes(mine)
    warehouse = Path(spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:"))
    had_warehouse = warehouse.exists()
    spec = load_spec(_spec(tmp_path, {"format": "json", "schema": SCHEMA}))
    _json_lines(tmp_path / "in" / "a.json", [json.dumps(r) for r in GOOD])
    for sql in (
        f"INSERT OVERWRITE DIRECTORY '{mine}' USING parquet SELECT * FROM src",
        "CREATE TABLE made USING parquet AS SELECT * FROM src",
    ):
        # the spec as `runner validate` would refuse it: the run refuses it again
        with pytest.raises(UserError, match="statement, not a query"):
            run_pipeline(replace(spec, transform_sql=sql), spark=spark)
    assert file_bytes(mine) == before
    assert _nothing_written(tmp_path / "table")
    assert warehouse.exists() == had_warehouse


# the ordering column: a string orders as text, only when the spec says so


def _csv(tmp_path: Path, text: str) -> None:
    (tmp_path / "in" / "a.csv").write_text(text)


def test_a_string_precombine_field_is_refused_before_anything_is_written(spark, tmp_path):
    # header but no schema: Spark reads every column of a csv file as a string
    spec = _spec(tmp_path, {"format": "csv", "options": {"header": True}})
    _csv(tmp_path, "id,city,v\n1,a,100\n")

    with pytest.raises(UserError) as refused:
        run_pipeline(load_spec(spec), spark=spark)

    assert str(refused.value) == (
        "precombine_field 'v' is a string column, so records would be ordered as text ('9' "
        "above '10'); nothing was written. Declare its type: in the source's schema "
        "(`v long`, `v timestamp`, ...) or with CAST(v AS BIGINT) AS v in transform.sql; or "
        "set target.precombine_string_order: true if text order is meant"
    )
    assert _nothing_written(tmp_path / "table")


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        # text order, as the spec says: '99' > '100', within a batch '9' > '10'
        ({"target": {"precombine_string_order": True}}, ["99", "9"]),
        ({"source": {"schema": SCHEMA}}, [100, 10]),  # the declared type orders numbers
        ({"sql": "SELECT id, city, CAST(v AS BIGINT) AS v FROM src"}, [100, 10]),
    ],
)
def test_a_string_precombine_field_orders_as_the_spec_declares(spark, tmp_path, declared, expected):
    source = {"format": "csv", "options": {"header": True}, **declared.get("source", {})}
    spec = _spec(tmp_path, source, **declared.get("target", {}))
    if "sql" in declared:
        _with_transform(spec, declared["sql"])
    _csv(tmp_path, "id,city,v\n1,a,100\n")
    run_pipeline(load_spec(spec), spark=spark)
    _csv(tmp_path, "id,city,v\n1,a,99\n2,b,9\n2,b,10\n")

    run_pipeline(load_spec(spec), spark=spark)

    # the reference: Python's own order of the declared type
    values = {1: ["100", "99"], 2: ["9", "10"]}
    cast = str if isinstance(expected[0], str) else int
    assert [max(map(cast, values[k])) for k in (1, 2)] == expected
    assert [r["v"] for r in _rows(tmp_path / "table")] == expected


def test_a_string_sequence_by_is_refused_as_the_change_feeds(spark, tmp_path):
    spec = _spec(
        tmp_path,
        {"format": "json", "schema": "id long, city string, v long, lsn string"},
        cdc={"sequence_by": "lsn"},
    )
    data = yaml.safe_load(spec.read_text())
    del data["target"]["precombine_field"]
    spec.write_text(yaml.safe_dump(data))
    _json_lines(tmp_path / "in" / "a.json", ['{"id": 1, "city": "a", "v": 1, "lsn": "10"}'])

    with pytest.raises(UserError, match=r"^cdc.sequence_by 'lsn' is a string column, so events"):
        run_pipeline(load_spec(spec), spark=spark)
    assert _nothing_written(tmp_path / "table")


# the transform's columns: each name once, and every field the spec names among them


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT id, * FROM src",
            "transform.sql in {spec} gives the same column name more than once: 'id' twice; "
            "alias them so that each column has its own name (`SELECT s.*, o.id AS order_id "
            "...`), or select each column once (names that differ only in case are one name "
            "to Spark and Delta)",
        ),
        ("SELECT id, ID, city, v, v FROM src", "more than once: 'id' and 'ID', 'v' twice; "),
        (
            "SELECT city, v FROM src",
            "the record key field 'id' is not among the transform's output columns: city, v",
        ),
        (
            "SELECT id, v FROM src",
            "the partition field 'city' is not among the transform's output columns: id, v",
        ),
        (
            "SELECT id, city FROM src",
            "the precombine field 'v' is not among the transform's output columns: id, city",
        ),
        (
            "SELECT id, city AS City, v FROM src",
            "the partition field 'city' is not among the transform's output columns: id, City, "
            "v; did you mean 'City'? names differ only in case",
        ),
    ],
)
def test_the_transforms_columns_are_checked_by_name(spark, tmp_path, sql, message):
    spec = _with_transform(_spec(tmp_path, {"format": "json", "schema": SCHEMA}), sql)
    _json_lines(tmp_path / "in" / "a.json", [json.dumps(r) for r in GOOD])

    with pytest.raises(UserError) as refused:
        run_pipeline(load_spec(spec), spark=spark)

    assert message.format(spec=spec) in str(refused.value)
    assert _nothing_written(tmp_path / "table")


def test_a_source_without_a_transform_is_named_for_a_missing_field(spark, tmp_path):
    spec = _spec(tmp_path, {"format": "json"})  # inferred: only the run sees the names
    _json_lines(tmp_path / "in" / "a.json", ['{"ID": 1, "city": "a", "v": 1}'])
    with pytest.raises(UserError) as refused:
        run_pipeline(load_spec(spec), spark=spark)
    assert str(refused.value) == (
        "the record key field 'id' is not among the columns of source 'src': ID, city, v; "
        "did you mean 'ID'? names differ only in case"
    )


def test_a_column_whose_name_changed_case_is_named_with_both_spellings(spark, tmp_path):
    spec = _spec(tmp_path, {"format": "json"})
    _json_lines(tmp_path / "in" / "a.json", ['{"id": 1, "city": "a", "v": 1, "Amount": 2.5}'])
    run_pipeline(load_spec(spec), spark=spark)
    before = file_bytes(tmp_path / "table")
    _json_lines(tmp_path / "in" / "a.json", ['{"id": 1, "city": "a", "v": 2, "amount": 3.5}'])

    with pytest.raises(SchemaChangeError) as refused:
        run_pipeline(load_spec(spec), spark=spark)

    assert "lacks column(s) the table at" in str(refused.value)
    assert (
        "Amount (double) (did you mean 'amount'? names differ only in case: select "
        "amount AS Amount)"
    ) in str(refused.value)
    assert file_bytes(tmp_path / "table") == before
