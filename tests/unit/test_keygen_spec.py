"""Key generator settings without a JVM: Joda patterns, zones, Hudi properties, validation."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import cli
from runner.spec import load_spec
from runner.spec.timebased import (
    resolve_zone,
    spark_format_pattern,
    spark_parse_patterns,
    split_formats,
)

P = "hoodie.keygen.timebased."
OLD = "hoodie.deltastreamer.keygen.timebased."
KG = "org.apache.hudi.keygen."

HEAD = """\
name: k
sources:
  - name: s
    format: json
    path: in
target:
  path: t
  operation: insert
  index:
    buckets: 4
"""


def _spec(tmp_path: Path, target_extra: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + textwrap.indent(textwrap.dedent(target_extra), "  "))
    return path


def _problems(tmp_path: Path, target_extra: str) -> list[str]:
    path = _spec(tmp_path, target_extra)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2, result.stdout
    return [line.replace(str(path), "p.yaml") for line in result.stdout.splitlines()]


@pytest.mark.parametrize(
    ("zone", "expected"),
    [
        ("EST", "America/New_York"),  # Joda's region, with DST; not Spark's fixed -05:00
        ("GMT+8:00", "+08:00"),
        ("GMT-0530", "-05:30"),
        ("GMT+0", "UTC"),
        ("GMT", "UTC"),
        ("UTC", "UTC"),
        ("Europe/Paris", "Europe/Paris"),
        ("CTT", "Asia/Shanghai"),
        ("Mars/Olympus", None),  # Hudi: silently GMT; we refuse it
        ("GMT+25", None),
    ],
)
def test_zones_resolve_as_java_then_joda_would(zone, expected):
    assert resolve_zone(zone) == expected


@pytest.mark.parametrize(
    ("joda", "spark"),
    [
        ("yyyy-MM-dd hh", "yyyy'-'MM'-'dd' 'hh"),
        ("yyyy'' h 'o''clock'", "yyyy''' 'h' o''clock'"),
        ("yyyyMMddHH", "yyyyMMddHH"),
        ("MM/dd/yyyy", "MM'/'dd'/'yyyy"),
        ("yyyy/MM/dd'T'HH", "yyyy'/'MM'/'dd'T'HH"),
        ("EEEE, MMMM d", "EEEE', 'MMMM' 'd"),
        ("yy.MM", "yy'.'MM"),
        ("[yyyy]", "'['yyyy']'"),  # Joda literals that Java would read as optional sections
    ],
)
def test_output_patterns_translate(joda, spark):
    assert spark_format_pattern(joda) == spark


def test_an_offset_in_an_input_pattern_parses_every_joda_offset_form():
    assert spark_parse_patterns("yyyy-MM-dd'T'HH:mm:ssZ") == (
        "yyyy'-'MM'-'dd'T'HH':'mm':'ssX",
        "yyyy'-'MM'-'dd'T'HH':'mm':'ssXXX",
    )


@pytest.mark.parametrize(
    ("pattern", "parse", "message"),
    [
        ("xxxx-ww", True, "week-based year"),
        ("yy-MM", True, "two-digit years"),
        ("yyyy z", True, "time zone names"),
        ("yyyy-MM-dd Z", False, "not supported in an output format"),
        ("yyyy-MM-dd q", False, "not a supported Joda pattern letter"),
        ("yyyy 'oops", False, "unterminated quote"),
    ],
)
def test_unsupported_pattern_letters_are_refused(pattern, parse, message):
    with pytest.raises(ValueError, match=message):
        spark_parse_patterns(pattern) if parse else spark_format_pattern(pattern)


def test_input_format_lists_split_like_hudi():
    assert split_formats("a, b ,c", None) == ("a", "b", "c")
    assert split_formats("a|b", "") == ("a|b",)  # empty delimiter means ','
    assert split_formats("a|b", r"\|") == ("a", "b")


def test_hudi_properties_and_structured_form_build_the_same_spec(tmp_path):
    props = load_spec(
        _spec(
            tmp_path,
            f"""\
            key_generator:
              properties:
                hoodie.datasource.write.recordkey.field: id
                hoodie.datasource.write.partitionpath.field: "country:simple,ts:TIMESTAMP"
                hoodie.datasource.write.keygenerator.class: {KG}CustomAvroKeyGenerator
                hoodie.datasource.write.hive_style_partitioning: "true"
                {OLD}timestamp.type: DATE_STRING
                {OLD}input.dateformat: "yyyy-MM-dd'T'HH:mm:ssZ,yyyyMMdd"
                {OLD}input.dateformat.list.delimiter.regex: ""
                {OLD}output.dateformat: yyyy/MM/dd
                {OLD}timezone: EST
            """,
        )
    ).target.key_generator
    structured = load_spec(
        _spec(
            tmp_path,
            """\
            record_key: id
            key_generator:
              type: CUSTOM
              partition_fields: [country:SIMPLE, ts:TIMESTAMP]
              hive_style_partitioning: true
              timestamp:
                type: DATE_STRING
                input_formats: ["yyyy-MM-dd'T'HH:mm:ssZ", yyyyMMdd]
                output_format: yyyy/MM/dd
                input_timezone: America/New_York
                output_timezone: America/New_York
            """,
        )
    ).target.key_generator
    assert props == structured
    assert props.partition_fields == ("country", "ts")
    assert props.partition_types == ("SIMPLE", "TIMESTAMP")


def test_agreeing_settings_may_be_given_both_ways(tmp_path):
    spec = load_spec(
        _spec(
            tmp_path,
            """\
            record_key: [id]
            key_generator:
              type: GLOBAL_DELETE
              properties:
                hoodie.datasource.write.recordkey.field: " id "
                hoodie.datasource.write.keygenerator.type: GLOBAL_DELETE_AVRO
            """,
        )
    )
    assert spec.target.key_generator.type == "GLOBAL_DELETE"
    assert spec.target.index.hash_fields == ("id",)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            """\
            record_key: id
            key_generator:
              type: SIMPLE
              partition_fields: city
              properties:
                hoodie.datasource.write.recordkey.field: uuid
            """,
            "p.yaml:16:48: target.key_generator.properties.hoodie.datasource.write.recordkey"
            ".field: 'uuid' contradicts record_key: 'id'; give each setting once, in either form",
        ),
        (
            f"""\
            record_key: id
            key_generator:
              type: SIMPLE
              partition_fields: city
              properties:
                hoodie.datasource.write.keygenerator.class: {KG}ComplexKeyGenerator
            """,
            "target.key_generator.properties.hoodie.datasource.write.keygenerator.class: "
            "('type', 'COMPLEX') contradicts key_generator.type",
        ),
        (
            f"""\
            key_generator:
              properties:
                hoodie.datasource.write.recordkey.field: id
                hoodie.datasource.write.partitionpath.field: ts
                hoodie.datasource.write.keygenerator.type: TIMESTAMP
                {P}timestamp.type: EPOCH
                {P}output.dateformat: yyyy
            """,
            f"properties.{P}timestamp.type: 'EPOCH' is not one of: UNIX_TIMESTAMP",
        ),
        (
            """\
            record_key: id
            key_generator:
              type: TIMESTAMP
              partition_fields: ts
              timestamp:
                type: EPOCHMILLISECONDS
            """,
            "target.key_generator.timestamp.output_format: required: the Joda pattern",
        ),
        (
            """\
            record_key: id
            key_generator:
              type: CUSTOM
              partition_fields: [country, "ts:TIMESTAMP:x", "day:DUMMY"]
            """,
            "target.key_generator.partition_fields[0]: 'country' is not field:TYPE",
        ),
        (
            """\
            record_key: id
            key_generator:
              type: CUSTOM
              partition_fields: [country, "ts:TIMESTAMP:x", "day:DUMMY"]
            """,
            "partition_fields[2]: 'day:DUMMY': part type 'DUMMY' is not SIMPLE or TIMESTAMP",
        ),
        (
            """\
            record_key: id
            key_generator:
              type: TIMESTAMP
              partition_fields: ts
              timestamp: {type: DATE_STRING, output_format: yyyy}
            """,
            "timestamp.input_formats: required for DATE_STRING",
        ),
        (
            """\
            record_key: id
            key_generator:
              type: TIMESTAMP
              partition_fields: ts
              timestamp: {type: UNIX_TIMESTAMP, output_format: yyyy, timezone: Mars/Base}
            """,
            "timestamp.timezone: unknown time zone 'Mars/Base' (Hudi would silently use GMT)",
        ),
        (
            """\
            record_key: id
            key_generator:
              type: TIMESTAMP
              partition_fields: ts
              timestamp: {type: UNIX_TIMESTAMP, output_format: "yyyy-ww"}
            """,
            "output format 'yyyy-ww': pattern letter 'w'",
        ),
        (
            """\
            record_key: id
            key_generator:
              type: SIMPLE
              partition_fields: ts
              timestamp: {type: UNIX_TIMESTAMP, output_format: yyyy}
            """,
            "target.key_generator.timestamp: timestamp settings apply to TIMESTAMP",
        ),
        (
            """\
            key_generator:
              type: SIMPLE
              partition_fields: ts
            """,
            "target.record_key: required: name the record key field(s)",
        ),
        (
            """\
            key_generator:
              properties:
                hoodie.datasource.write.recordkey.field: id
                hoodie.datasource.write.partitionpath.feild: ts
                hoodie.datasource.write.keygenerator.class: org.apache.hudi.keygen.Foo
            """,
            "did you mean 'hoodie.datasource.write.partitionpath.field'?",
        ),
        (
            """\
            key_generator:
              properties:
                hoodie.datasource.write.recordkey.field: id
                hoodie.datasource.write.keygenerator.class: org.apache.hudi.keygen.Foo
            """,
            "unknown key generator class 'org.apache.hudi.keygen.Foo'",
        ),
    ],
)
def test_key_generator_problems_are_located(tmp_path, extra, expected):
    lines = _problems(tmp_path, extra)
    assert any(expected in line for line in lines), lines


def test_hudi_type_inference_picks_custom_for_typed_parts(tmp_path):
    spec = load_spec(
        _spec(
            tmp_path,
            """\
            record_key: id
            key_generator:
              partition_fields: "region:simple"
            """,
        )
    )
    assert spec.target.key_generator.type == "CUSTOM"


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        ({}, "FIELD_PREFIXED"),
        ({"hoodie.write.complex.keygen.new.encoding": "true"}, "VALUE_ONLY"),
        ({"hoodie.write.complex.keygen.new.encoding": "false"}, "FIELD_PREFIXED"),
        (
            {"hoodie.write.table.version": "8", "hoodie.write.complex.keygen.new.encoding": True},
            "VALUE_ONLY",
        ),
        (
            {"hoodie.write.table.version": "9", "hoodie.write.complex.keygen.new.encoding": True},
            "FIELD_PREFIXED",
        ),
        (
            {
                "hoodie.write.table.version": "9",
                "hoodie.table.complex.keygen.encoding": "value_only",
            },
            "VALUE_ONLY",
        ),
        ({"hoodie.table.complex.keygen.encoding": "FIELD_PREFIXED"}, "FIELD_PREFIXED"),
    ],
)
def test_hudis_single_field_complex_encoding_matrix(tmp_path, properties, expected):
    """HUDI-7001 (shared reference 1.2): the table's encoding wins, then table version >= 9
    prefixes, then the new-encoding flag asks for the bare value."""
    props = {
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.partitionpath.field": "r",
        "hoodie.datasource.write.keygenerator.class": f"{KG}ComplexKeyGenerator",
        **properties,
    }
    spec = _spec(tmp_path, "key_generator:\n  properties: " + repr(props).replace("'", '"'))
    keygen = load_spec(spec).target.key_generator
    assert (keygen.type, keygen.complex_encoding) == ("COMPLEX", expected)


def test_the_encoding_properties_are_checked_and_other_generators_ignore_them(tmp_path):
    problems = _problems(
        tmp_path,
        """
        record_key: id
        key_generator:
          type: COMPLEX
          partition_fields: r
          properties:
            hoodie.table.complex.keygen.encoding: BARE
        """,
    )
    assert any("hoodie.table.complex.keygen.encoding: 'BARE' is not one of" in p for p in problems)
    simple = _spec(
        tmp_path,
        """
        record_key: id
        key_generator:
          type: SIMPLE
          partition_fields: r
          properties: {hoodie.write.complex.keygen.new.encoding: "true"}
        """,
    )
    assert load_spec(simple).target.key_generator.complex_encoding == "FIELD_PREFIXED"
    structured = _problems(
        tmp_path,
        """
        record_key: id
        key_generator: {type: SIMPLE, partition_fields: r, complex_encoding: VALUE_ONLY}
        """,
    )
    assert any("complex_encoding: applies to COMPLEX keys, not SIMPLE" in p for p in structured)


def test_complex_without_a_partition_field_writes_the_empty_path_as_hudi_does(tmp_path):
    """Hudi's ComplexKeyGenerator takes an empty partition path field and writes "" (a
    non-partitioned table); the spec's `type: COMPLEX` without partition fields says so."""
    structured = load_spec(
        _spec(tmp_path, "record_key: [id, n]\nkey_generator: {type: COMPLEX}\n")
    ).target.key_generator
    props = load_spec(
        _spec(
            tmp_path,
            f"""\
            key_generator:
              properties:
                hoodie.datasource.write.recordkey.field: id,n
                hoodie.datasource.write.partitionpath.field: ""
                hoodie.datasource.write.keygenerator.class: {KG}ComplexKeyGenerator
            """,
        )
    ).target.key_generator
    assert structured == props
    assert (props.type, props.partition_fields) == ("COMPLEX", ())
    # Hudi's constructor refuses the generator when the property is missing altogether
    problems = _problems(
        tmp_path,
        f"""\
        key_generator:
          properties:
            hoodie.datasource.write.recordkey.field: id,n
            hoodie.datasource.write.keygenerator.class: {KG}ComplexKeyGenerator
        """,
    )
    assert any(
        "hoodie.datasource.write.partitionpath.field is not set" in p and 'set it to ""' in p
        for p in problems
    ), problems


def test_consistent_logical_timestamp_is_read_from_either_form_and_checked(tmp_path):
    flag = "hoodie.datasource.write.keygenerator.consistent.logical.timestamp.enabled"

    def keygen(extra: str):
        return load_spec(_spec(tmp_path, extra)).target.key_generator

    default = keygen("record_key: id\nkey_generator: {type: SIMPLE, partition_fields: r}\n")
    assert default.consistent_logical_timestamp is False  # Hudi's default
    from_props = keygen(
        f"""\
        record_key: id
        key_generator:
          type: SIMPLE
          partition_fields: r
          properties: {{{flag}: "true"}}
        """
    )
    structured = keygen(
        """\
        record_key: id
        key_generator: {type: SIMPLE, partition_fields: r, consistent_logical_timestamp: true}
        """
    )
    assert from_props == structured and structured.consistent_logical_timestamp is True
    problems = _problems(
        tmp_path,
        f"""\
        record_key: id
        key_generator:
          type: SIMPLE
          partition_fields: r
          consistent_logical_timestamp: true
          properties: {{{flag}: "false", hoodie.datasource.write.partitionpath.urlencode: "yes"}}
        """,
    )
    assert any(
        "False contradicts key_generator.consistent_logical_timestamp" in p for p in problems
    )
    assert any("urlencode: expected true or false, got 'yes'" in p for p in problems)
