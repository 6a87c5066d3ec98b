"""The type rules of target.schema_evolution: which changes widen, which are refused, and
how a widening is recorded in the Delta schema (PROTOCOL.md, "Type Widening")."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import Schema as DeltaSchema

from runner.delta.schema import plan_schema
from runner.delta.schema_evolution import evolved_schema, widens
from runner.errors import SchemaChangeError
from runner.storage.meta_columns import META_FIELDS

WIDENINGS = [
    (pa.int8(), pa.int16()),
    (pa.int8(), pa.int64()),
    (pa.int16(), pa.int32()),
    (pa.int32(), pa.int64()),
    (pa.float32(), pa.float64()),
    (pa.int32(), pa.float64()),
    (pa.date32(), pa.timestamp("us")),
    (pa.decimal128(5, 2), pa.decimal128(7, 2)),
    (pa.decimal128(5, 2), pa.decimal128(7, 4)),
    (pa.int32(), pa.decimal128(10, 0)),
    (pa.int16(), pa.decimal128(12, 2)),
    (pa.int64(), pa.decimal128(20, 0)),
]
NOT_WIDENINGS = [
    (pa.int64(), pa.int32()),  # narrowing
    (pa.float64(), pa.float32()),
    (pa.int64(), pa.float64()),  # a long does not fit a double's 53 bits
    (pa.decimal128(5, 2), pa.decimal128(6, 4)),  # scale up by 2, precision by 1: lossy
    (pa.decimal128(7, 2), pa.decimal128(5, 2)),
    (pa.int32(), pa.decimal128(9, 0)),
    (pa.int64(), pa.decimal128(19, 0)),
    (pa.int32(), pa.decimal128(11, 2)),  # 8 digits left before the point
    (pa.date32(), pa.timestamp("us", tz="UTC")),  # Delta widens date to timestamp_ntz only
    (pa.int32(), pa.string()),
    (pa.string(), pa.int64()),
    (pa.int32(), pa.int32()),
]


@pytest.mark.parametrize(("stored", "incoming"), WIDENINGS)
def test_lossless_widenings(stored: pa.DataType, incoming: pa.DataType) -> None:
    assert widens(stored, incoming)


@pytest.mark.parametrize(("stored", "incoming"), NOT_WIDENINGS)
def test_lossy_or_narrowing_changes_do_not_widen(
    stored: pa.DataType, incoming: pa.DataType
) -> None:
    assert not widens(stored, incoming)


def _table(*fields: pa.Field) -> pa.Schema:
    return pa.schema([*META_FIELDS, *fields])


def test_widen_mode_widens_and_lists_the_change() -> None:
    plan = plan_schema(
        pa.schema([("id", pa.string()), ("n", pa.int64())]),
        _table(pa.field("id", pa.string()), pa.field("n", pa.int32())),
        "/t",
        "widen",
    )
    assert plan.file_schema.field("n").type == pa.int64()
    assert [c.describe() for c in plan.changes] == ["n: integer -> long"]
    assert plan.widens


def test_add_mode_refuses_a_widening_naming_column_types_and_fix() -> None:
    with pytest.raises(SchemaChangeError) as refused:
        plan_schema(
            pa.schema([("id", pa.string()), ("n", pa.int64())]),
            _table(pa.field("id", pa.string()), pa.field("n", pa.int32())),
            "/t",
            "add",
        )
    message = str(refused.value)
    assert "column n: the table stores integer, the input has the wider long" in message
    assert "schema_evolution" in message and "widen" in message


def test_a_narrowing_is_refused_in_every_mode() -> None:
    for mode in ("add", "widen", "none"):
        with pytest.raises(
            SchemaChangeError, match="column n: the table stores long, the input has string"
        ):
            plan_schema(
                pa.schema([("id", pa.string()), ("n", pa.string())]),
                _table(pa.field("id", pa.string()), pa.field("n", pa.int64())),
                "/t",
                mode,  # type: ignore[arg-type]
            )


def test_widen_mode_casts_a_narrower_input_up_without_change() -> None:
    plan = plan_schema(
        pa.schema([("n", pa.int16())]), _table(pa.field("n", pa.int64())), "/t", "widen"
    )
    assert plan.file_schema.field("n").type == pa.int64() and plan.changes == ()


def test_nested_fields_are_added_in_structs_lists_and_maps() -> None:
    inner = pa.struct([("a", pa.int32())])
    wider = pa.struct([("a", pa.int32()), ("b", pa.string())])
    stored = _table(
        pa.field("s", inner),
        pa.field("l", pa.list_(inner)),
        pa.field("m", pa.map_(pa.string(), inner)),
    )
    incoming = pa.schema([("s", wider), ("l", pa.list_(wider)), ("m", pa.map_(pa.string(), wider))])
    plan = plan_schema(incoming, stored, "/t", "add")
    assert [c.describe() for c in plan.changes] == ["s.b", "l.element.b", "m.value.b"]
    assert plan.file_schema.field("m").type.item_type == wider
    with pytest.raises(SchemaChangeError, match=r"field s\.b .*schema_evolution is none"):
        plan_schema(incoming, stored, "/t", "none")


def test_none_mode_refuses_a_new_column() -> None:
    with pytest.raises(SchemaChangeError, match="column note \\(string\\) that the table lacks"):
        plan_schema(
            pa.schema([("n", pa.int64()), ("note", pa.string())]),
            _table(pa.field("n", pa.int64())),
            "/t",
            "none",
        )


def test_a_missing_nested_field_is_refused() -> None:
    with pytest.raises(SchemaChangeError, match=r"lacks field s\.b"):
        plan_schema(
            pa.schema([("s", pa.struct([("a", pa.int32())]))]),
            _table(pa.field("s", pa.struct([("a", pa.int32()), ("b", pa.string())]))),
            "/t",
            "widen",
        )


def test_widenings_are_recorded_on_the_nearest_struct_field() -> None:
    stored_arrow = pa.schema(
        [
            ("n", pa.int32()),
            ("items", pa.list_(pa.struct([("price", pa.float32())]))),
            ("xs", pa.list_(pa.int16())),
        ]
    )
    incoming = pa.schema(
        [
            ("n", pa.int64()),
            ("items", pa.list_(pa.struct([("price", pa.float64())]))),
            ("xs", pa.list_(pa.int32())),
        ]
    )
    plan = plan_schema(incoming, _table(*stored_arrow), "/t", "widen")
    stored = json.loads(DeltaSchema.from_arrow(_table(*stored_arrow)).to_json())
    stored["fields"][-3]["metadata"] = {
        "delta.typeChanges": [{"fromType": "short", "toType": "integer"}]
    }
    merged = json.loads(DeltaSchema.from_arrow(plan.file_schema).to_json())
    schema = {f["name"]: f for f in evolved_schema(stored, merged, list(plan.changes))["fields"]}
    assert schema["n"]["metadata"]["delta.typeChanges"] == [
        {"fromType": "short", "toType": "integer"},  # kept from before
        {"fromType": "integer", "toType": "long"},
    ]
    price = schema["items"]["type"]["elementType"]["fields"][0]
    assert price["metadata"]["delta.typeChanges"] == [{"fromType": "float", "toType": "double"}]
    assert schema["xs"]["metadata"]["delta.typeChanges"] == [
        {"fromType": "short", "toType": "integer", "fieldPath": "element"}
    ]


def test_cast_values_casts_scalar_columns_and_still_refuses_nested_ones() -> None:
    """target.on_schema_mismatch fail or quarantine: a scalar column of another type keeps
    the table's type and is cast value by value; a struct of another shape is still refused."""
    stored = _table(
        pa.field("n", pa.int64()),
        pa.field("m", pa.int32()),
        pa.field("s", pa.struct([("a", pa.int64())])),
    )
    incoming = pa.schema(
        [("n", pa.string()), ("m", pa.int64()), ("s", pa.struct([("a", pa.int64())]))]
    )
    plan = plan_schema(incoming, stored, "/t", "add", cast_values=True)
    assert [c.describe() for c in plan.casts] == [
        "n: string values cast to long",
        "m: long values cast to integer",
    ]
    assert plan.file_schema.field("n").type == pa.int64() and plan.changes == ()
    # under widen, a wider type widens the column instead of casting its values
    widened = plan_schema(incoming, stored, "/t", "widen", cast_values=True)
    assert [c.describe() for c in widened.changes] == ["m: integer -> long"]
    assert [c.column for c in widened.casts] == ["n"]
    nested = pa.schema(
        [("n", pa.int64()), ("m", pa.int32()), ("s", pa.struct([("a", pa.string())]))]
    )
    with pytest.raises(
        SchemaChangeError, match=r"column s\.a: the table stores long, the input has string"
    ):
        plan_schema(nested, stored, "/t", "add", cast_values=True)


def test_change_files_before_schema_rewrites_are_read_under_their_new_names() -> None:
    """A change data file written before renames (and drops) reads as the latest schema
    names its columns: renames compose, a dropped column is no later column of its name."""
    from runner.delta.change_feed import ChangePlan, SchemaRewritten

    plan = ChangePlan(
        0,
        9,
        (),
        pa.schema([]),
        (
            SchemaRewritten(3, {"a": "b"}, ("c",)),
            SchemaRewritten(6, {"b": "d"}, ()),
            SchemaRewritten(8, {}, ("d",)),
        ),
    )
    gone = "\x00dropped"
    assert plan.renamed_at(2) == {"a": gone, "b": gone, "c": gone, "d": gone}
    assert plan.renamed_at(4) == {"b": gone, "d": gone}
    assert plan.renamed_at(8) == {}
    plan = ChangePlan(0, 9, (), pa.schema([]), plan.rewrites[:2])
    assert plan.renamed_at(2) == {"a": "d", "c": "\x00dropped", "b": "d"}
    assert plan.renamed_at(5) == {"b": "d"}


def test_only_checkable_casts_are_made_value_by_value() -> None:
    """An int for a date column, a number for a timestamp, binary for a string: Spark
    either cannot cast them or guesses (seconds since the epoch); refused as a whole."""
    for stored, incoming in [
        (pa.date32(), pa.int32()),
        (pa.timestamp("us"), pa.int64()),
        (pa.string(), pa.binary()),
        (pa.bool_(), pa.date32()),
    ]:
        with pytest.raises(SchemaChangeError, match="column c: the table stores"):
            plan_schema(pa.schema([("c", incoming)]), _table(pa.field("c", stored)), "/t",
                        "add", cast_values=True)  # fmt: skip
    plan = plan_schema(
        pa.schema([("c", pa.string())]), _table(pa.field("c", pa.date32())), "/t", "add", True
    )
    assert [c.describe() for c in plan.casts] == ["c: string values cast to date"]
