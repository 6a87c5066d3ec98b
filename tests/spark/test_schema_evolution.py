"""target.schema_evolution through runs on both table types: a column widened (Delta's type
widening), a field added inside a struct, a list's element struct and a map's value struct,
changes refused with the table untouched, and an expansion of a widened table. Every table
is read back with the runner's reader, delta-spark, delta-rs and Polars and compared with a
pandas reference (delta-rs 1.6.6 and Polars refuse a table with the typeWidening feature:
the tests pin the error they give)."""

from __future__ import annotations

import json

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import DeltaProtocolError

from runner.actions.compact import compact_table
from runner.actions.expand import ExpansionRequest, expand_table
from runner.commands.read import read_rows
from runner.errors import SchemaChangeError
from runner.pipeline.context import RunOptions
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.delta_spark import delta_spark_ready, read_with_delta_spark
from tests.helpers import write_batch, write_spec

DATA = ["id", "city", "ts", "n"]
SMALL = pa.schema(
    [("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64()), ("n", pa.int32())]
)
WIDE = SMALL.set(3, pa.field("n", pa.int64()))


def _target(table_type: str, mode: str = "widen", **extra) -> dict:
    return {
        "operation": "upsert",
        "record_key": "id",
        "precombine_field": "ts",
        "key_generator": {"partition_fields": "city"},
        "index": {"buckets": 2},
        "table_type": table_type,
        "schema_evolution": mode,
        **extra,
    }


def _rows(ids, ts: int, big: bool = False) -> pd.DataFrame:
    ids = list(ids)
    return pd.DataFrame(
        {
            "id": ids,
            "city": ["ams" if i % 2 else "sf" for i in ids],
            "ts": [ts] * len(ids),
            "n": [(2**40 + i if big else i * 10) for i in ids],
        }
    )


def _upserted(ref: pd.DataFrame, batch: pd.DataFrame) -> pd.DataFrame:
    kept = ref[~ref["id"].isin(batch["id"])]
    return pd.concat([kept, batch]).sort_values("id").reset_index(drop=True)


def _sorted(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    return frame[columns].sort_values("id").reset_index(drop=True)


def _runner_rows(table) -> pd.DataFrame:
    return read_rows(str(table)).rows.to_pandas()


def _check_readers(spark, table, expected: pd.DataFrame, columns: list[str], widened: bool):
    """The runner's reader and delta-spark give `expected`; delta-rs and Polars too, or,
    on a widened table, refuse it with the error users will see."""
    pd.testing.assert_frame_equal(_sorted(_runner_rows(table), columns), expected, obj="runner")
    if delta_spark_ready(spark) is None:
        got = _sorted(pd.DataFrame(read_with_delta_spark(spark, table)), columns)
        pd.testing.assert_frame_equal(got, expected, check_dtype=False, obj="delta-spark")
    if widened:
        with pytest.raises(DeltaProtocolError, match=r"typeWidening.*not yet supported"):
            DeltaTable(str(table)).to_pyarrow_table()
        with pytest.raises(DeltaProtocolError, match=r"reader features \['typeWidening'\]"):
            pl.read_delta(str(table))
        return
    scan = DeltaTable(str(table))
    rows = pa.table(scan.scan().read_all()) if table_type_of(scan) else scan.to_pyarrow_table()
    got = _sorted(rows.to_pandas(), columns)
    pd.testing.assert_frame_equal(got, expected, check_dtype=False, obj="delta-rs")
    got = _sorted(pl.read_delta(str(table)).to_pandas(), columns)
    pd.testing.assert_frame_equal(got, expected, check_dtype=False, obj="polars")


def table_type_of(table: DeltaTable) -> bool:
    """A MERGE_ON_READ table (delta-rs reads it with scan(), not to_pyarrow_table())."""
    return "deletionVectors" in (table.protocol().reader_features or [])


def _widened(spark, tmp_path, table_type: str) -> tuple[pd.DataFrame, object]:
    """A table whose `n` went from int to long, after an upsert of old keys with values
    past int's range; its pandas reference."""
    spec = write_spec(tmp_path, _target(table_type))
    first = _rows(range(40), 1)
    write_batch(tmp_path, first, SMALL)
    run_pipeline(load_spec(spec), spark=spark)
    second = _rows([*range(0, 40, 3), 100, 101], 2, big=True)  # old keys and new ones
    write_batch(tmp_path, second, WIDE)
    summary = run_pipeline(load_spec(spec), spark=spark)
    assert summary.columns_added == ["n: integer -> long"]
    return _upserted(first, second), spec


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_int_widened_to_long_then_old_keys_upserted(spark, tmp_path, table_type):
    expected, spec = _widened(spark, tmp_path, table_type)
    table = tmp_path / "table"
    _check_readers(spark, table, expected, DATA, widened=True)

    # the protocol, the schema's type change record, and the change in both commits
    delta = DeltaTable(str(table))
    assert "typeWidening" in delta.protocol().reader_features
    assert "typeWidening" in delta.protocol().writer_features
    assert delta.metadata().configuration["delta.enableTypeWidening"] == "true"
    n = next(f for f in json.loads(delta.schema().to_json())["fields"] if f["name"] == "n")
    assert n["type"] == "long"
    assert n["metadata"]["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    change = {"change": "widen", "column": "n", "type": "long", "from_type": "integer"}
    infos = [
        json.loads(entry.read_text().splitlines()[0])["commitInfo"]
        for entry in sorted((table / "_delta_log").glob("*.json"))
    ]
    evolved = [i for i in infos if i["operation"] == "CHANGE COLUMN"]
    assert [i["runner"]["schema_changes"] for i in evolved] == [[change]]
    data_commit = infos[infos.index(evolved[0]) + 1]  # the run's data, right after
    assert data_commit["runner"]["schema_changes"] == [change]

    # an input in the old, narrower type is cast up; old int files merged again
    third = _rows([1, 2, 100], 3)
    write_batch(tmp_path, third, SMALL)
    assert run_pipeline(load_spec(spec), spark=spark).columns_added == []
    expected = _upserted(expected, third)
    if table_type == "MERGE_ON_READ":
        compact_table(load_spec(spec), spark=spark)  # old int files and new long ones, merged
    _check_readers(spark, table, expected, DATA, widened=True)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_an_expansion_of_a_widened_table_keeps_its_rows(spark, tmp_path, table_type):
    expected, spec = _widened(spark, tmp_path, table_type)
    expand_table(load_spec(spec), ExpansionRequest(4), spark=spark)
    _check_readers(spark, tmp_path / "table", expected, DATA, widened=True)


ADDRESS = pa.struct([("street", pa.string())])
ADDRESS_ZIP = pa.struct([("street", pa.string()), ("zip", pa.string())])


def _nested(ids, ts: int, with_zip: bool) -> tuple[pd.DataFrame, pa.Schema]:
    ids = list(ids)

    def address(i: int) -> dict:
        return {"street": f"s{i}", **({"zip": f"z{i}"} if with_zip else {})}

    frame = pd.DataFrame(
        {
            "id": ids,
            "city": ["ams" if i % 2 else "sf" for i in ids],
            "ts": [ts] * len(ids),
            "home": [address(i) for i in ids],
            "past": [[address(i), address(i + 1)] for i in ids],
            "by_kind": [[("work", address(i))] for i in ids],
        }
    )
    kind = ADDRESS_ZIP if with_zip else ADDRESS
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("city", pa.string()),
            ("ts", pa.int64()),
            ("home", kind),
            ("past", pa.list_(kind)),
            ("by_kind", pa.map_(pa.string(), kind)),
        ]
    )
    return frame, schema


def _no_zip(address):
    return {**address, "zip": None}


def _comparable(frame: pd.DataFrame) -> pd.DataFrame:
    """Nested values as JSON text: readers give maps as lists of pairs or as dicts."""
    out = frame.copy()
    for column in ("home", "past"):
        out[column] = [json.dumps(v, default=list) for v in out[column]]
    out["by_kind"] = [json.dumps(dict(v) if not isinstance(v, dict) else v) for v in out["by_kind"]]
    return out


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_field_added_inside_a_struct_a_list_and_a_map(spark, tmp_path, table_type):
    spec = write_spec(tmp_path, _target(table_type, mode="add"))
    first, small = _nested(range(20), 1, with_zip=False)
    write_batch(tmp_path, first, small)
    run_pipeline(load_spec(spec), spark=spark)
    second, wide = _nested([*range(0, 20, 4), 50], 2, with_zip=True)
    write_batch(tmp_path, second, wide)
    summary = run_pipeline(load_spec(spec), spark=spark)
    assert summary.columns_added == ["home.zip", "past.element.zip", "by_kind.value.zip"]

    before = first.copy()  # stored rows read the new field as null
    before["home"] = [_no_zip(a) for a in before["home"]]
    before["past"] = [[_no_zip(a) for a in v] for v in before["past"]]
    before["by_kind"] = [[(k, _no_zip(a)) for k, a in v] for v in before["by_kind"]]
    columns = ["id", "city", "ts", "home", "past", "by_kind"]
    expected = _comparable(_upserted(before, second)[columns])
    table = tmp_path / "table"
    assert "typeWidening" not in (DeltaTable(str(table)).protocol().writer_features or [])
    for name, frame in [
        ("runner", _runner_rows(table)),
        ("polars", pl.read_delta(str(table)).to_pandas()),
        (
            "delta-spark",
            pd.DataFrame(read_with_delta_spark(spark, table))
            if delta_spark_ready(spark) is None
            else None,
        ),
    ]:
        if frame is None:
            continue
        got = _comparable(_sorted(frame, columns))
        pd.testing.assert_frame_equal(got, expected, check_dtype=False, obj=name)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_an_incompatible_change_is_refused_with_the_table_untouched(spark, tmp_path, table_type):
    spec = write_spec(tmp_path, _target(table_type))
    write_batch(tmp_path, _rows(range(10), 1), WIDE)
    run_pipeline(load_spec(spec), spark=spark)
    table = tmp_path / "table"
    log_before = sorted(p.name for p in (table / "_delta_log").iterdir())
    narrow = _rows(range(5), 2)
    write_batch(tmp_path, narrow.astype({"n": "string"}))
    with pytest.raises(SchemaChangeError) as refused:
        run_pipeline(load_spec(spec), spark=spark)
    assert "column n: the table stores long, the input has string" in str(refused.value)
    assert "CAST(n AS BIGINT) AS n" in str(refused.value)
    assert sorted(p.name for p in (table / "_delta_log").iterdir()) == log_before
    _check_readers(spark, table, _rows(range(10), 1), DATA, widened=False)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_schema_evolution_none_refuses_a_new_column(spark, tmp_path, table_type):
    spec = write_spec(tmp_path, _target(table_type, mode="none"))
    write_batch(tmp_path, _rows(range(10), 1), WIDE)
    run_pipeline(load_spec(spec), spark=spark)
    table = tmp_path / "table"
    versions = sorted((table / "_delta_log").glob("*.json"))
    batch = _rows(range(5), 2).assign(note="x")
    write_batch(tmp_path, batch)
    with pytest.raises(SchemaChangeError, match="column note \\(string\\) that the table lacks"):
        run_pipeline(load_spec(spec), spark=spark)
    assert sorted((table / "_delta_log").glob("*.json")) == versions
    _check_readers(spark, table, _rows(range(10), 1), DATA, widened=False)


def test_a_dry_run_lists_the_widening_it_would_make_and_changes_nothing(spark, tmp_path):
    spec = write_spec(tmp_path, _target("COPY_ON_WRITE"))
    write_batch(tmp_path, _rows(range(10), 1), SMALL)
    run_pipeline(load_spec(spec), spark=spark)
    before = DeltaTable(str(tmp_path / "table"))
    write_batch(tmp_path, _rows(range(5), 2, big=True), WIDE)
    summary = run_pipeline(load_spec(spec), spark=spark, options=RunOptions(dry_run=True))
    assert summary.columns_added == ["n: integer -> long"] and summary.version is None
    after = DeltaTable(str(tmp_path / "table"))
    assert after.version() == before.version()
    assert after.schema().to_json() == before.schema().to_json()
