"""SIMPLE, COMPLEX, NON_PARTITIONED and GLOBAL_DELETE keys, as Hudi writes them.

Expected values come from Hudi's documented behaviour (shared reference, sections 0 and 1),
buckets from the independent Murmur3 port, never from the code under test.
"""

from __future__ import annotations

import json

import pytest

from runner.commands.keys import preview_keys
from tests.helpers import keys_target
from tests.reference import bucket_of


def _keys(spark, tmp_path, key_generator: dict, record_key, records: list[dict], schema=None):
    lines = tmp_path / "records.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in records))
    target = keys_target(tmp_path, key_generator, record_key)
    return list(preview_keys(spark, target, lines, schema))


def test_simple_values_are_taken_as_they_are(spark, tmp_path):
    values = ["a,b", "x:y", "p/q", "k=v", "two words"]
    out = _keys(
        spark,
        tmp_path,
        {"type": "SIMPLE", "partition_fields": "region"},
        "id",
        [{"id": v, "region": v} for v in values],
    )
    assert [o["record_key"] for o in out] == values
    assert [o["partition_path"] for o in out] == values
    assert [o["bucket"] for o in out] == [bucket_of((v,), 8) for v in values]


def test_simple_hive_style_url_encoding_and_default_partition(spark, tmp_path):
    out = _keys(
        spark,
        tmp_path,
        {
            "type": "SIMPLE",
            "partition_fields": "region",
            "hive_style_partitioning": True,
            "url_encode": True,
        },
        "id",
        [{"id": 1, "region": "a/b c:d%é"}, {"id": 2, "region": None}, {"id": 3, "region": ""}],
        schema="id long, region string",
    )
    assert [o["partition_path"] for o in out] == [
        "region=a%2Fb c%3Ad%25é",
        "region=__HIVE_DEFAULT_PARTITION__",
        "region=__HIVE_DEFAULT_PARTITION__",
    ]


def test_simple_null_or_empty_key_is_an_error(spark, tmp_path):
    out = _keys(
        spark,
        tmp_path,
        {"type": "SIMPLE", "partition_fields": "r"},
        "id",
        [{"id": None, "r": "x"}, {"id": "", "r": "x"}],
        schema="id string, r string",
    )
    assert out == [
        {"error": 'recordKey value: "null" for field: "id" cannot be null or empty.'},
        {"error": 'recordKey value: "" for field: "id" cannot be null or empty.'},
    ]


def test_complex_placeholders_nested_fields_and_all_empty(spark, tmp_path):
    records = [
        {"a": {"b": {"c": "deep"}}, "k": "x", "d": "2020", "m": "03"},
        {"a": {"b": {"c": None}}, "k": "v", "d": None, "m": "04"},
        {"a": {"b": {"c": "w"}}, "k": "", "d": "", "m": "05"},
        {"a": {"b": {"c": None}}, "k": "", "d": "2021", "m": "06"},
    ]
    out = _keys(
        spark,
        tmp_path,
        {"type": "COMPLEX", "partition_fields": ["d", "m"], "hive_style_partitioning": True},
        ["a.b.c", "k"],
        records,
        schema="a struct<b: struct<c: string>>, k string, d string, m string",
    )
    assert out[0] == {
        "record_key": "a.b.c:deep,k:x",
        "partition_path": "d=2020/m=03",
        "bucket": bucket_of(("deep", "x"), 8),  # hash fields default to the whole key
    }
    assert out[1]["record_key"] == "a.b.c:__null__,k:v"
    assert out[1]["partition_path"] == "d=__HIVE_DEFAULT_PARTITION__/m=04"
    assert out[2]["record_key"] == "a.b.c:w,k:__empty__"
    assert out[2]["partition_path"] == "d=__HIVE_DEFAULT_PARTITION__/m=05"
    assert out[3] == {
        "error": 'recordKey values: "a.b.c:__null__,k:__empty__" for fields: [a.b.c, k] '
        "cannot be entirely null or empty."
    }


def test_single_field_complex_key_is_field_prefixed(spark, tmp_path):
    out = _keys(
        spark, tmp_path, {"type": "COMPLEX", "partition_fields": "r"}, "id", [{"id": 5, "r": "x"}]
    )
    assert out[0]["record_key"] == "id:5"


def test_single_field_complex_key_value_only_as_hudi_0_14_1_to_1_0_2_wrote(spark, tmp_path):
    key_generator = {"type": "COMPLEX", "partition_fields": "r", "complex_encoding": "VALUE_ONLY"}
    records = [{"id": 5, "r": "x"}, {"id": None, "r": "x"}]
    out = _keys(spark, tmp_path, key_generator, "id", records)
    assert out[0]["record_key"] == "5" and out[0]["partition_path"] == "x"
    assert out[1] == {"error": 'recordKey value: "null" for field: "id" cannot be null or empty.'}
    two = _keys(spark, tmp_path, key_generator, ["id", "r"], records[:1])
    assert two[0]["record_key"] == "id:5,r:x"  # several fields: always field:value pairs


@pytest.mark.parametrize(
    ("kind", "record_key", "expected"),
    [
        ("NON_PARTITIONED", "id", "7"),
        ("NON_PARTITIONED", ["id", "n"], "id:7,n:1.5"),
        ("GLOBAL_DELETE", "id", "id:7"),
        ("GLOBAL_DELETE", ["id", "n"], "id:7,n:1.5"),
    ],
)
def test_unpartitioned_generators(spark, tmp_path, kind, record_key, expected):
    out = _keys(spark, tmp_path, {"type": kind}, record_key, [{"id": 7, "n": 1.5}])
    assert out == [{"record_key": expected, "partition_path": "", "bucket": out[0]["bucket"]}]
    fields = record_key if isinstance(record_key, list) else [record_key]
    assert out[0]["bucket"] == bucket_of(tuple({"id": "7", "n": "1.5"}[f] for f in fields), 8)


def test_a_composite_key_value_that_would_render_another_records_key_is_an_error(spark, tmp_path):
    """Hudi's encoding renders `a="x6,b:1", b="2"` and `a="x6", b="1,b:2"` both as
    `a:x6,b:1,b:2`, and a value `__null__` as a null renders: such records are refused
    with the reason, never given one shared key."""
    records = [
        {"a": "x6,b:1", "b": "2"},
        {"a": "x6", "b": "1,b:2"},
        {"a": "__null__", "b": "3"},
        {"a": "y", "b": "__empty__"},
        {"a": "x,y", "b": "b:z"},  # a comma or a colon alone renders one key only
        {"a": None, "b": "4"},
    ]
    out = _keys(spark, tmp_path, {"type": "COMPLEX", "partition_fields": "b"}, ["a", "b"], records)
    assert 'field "a" holds ",b:", the separator' in out[0]["error"]
    assert 'field "b" holds ",b:", the separator' in out[1]["error"]
    assert 'field "a" is "__null__", the placeholder of a null value' in out[2]["error"]
    assert 'field "b" is "__empty__", the placeholder of an empty value' in out[3]["error"]
    assert out[4]["record_key"] == "a:x,y,b:b:z"
    assert out[5]["record_key"] == "a:__null__,b:4"


def test_complex_without_a_partition_field_writes_the_empty_path(spark, tmp_path):
    """As Hudi's ComplexKeyGenerator with an empty partition path field: a table of one
    partition, "", as NON_PARTITIONED writes it."""
    out = _keys(spark, tmp_path, {"type": "COMPLEX"}, ["id", "n"], [{"id": "a", "n": None}])
    assert (out[0]["record_key"], out[0]["partition_path"]) == ("id:a,n:__null__", "")


def test_a_null_struct_on_the_way_to_a_composite_key_field_is_hudis_error(spark, tmp_path):
    """Hudi's insert and upsert look a composite key's fields up strictly: `a.b` of a null
    `a` does not exist (its bulk_insert writes `a.b:__null__`; docs/keygen-hudi.md)."""
    out = _keys(
        spark,
        tmp_path,
        {"type": "COMPLEX", "partition_fields": "a.c"},
        ["a.b", "k"],
        [{"a": None, "k": "y"}, {"a": {"b": None, "c": None}, "k": "z"}],
        schema="a struct<b: string, c: string>, k string",
    )
    assert out[0] == {"error": "Record key field 'a.b' does not exist in the input record"}
    assert (out[1]["record_key"], out[1]["partition_path"]) == (
        "a.b:__null__,k:z",
        "__HIVE_DEFAULT_PARTITION__",
    )


EVENTS = [
    {"str": "abc", "at": "2014-01-01T23:00:01", "n": "2014-01-01T23:00:01"},
    {"str": "def", "at": "2014-11-30T12:40:32.125", "n": "2014-11-30T12:40:32.125"},
]


@pytest.mark.parametrize(
    ("logical", "keys"),
    [
        # Hudi's default: the epoch microseconds its insert and upsert write
        (False, ["str:abc,at:1388617201000000", "str:def,at:1417351232125000"]),
        # consistent logical timestamps: java.sql.Timestamp's text (Hudi's
        # TestGenericRecordAndRowConsistency), in the session's time zone (UTC)
        (True, ["str:abc,at:2014-01-01 23:00:01.0", "str:def,at:2014-11-30 12:40:32.125"]),
    ],
)
def test_timestamp_key_fields_as_hudi_writes_them(spark, tmp_path, logical, keys):
    from runner.commands.key_bucket import KeyHasher, key_hasher
    from runner.delta.table_config import table_settings

    key_generator = {
        "type": "COMPLEX",
        "partition_fields": "n",
        "consistent_logical_timestamp": logical,
    }
    out = _keys(
        spark,
        tmp_path,
        key_generator,
        ["str", "at"],
        EVENTS,
        schema="str string, at timestamp, n timestamp_ntz",
    )
    assert [o["record_key"] for o in out] == keys
    # a timestamp_ntz is its epoch microseconds whatever the flag, as in Hudi
    assert [o["partition_path"] for o in out] == ["1388617201000000", "1417351232125000"]
    # the bucket hashes the key's own text: a key read back names its bucket
    hasher = key_hasher(table_settings(keys_target(tmp_path, key_generator, ["str", "at"])))
    assert isinstance(hasher, KeyHasher), hasher
    assert [hasher.hash_of(k) % 8 for k in keys] == [o["bucket"] for o in out]
