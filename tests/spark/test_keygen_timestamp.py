"""TIMESTAMP and CUSTOM keys, as Hudi writes them.

Expected values are the worked examples of Hudi's key generation docs and the vectors of the
shared reference (section 1.5, 1.6), or hand-derived from Hudi's rules; never produced by
the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.commands.keys import preview_keys, target_from_properties
from runner.keygen import build_key_generator
from tests.helpers import keys_target

OLD = "hoodie.deltastreamer.keygen.timebased."
TS_KEYGEN = {
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.partitionpath.field": "ts",
    "hoodie.datasource.write.keygenerator.type": "TIMESTAMP",
}


def _lines(tmp_path: Path, records: list[dict]) -> Path:
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _paths(spark, tmp_path, props: dict, values: list, schema: str) -> list:
    target, _ = target_from_properties({**TS_KEYGEN, **props})
    records = _lines(tmp_path, [{"id": str(i), "ts": v} for i, v in enumerate(values)])
    return [
        o.get("partition_path", o.get("error"))
        for o in preview_keys(spark, target, records, schema)
    ]


def _structured(spark, tmp_path, keygen: dict, records: list[dict], schema: str, rk="id"):
    target = keys_target(tmp_path, keygen, rk)
    return list(preview_keys(spark, target, _lines(tmp_path, records), schema))


# Hudi docs, "Key Generation", TimestampBasedKeyGenerator examples, in order.
DOC_EXAMPLES = [
    (
        "Timestamp is GMT",
        {"timestamp.type": "EPOCHMILLISECONDS", "output.dateformat": "yyyy-MM-dd hh",
         "timezone": "GMT+8:00"},
        "long",
        [1578283932000, None],
        ["2020-01-06 12", "1970-01-01 08"],
    ),
    (
        # The docs print "1970-01-01 12:00:00" for null: that is Hudi's intermediate string
        # (epoch + 1 ms in the input format, in GMT), not a path in the output format. The
        # path Hudi's code makes in GMT+8 is below; docs/keygen.md explains.
        "Timestamp is DATE_STRING",
        {"timestamp.type": "DATE_STRING", "output.dateformat": "yyyy-MM-dd hh",
         "timezone": "GMT+8:00", "input.dateformat": "yyyy-MM-dd hh:mm:ss"},
        "string",
        ["2020-01-06 12:12:12", None],
        ["2020-01-06 12", "1970-01-01 08"],
    ),
    (
        "Scalar examples",
        {"timestamp.type": "SCALAR", "output.dateformat": "yyyy-MM-dd hh", "timezone": "GMT",
         "timestamp.scalar.time.unit": "days"},
        "long",
        [20000, None],
        ["2024-10-04 12", "1970-01-02 12"],
    ),
    (
        "ISO8601WithMsZ with Single Input format",
        {"timestamp.type": "DATE_STRING", "input.dateformat": "yyyy-MM-dd'T'HH:mm:ss.SSSZ",
         "input.dateformat.list.delimiter.regex": "", "input.timezone": "",
         "output.dateformat": "yyyyMMddHH", "output.timezone": "GMT"},
        "string",
        ["2020-04-01T13:01:33.428Z"],
        ["2020040113"],
    ),
    (
        "ISO8601WithMsZ with Multiple Input formats / ISO8601NoMs with offset",
        {"timestamp.type": "DATE_STRING",
         "input.dateformat": "yyyy-MM-dd'T'HH:mm:ssZ,yyyy-MM-dd'T'HH:mm:ss.SSSZ",
         "input.dateformat.list.delimiter.regex": "", "input.timezone": "",
         "output.dateformat": "yyyyMMddHH", "output.timezone": "UTC"},
        "string",
        ["2020-04-01T13:01:33.428Z", "2020-04-01T13:01:33-05:00"],
        ["2020040113", "2020040118"],
    ),
    (
        "Input as short date string and expect date in date format",
        {"timestamp.type": "DATE_STRING",
         "input.dateformat": "yyyy-MM-dd'T'HH:mm:ssZ,yyyy-MM-dd'T'HH:mm:ss.SSSZ,yyyyMMdd",
         "input.dateformat.list.delimiter.regex": "", "input.timezone": "UTC",
         "output.dateformat": "MM/dd/yyyy", "output.timezone": "UTC"},
        "string",
        ["20200401"],
        ["04/01/2020"],
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("props", "kind", "values", "expected"),
    [e[1:] for e in DOC_EXAMPLES],
    ids=[e[0] for e in DOC_EXAMPLES],
)
def test_hudi_docs_worked_examples(spark, tmp_path, props, kind, values, expected):
    props = {OLD + k: v for k, v in props.items()}
    assert _paths(spark, tmp_path, props, values, f"id string, ts {kind}") == expected


def test_reference_vectors_units_zones_and_truncation(spark, tmp_path):
    def ts(**props):
        return {f"hoodie.keygen.timebased.{k.replace('_', '.')}": v for k, v in props.items()}

    gmt8 = {"output_dateformat": "yyyy-MM-dd hh", "timezone": "GMT+8:00"}
    assert _paths(
        spark,
        tmp_path,
        ts(timestamp_type="EPOCHMICROSECONDS", **gmt8),
        [1578283932123456, -1, None],
        "id string, ts long",
    ) == ["2020-01-06 12", "1970-01-01 08", "1970-01-01 08"]  # -1 µs truncates to 0 ms
    assert _paths(
        spark,
        tmp_path,
        ts(timestamp_type="EPOCHMILLISECONDS", output_dateformat="yyyy-MM-dd hh", timezone="GMT"),
        [1578283932000],
        "id string, ts long",
    ) == ["2020-01-06 04"]
    # Doubles and decimals truncate toward zero (longValue()); -1.9 s is -1 s.
    assert _paths(
        spark,
        tmp_path,
        ts(
            timestamp_type="UNIX_TIMESTAMP", output_dateformat="yyyy-MM-dd HH:mm:ss", timezone="UTC"
        ),
        [1578283932.9, -1.9],
        "id string, ts double",
    ) == ["2020-01-06 04:12:12", "1969-12-31 23:59:59"]
    assert _paths(
        spark,
        tmp_path,
        ts(
            timestamp_type="EPOCHMILLISECONDS",
            output_dateformat="yyyy-MM-dd HH:mm:ss.SSS",
            timezone="UTC",
        ),
        ["1578283932000.0001"],
        "id string, ts decimal(20,4)",
    ) == ["2020-01-06 04:12:12.000"]
    # EST is America/New_York (EDT in April), as Joda reads it.
    assert _paths(
        spark,
        tmp_path,
        ts(
            timestamp_type="EPOCHMILLISECONDS",
            output_dateformat="yyyy-MM-dd HH",
            output_timezone="EST",
        ),
        [1585746093000, 1578283932000],
        "id string, ts long",
    ) == ["2020-04-01 09", "2020-01-05 23"]
    # SCALAR hours; and the input zone alone also sets the output zone for strings.
    assert _paths(
        spark, tmp_path, ts(timestamp_type="SCALAR", timestamp_scalar_time_unit="HOURS",
                            output_dateformat="yyyy/MM/dd/HH", timezone="UTC"),
        [438412], "id string, ts long",
    ) == ["2020/01/06/04"]  # fmt: skip


def test_strings_zones_offsets_and_unparseable_values(spark, tmp_path):
    out = _structured(
        spark,
        tmp_path,
        {
            "type": "TIMESTAMP",
            "partition_fields": "ts",
            "hive_style_partitioning": True,
            "timestamp": {
                "type": "DATE_STRING",
                "input_formats": ["yyyy-MM-dd HH:mm", "yyyy-MM-dd'T'HH:mm:ssZZ"],
                "input_timezone": "Asia/Kolkata",
                "output_format": "yyyy-MM-dd/HH",
                "output_timezone": "UTC",
            },
        },
        [
            {"id": "a", "ts": "2020-01-06 05:30"},  # no offset: read in Asia/Kolkata
            {"id": "b", "ts": "2020-01-06T05:30:00+05:30"},  # the offset decides the instant
            {"id": "c", "ts": "2020-01-06T00:00:00Z"},
            {"id": "d", "ts": "2020-01-06 05:30 trailing"},  # Joda needs the whole string
            {"id": "e", "ts": "06/01/2020"},
        ],
        "id string, ts string",
    )
    assert [o.get("partition_path") for o in out[:3]] == [
        "ts=2020-01-06/00",
        "ts=2020-01-06/00",
        "ts=2020-01-06/00",
    ]
    assert out[3] == {"error": "Unable to parse input partition field: 2020-01-06 05:30 trailing"}
    assert out[4] == {"error": "Unable to parse input partition field: 06/01/2020"}


def test_without_zones_a_string_keeps_the_offset_it_was_written_in(spark, tmp_path):
    out = _structured(
        spark,
        tmp_path,
        {
            "type": "TIMESTAMP",
            "partition_fields": "ts",
            "url_encode": True,
            "timestamp": {
                "type": "MIXED",
                "input_formats": "yyyy-MM-dd'T'HH:mm:ssZ",
                "output_format": "yyyy-MM-dd HH:mm",
            },
        },
        [{"id": "a", "ts": "2020-04-01T13:01:33-05:00"}],
        "id string, ts string",
    )
    assert out[0]["partition_path"] == "2020-04-01 13%3A01"


def test_custom_combines_simple_and_timestamp_parts(spark, tmp_path):
    keygen = {
        "type": "CUSTOM",
        "partition_fields": ["place.country:SIMPLE", "ts_ms:timestamp"],
        "hive_style_partitioning": True,
        "url_encode": True,
        "timestamp": {
            "type": "DATE_STRING",
            "input_formats": "yyyy-MM-dd",
            "output_format": "yyyyMMdd",
        },
    }
    schema = "id string, k2 string, place struct<country: string>, ts_ms string"
    out = _structured(
        spark,
        tmp_path,
        keygen,
        [
            {"id": "1", "k2": "x", "place": {"country": "a/b c:d%é"}, "ts_ms": "2020-03-21"},
            {"id": "", "k2": None, "place": {"country": ""}, "ts_ms": "2020-03-22"},
            {"id": "1,2", "k2": "y:z", "place": None, "ts_ms": "nope"},
        ],
        schema,
        rk=["id", "k2"],
    )
    assert out[0] == {
        "record_key": "id:1,k2:x",
        "partition_path": "place.country=a%2Fb c%3Ad%25é/ts_ms=20200321",
        "bucket": out[0]["bucket"],
    }
    assert out[1]["error"] == (
        'recordKey values: "id:__empty__,k2:__null__" for fields: [id, k2] '
        "cannot be entirely null or empty."
    )
    assert out[2] == {"error": "Unable to parse input partition field: nope"}


def test_custom_single_key_field_and_reference_vectors(spark, tmp_path):
    out = _structured(
        spark,
        tmp_path,
        {
            "type": "CUSTOM",
            "partition_fields": "timestamp:simple,ts_ms:timestamp",
            "hive_style_partitioning": True,
            "timestamp": {
                "type": "DATE_STRING",
                "input_formats": "yyyy-MM-dd",
                "output_format": "yyyyMMdd",
            },
        },
        [{"_row_key": "key1", "timestamp": 4357686, "ts_ms": "2020-03-21"}],
        "_row_key string, timestamp long, ts_ms string",
        rk="_row_key",
    )
    assert out[0]["record_key"] == "key1"
    assert out[0]["partition_path"] == "timestamp=4357686/ts_ms=20200321"


def test_a_string_field_under_a_numeric_type_is_a_clear_error(spark, tmp_path):
    from runner.errors import UserError

    with pytest.raises(UserError, match="reads numbers"):
        _paths(
            spark,
            tmp_path,
            {
                "hoodie.keygen.timebased.timestamp.type": "EPOCHMILLISECONDS",
                "hoodie.keygen.timebased.output.dateformat": "yyyy",
            },
            ["1578283932000"],
            "id string, ts string",
        )


def test_settings_name_everything_that_changes_paths(tmp_path):
    target = keys_target(
        tmp_path,
        {
            "type": "TIMESTAMP",
            "partition_fields": "ts",
            "timestamp": {
                "type": "DATE_STRING",
                "input_formats": ["yyyy-MM-dd", "yyyy,MM"],
                "output_format": "yyyy/MM",
                "timezone": "EST",
            },
        },
        "id",
    )
    settings = build_key_generator(target.key_generator).settings()
    assert settings["runner.keygen.type"] == "TIMESTAMP"
    assert settings["runner.keygen.timestamp.input.formats"] == '["yyyy-MM-dd", "yyyy,MM"]'
    assert settings["runner.keygen.timestamp.input.timezone"] == "America/New_York"
    assert settings["runner.keygen.timestamp.output.timezone"] == "America/New_York"
    assert settings["runner.keygen.timestamp.output.format"] == "yyyy/MM"
    assert all(isinstance(v, str) for v in settings.values())


def test_a_table_remembers_its_timestamp_settings(spark, tmp_path):
    """Changing the output format of a TIMESTAMP table is refused: paths would move."""
    import pandas as pd

    from runner.errors import TableMismatchError
    from runner.pipeline.run import run_pipeline
    from runner.spec import load_spec
    from tests.helpers import write_batch, write_spec

    def target(output_format: str) -> dict:
        return {
            "operation": "upsert",
            "record_key": "id",
            "precombine_field": "ts",
            "key_generator": {
                "type": "TIMESTAMP",
                "partition_fields": "ts",
                "timestamp": {
                    "type": "EPOCHMILLISECONDS",
                    "output_format": output_format,
                    "timezone": "UTC",
                },
            },
            "index": {"buckets": 2},
        }

    write_batch(tmp_path, pd.DataFrame({"id": [1], "ts": [1578283932000]}))
    first = run_pipeline(load_spec(write_spec(tmp_path, target("yyyy/MM/dd"))), spark=spark)
    assert first.version is not None
    with pytest.raises(TableMismatchError, match=r"keygen\.timestamp\.output"):
        run_pipeline(load_spec(write_spec(tmp_path, target("yyyy-MM-dd"))), spark=spark)


def test_date_string_on_a_number_reads_only_a_null(spark, tmp_path):
    """Hudi's TestTimestampBasedKeyGenerator: DATE_STRING on a long column holding null
    gives the stand-in text's path; a number has no path (Hudi fails the record)."""
    props = {
        OLD + "timestamp.type": "DATE_STRING",
        OLD + "input.dateformat": "yyyy-MM-dd hh:mm:ss",
        OLD + "output.dateformat": "yyyy-MM-dd hh:mm:ss",
        OLD + "timezone": "GMT",
    }
    null, number = _paths(spark, tmp_path, props, [None, 5], "id string, ts long")
    assert null == "1970-01-01 12:00:00"
    assert number.startswith("Unable to parse input partition field: 5; DATE_STRING reads")


CREATED = "2021-12-03T06:43:26Z"  # 1638513806000000 µs, Hudi's testScalarWithLogicalType
CLT = "hoodie.datasource.write.keygenerator.consistent.logical.timestamp.enabled"


@pytest.mark.parametrize(
    ("kind", "logical", "expected"),
    [
        # Hudi's testScalarWithLogicalType: the instant, and a null as 1 µs
        ("SCALAR", "true", ["2021/12/03", "1970/01/01"]),
        # Hudi's default reads the timestamp's epoch µs in the unit: right for µs ...
        ("SCALAR", "false", ["2021/12/03", "1970/01/01"]),
        ("EPOCHMILLISECONDS", "true", ["2021/12/03", "1970/01/01"]),
        # ... a year past 9999 for ms, which Hudi's upsert writes and the runner refuses
        ("EPOCHMILLISECONDS", "false", ["error", "1970/01/01"]),
    ],
)
def test_a_timestamp_column_under_timestamp_types(spark, tmp_path, kind, logical, expected):
    props = {
        "hoodie.keygen.timebased.timestamp.type": kind,
        "hoodie.keygen.timebased.timestamp.scalar.time.unit": "MICROSECONDS",
        "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd",
        "hoodie.keygen.timebased.timezone": "GMT",
        CLT: logical,
    }
    got = _paths(spark, tmp_path, props, [CREATED, None], "id string, ts timestamp")
    if expected[0] == "error":
        assert "consistent_logical_timestamp: true" in got[0], got
        got[0] = "error"
    assert got == expected
