"""`runner import-hudi` without Spark: Hudi's properties format, the mapping, the refusals."""

from __future__ import annotations

import json
import re
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
    assert mapped["hoodie.datasource.hive_sync.database"] == "target.catalog.database"
    assert imported.spec["target"]["catalog"] == {  # HiveSyncTool: Hudi's default tool
        "type": "hive",
        "uri": "thrift://localhost:9083",  # Hudi's default metastore
        "database": "lake",
        "table": "t",
    }
    assert "--continuous --min-interval 0s" in skipped["--continuous"]
    assert skipped["hoodie.table.name"].startswith("--target-table wins")
    assert set(props) <= set(mapped) | set(skipped)


def test_hive_sync_becomes_target_catalog():
    props = {
        "hoodie.datasource.hive_sync.enable": "true",
        "hoodie.datasource.hive_sync.mode": "hms",
        "hoodie.datasource.hive_sync.metastore.uris": "thrift://hms-1:9083,thrift://hms-2:9083",
        "hoodie.datasource.hive_sync.table": "Trips",
    }
    imported = _import(props)
    assert imported.spec["target"]["catalog"] == {
        "type": "hive",
        "uri": "thrift://hms-1:9083",
        "database": "default",  # Hudi's default
        "table": "trips",
    }
    mapped, skipped = dict(imported.mapped), dict(imported.skipped)
    assert mapped["org.apache.hudi.hive.HiveSyncTool"] == "target.catalog.type hive"
    assert mapped["hoodie.datasource.hive_sync.metastore.uris"] == (
        "target.catalog.uri (the first URI)"
    )
    assert skipped["hoodie.datasource.hive_sync.mode"].startswith(
        "the catalog entry is made from the Delta table"
    )
    # the old flag adds HiveSyncTool; the Glue tool beside it wins
    glue = "org.apache.hudi.aws.sync.AwsGlueCatalogSyncTool"
    both = _import({}, "--enable-hive-sync", "--sync-tool-classes", glue)
    assert both.spec["target"]["catalog"]["type"] == "glue"
    assert dict(both.skipped)["org.apache.hudi.hive.HiveSyncTool"].startswith("one catalog")
    with pytest.raises(UserError, match=r"metastore\.uris=jdbc:hive2://h:10000: the runner"):
        _import({**props, "hoodie.datasource.hive_sync.metastore.uris": "jdbc:hive2://h:10000"})


def test_glue_sync_becomes_target_catalog():
    glue = "org.apache.hudi.aws.sync.AwsGlueCatalogSyncTool"
    props = {
        "hoodie.datasource.hive_sync.database": "Lake",
        "hoodie.datasource.hive_sync.partition_fields": "city",
        "hoodie.aws.glue.region": "eu-west-1",
        "hoodie.aws.glue.endpoint": "https://glue.eu-west-1.amazonaws.com",
        "hoodie.aws.access.key": "AKIA-not-copied",
    }
    imported = _import(props, "--enable-sync", "--sync-tool-classes", glue)
    assert imported.spec["target"]["catalog"] == {
        "type": "glue",
        "database": "lake",
        "table": "t",  # Hudi's default: the table's name
        "region": "eu-west-1",
        "endpoint_url": "https://glue.eu-west-1.amazonaws.com",
    }
    mapped, skipped = dict(imported.mapped), dict(imported.skipped)
    assert mapped["--enable-sync"].startswith("target.catalog")
    assert mapped["hoodie.datasource.hive_sync.database"] == "target.catalog.database"
    assert skipped["hoodie.datasource.hive_sync.partition_fields"].startswith(
        "the catalog entry is made from the Delta table"
    )
    assert ("AWS_ACCESS_KEY_ID", "what hoodie.aws.access.key held") in imported.env
    assert "AKIA-not-copied" not in imported.to_yaml("job")
    # the Glue tool named in the properties, sync turned on by them
    on = {"hoodie.datasource.meta.sync.enable": "true", "hoodie.meta.sync.client.tool.class": glue}
    assert _import(on).spec["target"]["catalog"]["type"] == "glue"
    off = _import({"hoodie.datasource.hive_sync.table": "x"})
    assert "catalog" not in off.spec["target"]
    assert dict(off.skipped)["hoodie.datasource.hive_sync.table"].startswith("catalog sync is off")
    with pytest.raises(UserError, match=r"hive_sync\.table=trips-2: a catalog table name"):
        _import(
            {"hoodie.datasource.hive_sync.table": "trips-2"},
            "--enable-sync",
            "--sync-tool-classes",
            glue,
        )


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
    schema = {"hoodie.streamer.schemaprovider.source.schema.file": "hdfs:///schemas/s.avsc"}
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
        ({}, ["--source-class", f"{SOURCE}JdbcSource"], "imports the DFS and Kafka sources"),
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
        (
            {"hoodie.bulkinsert.sort.mode": "com.example.MyPartitioner"},
            ["--op", "BULK_INSERT"],
            "a custom partitioner has no equivalent",
        ),
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


# An Avro schema with every type the import converts, nested, and the Spark DDL Spark's
# SchemaConverters gives for it (written out by hand, from Spark's type mapping).
AVRO_SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": ["null", "int"]},
        {"name": "price", "type": ["double", "null"]},
        {"name": "weight", "type": "float"},
        {"name": "paid", "type": "boolean"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW"]}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "blob", "type": "bytes"},
        {"name": "hash", "type": {"type": "fixed", "name": "Md5", "size": 16}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "ts_us", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "local_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "local_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "at_ms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "time-micros"}},
        {
            "name": "amount",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
        },
        {
            "name": "big",
            "type": {
                "type": "fixed", "name": "Big", "size": 16,
                "logicalType": "decimal", "precision": 38, "scale": 0,
            },
        },
        {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {
            "name": "ship_to",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Address",
                    "fields": [
                        {"name": "zip code", "type": "string"},
                        {"name": "lines", "type": {"type": "array", "items": "string"}},
                        {"name": "geo", "type": {"type": "map", "values": {
                            "type": "record", "name": "Point",
                            "fields": [{"name": "lat", "type": "double"}],
                        }}},
                    ],
                },
            ],
        },
        {"name": "bill_to", "type": "Address"},  # a named type used again, by its short name
        {"name": "`odd`", "type": "shop.Md5"},
        {"name": "_nothing", "type": "null"},
    ],
}  # fmt: skip
ADDRESS = "struct<`zip code`: string, lines: array<string>, geo: map<string, struct<lat: double>>>"
AVRO_DDL = (
    "id bigint, qty int, price double, weight float, paid boolean, note string, "
    "status string, ref string, blob binary, hash binary, day date, ts_ms timestamp, "
    "ts_us timestamp, local_ms timestamp_ntz, local_us timestamp_ntz, at_ms int, "
    "at_us bigint, amount decimal(12,2), big decimal(38,0), tags array<string>, "
    f"attrs map<string, bigint>, ship_to {ADDRESS}, bill_to {ADDRESS}, "
    "```odd``` binary, _nothing void"
)
KAFKA = {
    "hoodie.streamer.source.kafka.topic": "orders",
    "bootstrap.servers": "b1:9092,b2:9092",
}
SCHEMA_FILE = "hoodie.streamer.schemaprovider.source.schema.file"


def _kafka(source: str, props: dict[str, str], *args: str, base: Path | None = None):
    flags, _, transformers = parse_streamer_args(
        [*FLAGS, "--source-class", f"{SOURCE}{source}", *args]
    )
    key = {"hoodie.datasource.write.recordkey.field": "id"}
    return import_streamer({**key, **KAFKA, **props}, flags, transformers, base)


def test_a_schema_file_becomes_the_sources_spark_schema(tmp_path):
    from runner.spec.ddl import ddl_columns

    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "order.avsc").write_text(json.dumps(AVRO_SCHEMA))
    flags, _, _ = parse_streamer_args(FLAGS)
    # a relative path is read from the properties file's directory
    props = {**BASE, SCHEMA_FILE: "schemas/order.avsc"}
    imported = import_streamer(props, flags, [], base=tmp_path)
    source = imported.spec["sources"][0]
    assert source["schema"] == AVRO_DDL
    assert ddl_columns(source["schema"]) == tuple(f["name"] for f in AVRO_SCHEMA["fields"])
    assert dict(imported.mapped)[SCHEMA_FILE].startswith("sources[0].schema")
    # a csv source with a schema is not inferred: the schema gives its types
    csv = import_streamer(
        {**BASE, SCHEMA_FILE: f"file://{tmp_path}/schemas/order.avsc"},
        parse_streamer_args([*FLAGS, "--source-class", f"{SOURCE}CsvDFSSource"])[0],
        [],
    )
    assert csv.spec["sources"][0]["schema"] == AVRO_DDL
    assert "options" not in csv.spec["sources"][0]


def test_a_remote_schema_file_is_listed_as_not_imported():
    for path in ("s3a://bucket/order.avsc", "hdfs://nn:8020/schemas/order.avsc"):
        imported = _import({"hoodie.deltastreamer.schemaprovider.source.schema.file": path})
        assert "schema" not in imported.spec["sources"][0]
        why = dict(imported.skipped)["hoodie.deltastreamer.schemaprovider.source.schema.file"]
        assert f"{path} is not on this machine" in why and "Spark infers" in why


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"type": "record", "name": "R", "fields": [
                {"name": "outer", "type": {"type": "record", "name": "In", "fields": [
                    {"name": "v", "type": ["null", "int", "string"]}]}}]},
            "field outer.v is a union of several types (int, string)",
        ),
        ({"type": "array", "items": "int"}, "the top-level type must be a record"),
        (
            {"type": "record", "name": "Node", "fields": [
                {"name": "next", "type": ["null", "Node"]}]},
            "record Node contains itself",
        ),
        (
            {"type": "record", "name": "R", "fields": [{"name": "d", "type": {
                "type": "bytes", "logicalType": "decimal", "precision": 40}}]},
            "field d: decimal(precision=40, scale=0) is not a Spark decimal",
        ),
        ({"type": "record", "name": "R", "fields": [{"name": "x", "type": "Nope"}]}, "'Nope'"),
    ],
)  # fmt: skip
def test_a_schema_without_a_spark_type_stops_the_import(tmp_path, schema, message):
    (tmp_path / "s.avsc").write_text(json.dumps(schema))
    flags, _, _ = parse_streamer_args(FLAGS)
    with pytest.raises(UserError, match=re.escape(message)):
        import_streamer({**BASE, SCHEMA_FILE: str(tmp_path / "s.avsc")}, flags, [])


def test_a_json_kafka_job_becomes_a_kafka_source(tmp_path):
    (tmp_path / "order.avsc").write_text(json.dumps(AVRO_SCHEMA))
    imported = _kafka(
        "JsonKafkaSource",
        {
            # the old names are read as the new ones
            "hoodie.deltastreamer.source.kafka.topic": "ignored: the new name wins",
            "hoodie.deltastreamer.schemaprovider.source.schema.file": "order.avsc",
            "hoodie.deltastreamer.kafka.source.maxEvents": "1000",
            "hoodie.streamer.source.kafka.enable.failOnDataLoss": "true",
            "auto.offset.reset": "earliest",
            "security.protocol": "SSL",
            "ssl.truststore.location": "/etc/kafka/truststore.jks",
            "group.id": "hudi-orders",
            "value.deserializer": "org.apache.kafka.common.serialization.StringDeserializer",
        },
        base=tmp_path,
    )
    assert imported.spec["sources"] == [
        {
            "name": "src",
            "format": "kafka",
            "schema": AVRO_DDL,
            "incremental": {"since": "last"},
            "kafka": {
                "bootstrap_servers": "b1:9092,b2:9092",
                "topics": ["orders"],
                "value_format": "json",
                "starting_offsets": "earliest",
                "max_records_per_run": 1000,
                "on_data_loss": "fail",
                "options": {
                    "security.protocol": "SSL",
                    "ssl.truststore.location": "/etc/kafka/truststore.jks",
                },
            },
        }
    ]
    skipped = dict(imported.skipped)
    assert "commits none to a consumer group" in skipped["group.id"]
    assert "decodes keys and values itself" in skipped["value.deserializer"]
    assert skipped["hoodie.deltastreamer.source.kafka.topic"].endswith("is set too, and wins")
    assert imported.env == []


def test_a_kafka_job_keeps_hudis_defaults():
    """Unset, Hudi starts a new table at the latest offsets, reads at most 5000000
    records a run, and moves to the earliest offsets left when its checkpoint's are gone."""
    imported = _kafka("AvroKafkaSource", {"schema.registry.url": "http://registry:8081"})
    kafka = imported.spec["sources"][0]["kafka"]
    assert kafka["starting_offsets"] == "latest"
    assert kafka["max_records_per_run"] == 5_000_000
    assert kafka["on_data_loss"] == "skip"
    assert "schema" not in imported.spec["sources"][0]
    notes = " ".join(what for what, _ in imported.mapped)
    assert "Hudi's default latest" in notes and "Hudi's default false" in notes
    # --source-limit is a number of records for a Kafka source, and wins over maxEvents
    limited = _kafka(
        "AvroKafkaSource",
        {"schema.registry.url": "http://r:8081", "hoodie.streamer.kafka.source.maxEvents": "9"},
        "--source-limit", "500",
    )  # fmt: skip
    assert limited.spec["sources"][0]["kafka"]["max_records_per_run"] == 500
    assert "--source-limit" not in dict(limited.skipped)


def test_an_avro_kafka_job_with_a_schema_file_reads_plain_avro(tmp_path):
    (tmp_path / "order.avsc").write_text(json.dumps(AVRO_SCHEMA))
    imported = _kafka("AvroKafkaSource", {SCHEMA_FILE: "order.avsc"}, base=tmp_path)
    source = imported.spec["sources"][0]
    assert "schema" not in source  # the Avro schema gives the columns
    assert source["kafka"]["value_format"] == "avro"
    assert source["kafka"]["avro_schema"] == str(tmp_path / "order.avsc")
    assert "schema_registry_url" not in source["kafka"]
    with pytest.raises(UserError, match=r"cannot read .*missing\.avsc"):
        _kafka("AvroKafkaSource", {SCHEMA_FILE: "missing.avsc"}, base=tmp_path)
    with pytest.raises(UserError, match="AvroKafkaSource: no schema for the values"):
        _kafka("AvroKafkaSource", {})


def test_an_avro_kafka_job_with_a_registry_reads_confluents_wire_format(tmp_path):
    (tmp_path / "order.avsc").write_text(json.dumps(AVRO_SCHEMA))
    registry = "hoodie.deltastreamer.schemaprovider.registry.url"
    imported = _kafka(
        "AvroKafkaSource",
        {
            registry: "https://svc:s3cr3t@registry:8081/subjects/orders-value/versions/latest",
            SCHEMA_FILE: "order.avsc",
        },
        "--schemaprovider-class", "org.apache.hudi.utilities.schema.SchemaRegistryProvider",
        base=tmp_path,
    )  # fmt: skip
    kafka = imported.spec["sources"][0]["kafka"]
    assert (
        kafka["schema_registry_url"] == "https://svc:${env:SCHEMA_REGISTRY_PASSWORD}@registry:8081"
    )
    assert "avro_schema" not in kafka
    assert "/subjects/orders-value/versions/latest cut" in dict(imported.mapped)[registry]
    assert "registry gives each value's writer schema" in dict(imported.skipped)[SCHEMA_FILE]
    assert [name for name, _ in imported.env] == ["SCHEMA_REGISTRY_PASSWORD"]
    assert "s3cr3t" not in imported.to_yaml("job.properties")
    # the deserializer's own registry setting decodes the values, so it wins
    both = _kafka(
        "AvroKafkaSource",
        {registry: "http://a:8081/subjects/x/versions/1", "schema.registry.url": "http://b:8081/"},
    )
    assert both.spec["sources"][0]["kafka"]["schema_registry_url"] == "http://b:8081"
    assert dict(both.skipped)[registry].startswith("schema.registry.url is set too")


def test_kafka_secrets_are_environment_references_never_values():
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required password="pw1";'
    imported = _kafka(
        "AvroKafkaSource",
        {
            "schema.registry.url": "http://registry:8081",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": jaas,
            "ssl.truststore.password": "pw2",
            "ssl.key.password": "${env:MY_KEY_PASSWORD}",  # a reference already: kept
            "basic.auth.user.info": "key:pw3",
        },
    )
    options = imported.spec["sources"][0]["kafka"]["options"]
    assert options == {
        "sasl.jaas.config": "${env:KAFKA_SASL_JAAS_CONFIG}",
        "sasl.mechanism": "PLAIN",
        "security.protocol": "SASL_SSL",
        "ssl.key.password": "${env:MY_KEY_PASSWORD}",
        "ssl.truststore.password": "${env:KAFKA_SSL_TRUSTSTORE_PASSWORD}",
    }
    assert "Confluent's Avro deserializer" in dict(imported.skipped)["basic.auth.user.info"]
    text = imported.to_yaml("job.properties")
    assert not any(secret in text for secret in ("pw1", "pw2", "pw3"))
    # the notes tell which variables to set before a run
    assert "#   KAFKA_SASL_JAAS_CONFIG: the value of sasl.jaas.config" in text
    assert "#   KAFKA_SSL_TRUSTSTORE_PASSWORD: the value of ssl.truststore.password" in text


def test_a_checkpoint_is_where_the_first_kafka_run_starts():
    registry = {"schema.registry.url": "http://r:8081", "auto.offset.reset": "earliest"}
    imported = _kafka("AvroKafkaSource", registry, "--checkpoint", "orders,0:42,1:7")
    assert imported.spec["sources"][0]["kafka"]["starting_offsets"] == {"orders": {"0": 42, "1": 7}}
    assert dict(imported.skipped)["auto.offset.reset"].startswith("--checkpoint wins")
    single = _kafka(
        "AvroKafkaSource",
        {**registry, "hoodie.streamer.source.kafka.checkpoint.type": "single_offset"},
        "--checkpoint", "99",
    )  # fmt: skip
    assert single.spec["sources"][0]["kafka"]["starting_offsets"] == {"orders": {"0": 99}}


@pytest.mark.parametrize(
    ("source", "props", "args", "message"),
    [
        ("AvroKafkaSource", {"schema.registry.url": "http://r:8081",
                             "auto.offset.reset": "group"}, [], "cannot start at the group's"),
        ("AvroKafkaSource", {"schema.registry.url": "http://r:8081"},
         ["--checkpoint", "1700000000000"], "a Kafka source starts at offsets"),
        ("AvroKafkaSource", {"schema.registry.url": "http://r:8081"},
         ["--checkpoint", "other,0:1"], "orders,0:OFFSET,1:OFFSET"),
        ("JsonKafkaSource", {}, [], "this job names no schema file"),
        ("JsonKafkaSource", {SCHEMA_FILE: "s3://b/s.avsc"}, [], "s3://b/s.avsc is not on this"),
        ("JsonKafkaSource", {"hoodie.streamer.schemaprovider.registry.url": "http://r/x"}, [],
         "download it"),
        ("JsonKafkaSource", {"hoodie.streamer.source.kafka.topic": ""}, [], "no topic"),
        ("JsonKafkaSource", {"bootstrap.servers": " "}, [], "no brokers"),
    ],
)  # fmt: skip
def test_kafka_settings_without_an_equivalent_stop_the_import(source, props, args, message):
    with pytest.raises(UserError, match=re.escape(message)):
        _kafka(source, props, *args)


def test_bulk_insert_sort_modes_map_to_the_runners_sort():
    def sort_of(mode: str, op: str = "BULK_INSERT") -> str | None:
        imported = _import({"hoodie.bulkinsert.sort.mode": mode}, "--op", op)
        return imported.spec["target"].get("bulk_insert_sort")

    assert sort_of("GLOBAL_SORT") == sort_of("partition_sort") == "by_key"
    assert sort_of("NONE") == sort_of("PARTITION_PATH_REPARTITION") == "none"
    upsert = _import({"hoodie.bulkinsert.sort.mode": "GLOBAL_SORT"})
    assert "bulk_insert_sort" not in upsert.spec["target"]
    assert dict(upsert.skipped)["hoodie.bulkinsert.sort.mode"] == "read by bulk_insert only"


DEBEZIUM = f"{SOURCE}debezium."
REGISTRY_URL = "http://registry:8081/subjects/pg.public.orders-value/versions/latest"
REGISTRY = {"hoodie.streamer.schemaprovider.registry.url": REGISTRY_URL}


def test_a_postgres_debezium_job_becomes_a_debezium_source_whose_target_is_a_change_feed(
    tmp_path,
):
    """HoodieStreamer's PostgresDebeziumSource with its payload and Hudi's LSN ordering: a
    kafka source of value_format debezium read from the registry, which the runner applies
    in its own log position's order; the imported spec validates."""
    from click.testing import CliRunner

    from runner.cli import cli
    from runner.spec import load_spec

    (tmp_path / "pg.properties").write_text(
        "hoodie.datasource.write.recordkey.field=id\n"
        "hoodie.streamer.source.kafka.topic=pg.public.orders\n"
        "bootstrap.servers=b1:9092\n"
        "auto.offset.reset=earliest\n"
        f"hoodie.streamer.schemaprovider.registry.url={REGISTRY_URL}\n"
        "hoodie.datasource.write.payload.class="
        f"{PAYLOAD}debezium.PostgresDebeziumAvroPayload\n"
        "hoodie.streamer.source.kafka.value.deserializer.class="
        "io.confluent.kafka.serializers.KafkaAvroDeserializer\n"
    )
    out = tmp_path / "spec.yaml"
    result = CliRunner().invoke(
        cli,
        [
            "import-hudi", str(tmp_path / "pg.properties"), *FLAGS,
            "--source-class", f"{DEBEZIUM}PostgresDebeziumSource",
            "--source-ordering-field", "_event_lsn", "-o", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = out.read_text()
    spec = load_spec(str(out), resolve_paths=False)
    source = spec.sources[0]
    assert source.kafka is not None
    assert source.kafka.value_format == "debezium"
    assert source.kafka.schema_registry_url == "http://registry:8081"
    assert source.kafka.topics == ("pg.public.orders",)
    assert spec.target.fed_by_debezium
    assert spec.target.cdc is not None and spec.target.cdc.sequence_by == "_debezium_position"
    assert spec.target.key_generator.record_key == ("id",)
    assert "precombine_field" not in text and "merge_mode" not in text
    # the notes say what Hudi's ordering field and payload became, and what is not kept
    assert "--source-ordering-field -> target.cdc.sequence_by _debezium_position" in text
    assert "of which _event_lsn is Hudi's copy" in text
    assert "set REPLICA IDENTITY FULL" in text  # unchanged TOASTed values, kept by the payload
    assert "Confluent's wire format itself" in text  # the deserializer


def test_a_mysql_debezium_job_leaves_the_record_key_to_the_message_key(tmp_path):
    from runner.spec import load_spec

    imported = _kafka(
        "debezium.MysqlDebeziumSource",
        {
            "hoodie.datasource.write.recordkey.field": "",
            "schema.registry.url": "http://registry:8081",
            "hoodie.write.record.merge.mode": "EVENT_TIME_ORDERING",
            "hoodie.table.ordering.fields": "_event_bin_file,_event_pos",
            "hoodie.record.merge.property.hoodie.payload.delete.field": "_change_operation_type",
            "hoodie.record.merge.property.hoodie.payload.delete.marker": "d",
        },
    )
    target = imported.spec["target"]
    assert "key_generator" not in target and "record_key" not in target
    assert "precombine_field" not in target and "merge_mode" not in target
    mapped = dict(imported.mapped)
    assert mapped["hoodie.datasource.write.recordkey.field unset"].startswith(
        "the record key is the Debezium message key's fields"
    )
    assert "_debezium_position" in mapped["hoodie.table.ordering.fields"]
    assert "_debezium_position" in mapped["hoodie.write.record.merge.mode"]
    delete = "hoodie.record.merge.property.hoodie.payload.delete."
    assert "d deletes" in mapped[f"{delete}field"] and "d deletes" in mapped[f"{delete}marker"]
    assert "REPLICA IDENTITY" not in " ".join(mapped.values())  # MySQL has no TOAST
    (tmp_path / "spec.yaml").write_text(imported.to_yaml("job.properties"))
    spec = load_spec(str(tmp_path / "spec.yaml"), resolve_paths=False)
    assert spec.target.key_from_message and spec.target.cdc is not None


def test_a_debezium_jobs_time_ordering_and_other_payloads_are_listed_as_not_imported():
    marker = "hoodie.record.merge.property.hoodie.write.partial.update.custom.marker"
    imported = _kafka(
        "debezium.PostgresDebeziumSource",
        {
            **REGISTRY,
            "hoodie.write.partial.update.mode": "IGNORE_MARKERS",
            marker: "__debezium_unavailable_value",
            "hoodie.payload.delete.field": "deleted",
        },
        "--source-ordering-field", "_event_origin_ts_ms",
        "--payload-class", f"{PAYLOAD}OverwriteWithLatestAvroPayload",
    )  # fmt: skip
    skipped = dict(imported.skipped)
    assert skipped["--source-ordering-field"].endswith("not by _event_origin_ts_ms")
    assert skipped["--payload-class"].endswith("and d events delete")
    assert "__debezium_unavailable_value" in skipped["hoodie.write.partial.update.mode"]
    assert "REPLICA IDENTITY FULL" in skipped[marker]
    assert skipped["hoodie.payload.delete.field"].endswith("its d events (_debezium_op)")
    whole = _kafka(
        "debezium.PostgresDebeziumSource",
        {**REGISTRY, "hoodie.table.partial.update.mode": "NONE"},
    )
    assert dict(whole.skipped)["hoodie.table.partial.update.mode"].endswith("are whole rows")
    assert "cdc" not in imported.spec["target"]  # implied by the loader, not written


@pytest.mark.parametrize(
    ("props", "args", "message"),
    [
        ({}, [], "PostgresDebeziumSource: Hudi's Debezium sources read Avro values whose "
         "schema is in a schema registry, and this job names none"),
        ({**REGISTRY, "hoodie.streamer.source.kafka.value.deserializer.class":
          "org.apache.kafka.common.serialization.StringDeserializer"}, [],
         "the values are Debezium's JSON without Kafka Connect's schemas"),
        ({**REGISTRY, "hoodie.deltastreamer.source.kafka.value.deserializer.class": "my.Deser"},
         [], "=my.Deser: the runner reads a Debezium topic's values as Avro"),
        (REGISTRY, ["--op", "INSERT"], "--op INSERT: a Debezium source's events are applied"),
        (REGISTRY, ["--filter-dupes"], "--filter-dupes with a Debezium source"),
        ({**REGISTRY, "hoodie.streamer.transformer.sql":
          "SELECT *, _event_lsn AS lsn FROM <SRC> WHERE _change_operation_type <> 'r'"},
         ["--transformer-class", "org.apache.hudi.utilities.transform.SqlQueryBasedTransformer"],
         "(_change_operation_type: _debezium_op; _event_lsn: _debezium_position"),
    ],
)  # fmt: skip
def test_debezium_settings_without_an_equivalent_stop_the_import(props, args, message):
    with pytest.raises(UserError, match=re.escape(message)):
        _kafka("debezium.PostgresDebeziumSource", props, *args)


def test_hudis_file_size_is_the_target_size_of_a_buckets_files():
    imported = _import({"hoodie.parquet.max.file.size": "67108864"})
    assert imported.spec["target"]["index"]["file_group_bytes"] == 64 * 2**20
    assert dict(imported.mapped)["hoodie.parquet.max.file.size"].startswith(
        "target.index.file_group_bytes"
    )
    with pytest.raises(UserError, match=r"hoodie.parquet.max.file.size=120MB: a size in bytes"):
        _import({"hoodie.parquet.max.file.size": "120MB"})
