"""`runner validate SPEC --against TABLE`: the schema changes a run would make, told from the
spec's sources and transform without Spark, or why only Spark can tell.

Tables are made with delta-rs; tests/spark/test_schema_mismatch.py checks that a run makes
the changes this command lists."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from runner.cli import cli
from runner.delta.table_config import table_settings
from runner.delta.table_setup import TableFeaturesWanted, create_table
from runner.spec import load_spec
from runner.spec.transform_schema import transform_schema
from runner.storage.location import locate

TABLE = pa.table(
    {
        "id": pa.array([1], pa.int64()),
        "city": ["a"],
        "n": pa.array([1], pa.int32()),
        "s": pa.array([{"a": 1}], pa.struct([("a", pa.int64())])),
    }
)


def _spec(tmp_path: Path, source: dict, transform: str | None = None, **target) -> Path:
    spec = {
        "name": "v",
        "sources": [{"name": "src", "path": "in", **source}],
        **({"transform": {"sql": transform}} if transform else {}),
        "target": {
            "path": "table",
            "operation": "upsert",
            "merge_mode": "commit_time",
            "record_key": "id",
            "key_generator": {"partition_fields": "city"},
            "index": {"buckets": 2},
            **target,
        },
    }
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    (tmp_path / "in").mkdir(exist_ok=True)
    return path


def _against(tmp_path: Path, spec: Path, table: str = "table") -> tuple[int, list[str]]:
    """validate SPEC --against TABLE, after writing the spec's table with its settings."""
    target = load_spec(spec).target
    shutil.rmtree(tmp_path / "table", ignore_errors=True)
    wanted = TableFeaturesWanted()
    create_table(locate(str(tmp_path / "table")), "t", TABLE.schema, table_settings(target), wanted)
    result = CliRunner().invoke(cli, ["validate", str(spec), "--against", str(tmp_path / table)])
    lines = [line.replace(str(tmp_path), "T") for line in result.output.splitlines()]
    return result.exit_code, lines


def _parquet(tmp_path: Path, **columns: pa.Array) -> None:
    pq.write_table(pa.table(columns), tmp_path / "in" / "a.parquet")


def _wider_parquet(tmp_path: Path) -> None:
    _parquet(
        tmp_path,
        id=pa.array([1], pa.int64()),
        city=pa.array(["a"], pa.large_string()),
        n=pa.array([1], pa.int64()),
        s=pa.array([{"a": 1, "b": "x"}]),
        note=pa.array(["x"]),
    )


def test_a_parquet_input_lists_the_columns_and_fields_a_run_would_add_or_widen(tmp_path):
    spec = _spec(tmp_path, {"format": "parquet"}, schema_evolution="widen")
    _wider_parquet(tmp_path)
    code, lines = _against(tmp_path, spec)
    assert (code, lines[2:]) == (
        0,
        [
            "  widens n: integer -> long",
            "  adds field s.b (string)",
            "  adds column note (string)",
        ],
    )
    assert lines[1].startswith("against T/table (version 0; input schema from the file of source")


def test_a_change_the_mode_refuses_exits_2_with_the_run_s_own_error(tmp_path):
    spec = _spec(tmp_path, {"format": "parquet"})
    _wider_parquet(tmp_path)
    code, lines = _against(tmp_path, spec)
    assert code == 2
    assert lines[2].startswith(
        "  refused: column n: the table stores integer, the input has the wider long; "
        "target.schema_evolution is add: set it to widen"
    )
    # cast value by value instead: listed, and a run would go ahead
    spec = _spec(tmp_path, {"format": "parquet"}, on_schema_mismatch="quarantine",
                 quarantine={"path": "q"})  # fmt: skip
    code, lines = _against(tmp_path, spec)
    assert code == 0
    assert lines[2:] == [
        "  adds field s.b (string)",
        "  adds column note (string)",
        "  casts n value by value: long -> integer (a value that does not fit: "
        "target.on_schema_mismatch quarantine)",
    ]


def test_a_transform_over_a_declared_schema_is_typed_where_spark_has_no_choice(tmp_path):
    source = {"format": "json", "schema": "id long, city string, n int, s struct<a:bigint>"}
    sql = "SELECT id, city, CAST(n AS BIGINT) AS n, s, 'web' AS origin FROM src WHERE n > 0"
    spec = _spec(tmp_path, source, sql, schema_evolution="widen")
    code, lines = _against(tmp_path, spec)
    assert (code, lines[2:]) == (
        0,
        ["  widens n: integer -> long", "  adds column origin (string)"],
    )
    assert "input schema from transform.sql over the schema source 'src' declares" in lines[1]

    spec = _spec(tmp_path, source, "SELECT id, upper(city) AS city, n, s FROM src")
    code, lines = _against(tmp_path, spec)
    assert code == 1
    assert lines[1] == (
        "not compared with T/table: column city of transform.sql is `UPPER(city)`, whose "
        f"type Spark's analyzer picks; `runner run {spec} --dry-run` reads the input and "
        "lists the schema changes a run would make"
    ).replace(str(tmp_path), "T")


def test_an_inferred_schema_and_a_new_table_say_what_they_are(tmp_path):
    code, lines = _against(tmp_path, _spec(tmp_path, {"format": "json"}))
    assert code == 1 and "Spark infers the schema of source 'src' (json)" in lines[1]
    spec = _spec(tmp_path, {"format": "json", "schema": "id long, city string"})
    code, lines = _against(tmp_path, spec, table="elsewhere")
    assert (code, lines[1], lines[3]) == (
        0,
        "warning: no table at T/elsewhere, while the spec's target T/table holds one "
        "(version 0); `--against` without TABLE compares with it",
        "  a first run creates it with 2 column(s)",
    )


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT * FROM t", {"Id": pa.int64(), "s": pa.struct([("a", pa.int32())])}),
        ("WITH x AS (SELECT Id AS key FROM t) SELECT key FROM x", {"key": pa.int64()}),
        ("SELECT s.a AS a, TRUE AS flag FROM t", {"a": pa.int32(), "flag": pa.bool_()}),
        ("SELECT Id FROM t UNION ALL SELECT Id FROM t", {"Id": pa.int64()}),
        ("SELECT Id + 1 AS Id FROM t", "column Id of transform.sql is `Id + 1`"),
        ("SELECT 1 AS one FROM t", "column one of transform.sql is `1`"),
        ("SELECT id FROM t", "does not resolve here"),  # Spark would: names differ in case
    ],
)
def test_which_result_types_are_told_without_spark(sql, expected):
    tables = {"t": pa.schema([("Id", pa.int64()), ("s", pa.struct([("a", pa.int32())]))])}
    result = transform_schema(sql, tables)
    if isinstance(expected, str):
        assert isinstance(result, str) and expected in result
    else:
        assert dict(zip(result.names, result.types, strict=True)) == expected


def test_the_comparison_starts_no_jvm(tmp_path):
    spec = _spec(tmp_path, {"format": "json", "schema": "id long, city string"})
    code = (
        "import sys; from runner.cli import cli; "
        f"cli.main(['validate', {str(spec)!r}, '--against', {str(tmp_path / 'none')!r}], "
        "standalone_mode=False); "
        "assert 'pyspark.sql' not in sys.modules and 'py4j' not in sys.modules, 'Spark imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "a first run creates it" in done.stdout


def test_renames_and_drops_are_checked_and_listed_before_the_rewrite(tmp_path):
    source = {"format": "json", "schema": "id long, city string, total int, s struct<a:bigint>"}
    spec = _spec(tmp_path, source, schema_evolution="full", rename={"n": "total"})
    code, lines = _against(tmp_path, spec)
    assert (code, lines[2:]) == (0, ["  rewrites the table's files: n renamed total"])

    spec = _spec(tmp_path, {**source, "schema": "id long, city string, n bigint"},
                 schema_evolution="full", drop=["s"])  # fmt: skip
    code, lines = _against(tmp_path, spec)
    assert (code, lines[2:]) == (
        0,
        [
            "  rewrites the table's files: s dropped",
            "  rewrites the table's files: n: integer -> long (schema_evolution full)",
        ],
    )


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ({"rename": {"n": "total"}}, "target.rename: renames and drops need target.schema_"),
        (
            {"schema_evolution": "full", "rename": {"city": "town"}},
            "target.rename.city: rename city -> town: city is the partition field, which the "
            "table keeps by name",
        ),
        (
            {"schema_evolution": "full", "rename": {"n": "total"}, "precombine_field": "n"},
            "target.rename.n: n is the precombine field: renaming it away",
        ),
        ({"schema_evolution": "full", "drop": ["id"]}, "target.drop[0]: id is the record key"),
        (
            {"schema_evolution": "full", "rename": {"a": "b"}, "drop": ["b"]},
            "target.rename.a: b is also in target.drop",
        ),
    ],
)
def test_rename_and_drop_settings_are_checked_without_spark(tmp_path, target, expected):
    spec = _spec(tmp_path, {"format": "json"}, **target)
    result = CliRunner().invoke(cli, ["validate", str(spec)])
    assert result.exit_code == 2
    assert expected in result.output, result.output


@pytest.mark.parametrize(
    ("target", "entry", "role"),
    [
        (
            {"rename": {"city": "town"}, "key_generator": {"partition_fields": "town"}},
            "city: town",
            "town is the partition field",
        ),
        (
            {"rename": {"id": "key_id"}, "record_key": "key_id"},
            "id: key_id",
            "key_id is the record",
        ),
        (
            {
                "rename": {"id": "key_id"},
                "record_key": ["key_id", "city"],
                "key_generator": {"type": "COMPLEX", "partition_fields": "city"},
            },
            "id: key_id",
            "key_id is the record key field",
        ),
    ],
)
def test_a_rename_onto_a_field_the_table_stores_by_name_is_refused(tmp_path, target, entry, role):
    """The spec names the new name, as the docs once said to: the table's stored settings
    (and a COMPLEX key's text, a partition's path) hold the old one, so the run would stop
    on them after validate passed. validate stops it, on the rename entry's line."""
    spec = _spec(tmp_path, {"format": "json"}, schema_evolution="full", **target)
    result = CliRunner().invoke(cli, ["validate", str(spec)])
    assert result.exit_code == 2, result.output
    (line,) = [text for text in result.output.splitlines() if text.startswith(str(spec))]
    at = next(i for i, text in enumerate(spec.read_text().splitlines(), 1) if entry in text)
    assert line.startswith(f"{spec}:{at}:"), (line, spec.read_text())
    assert role in line and "remove this entry" in line


def test_what_a_run_would_refuse_before_rewriting_is_refused_here_too(tmp_path):
    source = {"format": "json", "schema": "id long, city string, n int, s struct<a:bigint>"}
    # a dropped column the input still has
    spec = _spec(tmp_path, source, schema_evolution="full", drop=["n"])
    code, lines = _against(tmp_path, spec)
    assert code == 2 and "the input has column(s) n, which target.drop drops" in lines[2]
    # a widening of a column the keys read, which would change its text in them
    keyed = {"format": "json", "schema": "id long, city string, n double, s struct<a:bigint>"}
    spec = _spec(tmp_path, keyed, schema_evolution="widen", record_key=["id", "n"])
    code, lines = _against(tmp_path, spec)
    assert code == 2 and "column n: the record key, partition path or bucket hash" in lines[2]


def test_parquet_files_that_disagree_and_computed_subquery_columns_are_not_guessed(tmp_path):
    spec = _spec(tmp_path, {"format": "parquet"})
    _wider_parquet(tmp_path)
    pq.write_table(pa.table({"id": pa.array([2], pa.int64())}), tmp_path / "in" / "b.parquet")
    code, lines = _against(tmp_path, spec)
    assert code == 1 and "differ in schema" in lines[1]

    source = {"format": "json", "schema": "id long, city string, n int, s struct<a:bigint>"}
    sql = "SELECT id, city, n, s FROM (SELECT id, city, coalesce(n, 0) AS n, s FROM src)"
    code, lines = _against(tmp_path, _spec(tmp_path, source, sql))
    assert code == 1 and "column n of transform.sql is `COALESCE(n, 0)`" in lines[1]
    code, lines = _against(tmp_path, _spec(tmp_path, source, "SELECT id, CAST(n AS INT) FROM src"))
    assert code == 1 and "`CAST(n AS INT)` has no alias" in lines[1]


def test_the_settings_a_run_would_refuse_are_listed_with_the_schema(tmp_path):
    """Table type, key generator, record key and partition fields differ from the table's:
    the run's own refusal, every difference; the schema is compared too."""
    spec = _spec(
        tmp_path, {"format": "json", "schema": "id long, city string, n int, s struct<a:bigint>"}
    )
    _against(tmp_path, spec)  # the table, with the settings of this spec
    changed = _spec(
        tmp_path,
        {
            "format": "json",
            "schema": "id long, city string, n int, s struct<a:bigint>, note string",
        },
        table_type="MERGE_ON_READ",
        record_key=["id", "n"],
        key_generator={"type": "COMPLEX", "partition_fields": "n"},
    )
    result = CliRunner().invoke(cli, ["validate", str(changed), "--against"])
    lines = [line.replace(str(tmp_path), "T") for line in result.output.splitlines()]
    assert result.exit_code == 2
    fix = "a table keeps the settings it was created with; write to a new target.path to change it"
    assert lines[1] == (
        "against T/table (version 0; input schema from the schema source 'src' declares; "
        "target.schema_evolution: add)"
    )
    assert lines[2] == "  refused: the spec disagrees with the table at T/table:"
    assert lines[3:] == [
        f"    table.type: table has 'COPY_ON_WRITE', spec T/v.yaml has 'MERGE_ON_READ' -> {fix}",
        f"    index.hash.fields: table has 'id', spec T/v.yaml has 'id,n' -> {fix}",
        f"    keygen.type: table has 'SIMPLE', spec T/v.yaml has 'COMPLEX' -> {fix}",
        f"    keygen.record.key: table has 'id', spec T/v.yaml has 'id,n' -> {fix}",
        f"    keygen.partition.fields: table has 'city', spec T/v.yaml has 'n' -> {fix}",
        "  adds column note (string)",
    ]


def test_against_without_a_table_compares_with_the_spec_s_own_target(tmp_path):
    spec = _spec(
        tmp_path,
        {"format": "json", "schema": "id long, city string, n int, s struct<a:bigint>, extra int"},
    )
    _against(tmp_path, spec)
    result = CliRunner().invoke(cli, ["validate", str(spec), "--against"])
    lines = [line.replace(str(tmp_path), "T") for line in result.output.splitlines()]
    assert (result.exit_code, lines[1].split(" (")[0], lines[2:]) == (
        0,
        "against T/table",
        ["  adds column extra (integer)"],
    )


def test_a_new_table_s_directory_holding_other_files_is_refused_as_a_run_refuses_it(tmp_path):
    spec = _spec(tmp_path, {"format": "json", "schema": "id long, city string"})
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "data.csv").write_text("id\n1\n")
    result = CliRunner().invoke(cli, ["validate", str(spec), "--against", str(tmp_path / "old")])
    lines = [line.replace(str(tmp_path), "T") for line in result.output.splitlines()]
    assert (result.exit_code, lines[2]) == (
        2,
        "  refused: the table T/old is not empty and holds no Delta table (data.csv); the "
        "runner creates a new table only in an empty or missing directory: choose an empty "
        "location",
    )
