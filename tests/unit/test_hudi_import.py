"""`runner import-hudi` without Spark: Hudi's properties format, the mapping, the refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import UserError
from runner.hudi.streamer_import import import_streamer, parse_streamer_args, read_properties

DATA = Path(__file__).resolve().parents[1] / "data" / "hudi"
PAYLOAD = "org.apache.hudi.common.model."
SOURCE = "org.apache.hudi.utilities.sources."
BASE = {
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.partitionpath.field": "city",
    "hoodie.streamer.source.dfs.root": "/data/in",
}
FLAGS = ["--target-base-path", "/lake/t", "--target-table", "t"]


def _import(props: dict[str, str], *args: str):
    flags, _, transformers = parse_streamer_args([*FLAGS, *args])
    return import_streamer({**BASE, **props}, flags, transformers)


def test_properties_are_read_as_hudi_reads_them(tmp_path):
    (tmp_path / "common.properties").write_text("a=from include\nb=1\n")
    (tmp_path / "job.properties").write_text(
        "# a comment\n"
        "include=common.properties\n"
        "b = 2\n"
        "c   spaced   value  \n"
        "d=x=y\n"
        "\n"
        "hoodie.streamer.transformer.sql=SELECT  *\tFROM <SRC>\n"
    )
    props = read_properties(tmp_path / "job.properties")
    assert props == {
        "a": "from include",
        "b": "2",  # later definitions win
        "c": "spaced value",  # no '=': the first space separates; whitespace runs collapse
        "d": "x=y",
        "hoodie.streamer.transformer.sql": "SELECT * FROM <SRC>",
    }
    (tmp_path / "loop.properties").write_text("include=loop.properties\n")
    with pytest.raises(UserError, match="include loop"):
        read_properties(tmp_path / "loop.properties")


def test_the_bundled_example_maps_every_property_or_says_why_not():
    props = read_properties(DATA / "trips.properties")
    sql = "org.apache.hudi.utilities.transform.SqlQueryBasedTransformer"
    imported = _import(props, "--transformer-class", sql, "--continuous")
    mapped = dict(imported.mapped)
    skipped = dict(imported.skipped)
    assert mapped["hoodie.streamer.source.dfs.root"].startswith("sources[0].path")
    assert skipped["hoodie.deltastreamer.source.dfs.root"].startswith("hoodie.streamer.source")
    assert skipped["hoodie.upsert.shuffle.parallelism"].startswith("Spark decides")
    assert skipped["hoodie.datasource.hive_sync.database"].startswith("no catalog sync")
    assert "--continuous --min-interval 0s" in skipped["--continuous"]
    assert skipped["hoodie.table.name"].startswith("--target-table wins")
    assert set(props) <= set(mapped) | set(skipped)


def test_sql_transformer_csv_options_and_merge_modes():
    imported = _import(
        {
            "hoodie.streamer.transformer.sql.tr1": "SELECT * FROM <SRC> JOIN <SRC> USING (id)",
            "hoodie.deltastreamer.csv.header": "true",
            "hoodie.deltastreamer.csv.sep": "|",
            "hoodie.datasource.write.payload.class": "OverwriteWithLatestAvroPayload",
        },
        "--source-class", f"{SOURCE}CsvDFSSource",
        "--transformer-class", "tr1:org.apache.hudi.utilities.transform.SqlQueryBasedTransformer",
    )  # fmt: skip
    spec = imported.spec
    assert spec["transform"]["sql"] == "SELECT * FROM src JOIN src USING (id)"
    # CsvDFSSource infers the column types without a schema provider, as the spec then does
    assert spec["sources"][0]["options"] == {"header": "true", "sep": "|", "inferSchema": "true"}
    assert spec["target"]["merge_mode"] == "commit_time"
    assert _import({}, "--source-ordering-field", "ts").spec["target"]["merge_mode"] == "event_time"
    assert _import({}).spec["target"]["merge_mode"] == "commit_time"  # Hudi 1.x: no ordering
    assert _import({}).spec["target"]["index"] == {"buckets": 256}  # Hudi's default count
    both = _import({"hoodie.datasource.write.precombine.field": "x"}, "--source-ordering-field=ts")
    assert both.spec["target"]["precombine_field"] == "ts"  # the command line wins, as in Hudi
    assert dict(both.skipped)["hoodie.datasource.write.precombine.field"].startswith(
        "--source-ordering-field wins"
    )
    mode = {"hoodie.write.record.merge.mode": "EVENT_TIME_ORDERING"}
    assert _import(mode, "--source-ordering-field=ts").spec["target"]["merge_mode"] == "event_time"


def test_csv_types_are_inferred_as_hudi_infers_them_unless_a_schema_is_given():
    csv = ["--source-class", f"{SOURCE}CsvDFSSource"]
    told = _import({"hoodie.deltastreamer.csv.inferSchema": "false"}, *csv)
    assert told.spec["sources"][0]["options"] == {"inferSchema": "true"}  # Hudi's own setting
    assert dict(told.skipped)["hoodie.deltastreamer.csv.inferSchema"].startswith("CsvDFSSource")
    schema = {"hoodie.streamer.schemaprovider.source.schema.file": "/s.avsc"}
    typed = _import({**schema, "hoodie.streamer.csv.header": "true"}, *csv)
    assert typed.spec["sources"][0]["options"] == {"header": "true"}
    assert "give sources[0].schema" in dict(typed.skipped)[next(iter(schema))]
    ordered = dict(_import({}, *csv, "--source-ordering-field", "ts").mapped)
    assert "precombine_string_order" in ordered["--source-ordering-field"]


@pytest.mark.parametrize(
    ("props", "args", "merge_mode"),
    [
        ({}, ["--payload-class", f"{PAYLOAD}PartialUpdateAvroPayload"], "partial_update"),
        (
            {"hoodie.datasource.write.payload.class": "OverwriteNonDefaultsWithLatestAvroPayload"},
            [],
            "overwrite_non_defaults",
        ),
        # Hudi 1.1 writes the payloads as a merge mode with a partial update mode
        (
            {"hoodie.write.record.merge.mode": "EVENT_TIME_ORDERING",
             "hoodie.write.partial.update.mode": "IGNORE_DEFAULTS"},
            ["--source-ordering-field", "ts"],
            "partial_update",
        ),
        ({"hoodie.table.partial.update.mode": "IGNORE_DEFAULTS"}, [], "overwrite_non_defaults"),
        ({"hoodie.table.partial.update.mode": "NONE"}, [], "commit_time"),
    ],
)  # fmt: skip
def test_partial_update_payloads_map_to_merge_modes(props, args, merge_mode):
    imported = _import(props, *args)
    assert imported.spec["target"]["merge_mode"] == merge_mode
    assert any(field.endswith(merge_mode) for _, field in imported.mapped)


@pytest.mark.parametrize(
    ("props", "args", "message"),
    [
        ({}, ["--op", "INSERT_OVERWRITE"], "--op INSERT_OVERWRITE has no equivalent"),
        ({}, ["--filter-dupes"], "HoodieStreamer refuses it too"),
        ({}, ["--source-ordering-field", "ts,seq"], "orders records by one field"),
        ({}, ["--source-class", f"{SOURCE}JsonKafkaSource"], "imports the DFS sources"),
        (
            {"hoodie.datasource.write.payload.class": "com.example.MyPayload"},
            [],
            "MyPayload: the runner merges as OverwriteWithLatestAvroPayload",
        ),
        ({"hoodie.write.record.merge.mode": "CUSTOM"}, [], "CUSTOM: only"),
        (
            {"hoodie.write.partial.update.mode": "FILL_DEFAULTS"},
            [],
            "FILL_DEFAULTS: the runner's partial updates keep",
        ),
        ({"hoodie.streamer.source.dfs.root": ""}, [], "no source path"),
        ({}, ["--transformer-class", "org.example.MyTransformer"], "only SqlQueryBasedTrans"),
    ],
)  # fmt: skip
def test_settings_without_an_equivalent_stop_the_import(props, args, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        _import(props, *args)


def test_an_import_that_does_not_validate_writes_nothing_and_names_the_property(tmp_path):
    from click.testing import CliRunner

    from runner.cli import cli

    (tmp_path / "job.properties").write_text(
        "hoodie.datasource.write.recordkey.field=id\n"
        "hoodie.datasource.write.keygenerator.class=org.apache.hudi.keygen.ComplexKeyGenerator\n"
        "hoodie.streamer.source.dfs.root=in\n"
    )
    out = tmp_path / "spec.yaml"
    result = CliRunner().invoke(
        cli,
        ["import-hudi", str(tmp_path / "job.properties"), *FLAGS, "-o", str(out)],
    )
    assert isinstance(result.exception, UserError)
    said = str(result.exception)
    assert said.startswith("the imported spec does not validate")
    assert "target.key_generator" in said and "at least one partition field" in said
    assert str(tmp_path) not in said
    assert list(tmp_path.iterdir()) == [tmp_path / "job.properties"]  # no spec, no temp file
