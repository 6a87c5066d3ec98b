"""HoodieStreamer's Kafka sources (JsonKafkaSource, AvroKafkaSource, and the Debezium sources
PostgresDebeziumSource and MysqlDebeziumSource) as a spec's kafka source.

Hudi's KafkaOffsetGen and KafkaSourceConfig decide what the properties mean: the topic,
`auto.offset.reset` (default latest) for a table without a checkpoint, at most
`hoodie.streamer.kafka.source.maxEvents` records a run (default 5000000; --source-limit
wins), and, when the checkpoint's offsets were removed by retention, a move to the earliest
offsets left unless `...enable.failOnDataLoss` is true (default false). Every property
not named hoodie.* is a Kafka consumer setting to Hudi, and becomes one of kafka.options;
a secret among them is written as `${env:NAME}`, never in clear, and NAME is listed in the
import's notes. Hudi keeps the offsets in its checkpoint; the runner in its commits, so
the source is read with `incremental: {since: last}`.

Hudi's Debezium sources read the same properties, and their values as Avro with Confluent's
deserializer (hoodie.streamer.source.kafka.value.deserializer.class, whose default is
KafkaAvroDeserializer), the envelope's schema from the registry: value_format debezium with
kafka.schema_registry_url. What their target does is runner/hudi/streamer_debezium.py.
"""

from __future__ import annotations

import re
from typing import Any

from runner.errors import UserError
from runner.hudi.avro_schema import read_avro_schema
from runner.hudi.streamer_job import Job
from runner.hudi.streamer_sources import (
    SCHEMA_FILE,
    SOURCE_NAME,
    SOURCES,
    schema_ddl,
    schema_file,
    schema_mapped,
)

DEBEZIUM_SOURCES = (
    f"{SOURCES}debezium.PostgresDebeziumSource",
    f"{SOURCES}debezium.MysqlDebeziumSource",
)
KAFKA_SOURCES = {
    f"{SOURCES}JsonKafkaSource": "json",
    f"{SOURCES}AvroKafkaSource": "avro",
    **dict.fromkeys(DEBEZIUM_SOURCES, "debezium"),
}
DESERIALIZER = "source.kafka.value.deserializer.class"  # after hoodie.streamer.
# The value deserializers of Hudi's Debezium sources that read Confluent's wire format.
AVRO_DESERIALIZERS = (
    "io.confluent.kafka.serializers.KafkaAvroDeserializer",  # KafkaSourceConfig's default
    "org.apache.hudi.utilities.deser.KafkaAvroSchemaDeserializer",
)
STRING_DESERIALIZER = "org.apache.kafka.common.serialization.StringDeserializer"
HUDI_DEFAULT_OFFSET_RESET = "latest"  # KafkaSourceConfig.KAFKA_AUTO_OFFSET_RESET
HUDI_DEFAULT_MAX_EVENTS = 5_000_000  # KafkaSourceConfig.MAX_EVENTS_FROM_KAFKA_SOURCE
REGISTRY_PASSWORD = "SCHEMA_REGISTRY_PASSWORD"
AT = "sources[0].kafka."

_OFFSETS_IN_TABLE = (
    "the runner keeps the offsets in the table's commits and commits none to a consumer "
    "group (if the brokers' ACLs allow only this group, add group.id to kafka.options)"
)
_DECODED_BY_RUNNER = (
    "the runner decodes keys and values itself: _kafka_key stays binary, the value is read "
    "by kafka.value_format"
)
# Consumer settings (not hoodie.*) that do not go to kafka.options, and why.
NOT_OPTIONS = {
    "group.id": _OFFSETS_IN_TABLE,
    "enable.auto.commit": _OFFSETS_IN_TABLE,
    "auto.commit.interval.ms": _OFFSETS_IN_TABLE,
    "key.deserializer": _DECODED_BY_RUNNER,
    "value.deserializer": _DECODED_BY_RUNNER,
    "interceptor.classes": "Spark's Kafka reader takes no consumer interceptors",
}
# Settings of Confluent's deserializer and its registry client, not of the Kafka consumer.
_REGISTRY_CLIENT = re.compile(
    r"^(schema\.registry\.|basic\.auth\.|specific\.avro\.reader$|auto\.register\.schemas$"
    r"|use\.latest\.version$|(key|value)\.subject\.name\.strategy$)"
)
_REGISTRY_CLIENT_WHY = (
    "a setting of Confluent's Avro deserializer or registry client, which the runner does "
    "not use: it reads the registry at kafka.schema_registry_url (credentials as "
    "https://USER:${env:NAME}@host there)"
)
# hoodie.streamer.<suffix> settings of the Kafka sources with no spec field, and why.
HOODIE_NOTES = {
    DESERIALIZER: (
        "the runner decodes the values itself: kafka.value_format, with kafka.avro_schema "
        "(plain Avro binary) or kafka.schema_registry_url (Confluent's wire format)"
    ),
    "source.kafka.append.offsets": (
        "the source's view always has _kafka_topic, _kafka_partition, _kafka_offset and "
        "_kafka_timestamp: select them in transform.sql"
    ),
    "source.kafka.enable.commit.offset": _OFFSETS_IN_TABLE,
}
_ENV_REF = re.compile(r"\$\{env:[A-Za-z_][A-Za-z0-9_]*\}")


def kafka_source(job: Job, source_class: str) -> dict[str, Any]:
    """sources[0]: the topic HoodieStreamer's Kafka source reads, read on from the offsets
    the last commit kept."""
    value_format = KAFKA_SOURCES[source_class]
    topic = job.required_streamer("source.kafka.topic", "topic", "the Kafka sources")
    servers = job.prop("bootstrap.servers")
    if servers is None:
        raise UserError("no brokers: set bootstrap.servers (host:port,...) with --set")
    source: dict[str, Any] = {"name": SOURCE_NAME, "format": "kafka"}
    kafka: dict[str, Any] = {
        "bootstrap_servers": servers[1],
        "topics": [topic[1]],
        "value_format": value_format,
    }
    job.out.mapped += [
        (
            f"--source-class {source_class.rsplit('.', 1)[1]}",
            f"sources[0].format kafka, {AT}value_format {value_format}, incremental: "
            "{since: last} (the offsets are kept in the table's commits, as Hudi keeps them "
            "in its checkpoint)",
        ),
        (topic[0], f"{AT}topics"),
        (servers[0], f"{AT}bootstrap_servers"),
    ]
    if value_format == "json":
        source["schema"] = _json_schema(job)
    elif value_format == "avro":
        kafka.update(_avro_schema(job))
    else:
        kafka.update(_debezium_values(job, source_class))
    source["incremental"] = {"since": "last"}
    kafka["starting_offsets"] = _starting_offsets(job, topic[1])
    kafka["max_records_per_run"] = _max_records(job)
    kafka["on_data_loss"] = _on_data_loss(job)
    for suffix, why in HOODIE_NOTES.items():
        if not (suffix == DESERIALIZER and value_format == "debezium"):  # read: mapped
            job.skip(job.streamer(suffix), why)
    options = _consumer_options(job)
    if options:
        kafka["options"] = options
    source["kafka"] = kafka
    return source


def _json_schema(job: Job) -> str:
    """JsonKafkaSource's values are parsed with the schema provider's source schema: the
    source's `schema`, from a schema file the import can read."""
    found = schema_file(job)
    registry = job.streamer("schemaprovider.registry.url")
    if found and found.local:
        job.out.mapped.append((found.setting, schema_mapped(found)))
        job.skip(registry, f"{found.setting} is set too, and gives the schema")
        return schema_ddl(found)
    if found:
        why = found.remote_reason()
    elif registry:
        why = (
            f"it is in the schema registry ({registry[0]}): download it (curl -s URL | jq -r "
            f".schema > value.avsc) and --set hoodie.streamer.{SCHEMA_FILE}=value.avsc"
        )
    else:
        why = f"this job names no schema file: set hoodie.streamer.{SCHEMA_FILE}"
    raise UserError(
        "JsonKafkaSource: the runner parses the JSON values with the source schema "
        f"(sources[0].schema, made from the FilebasedSchemaProvider's Avro schema), but {why}"
    )


def _avro_schema(job: Job) -> dict[str, str]:
    """AvroKafkaSource's values: in Confluent's wire format, with a schema registry, else in
    plain Avro binary with the schema file's writer schema."""
    found = schema_file(job)
    registry = _registry_url(job)
    if registry is not None:
        if found is not None:
            job.out.skipped.append(
                (
                    found.setting,
                    "the registry gives each value's writer schema (kafka.schema_registry_url)",
                )
            )
        return {"schema_registry_url": registry}
    if found is None:
        raise UserError(
            "AvroKafkaSource: no schema for the values: set hoodie.streamer.schemaprovider."
            "registry.url (values in Confluent's wire format) or hoodie.streamer."
            f"{SCHEMA_FILE} (plain Avro binary, with that writer schema)"
        )
    path = found.path
    if found.local:
        read_avro_schema(found.local, found.setting)  # it is there and is JSON; the run reads it
        path = str(found.local)
    job.out.mapped.append(
        (
            found.setting,
            f"{AT}avro_schema (values in plain Avro binary, as Hudi's ByteArrayDeserializer "
            "reads them; values in Confluent's wire format need kafka.schema_registry_url)",
        )
    )
    return {"avro_schema": path}


def _debezium_values(job: Job, source_class: str) -> dict[str, str]:
    """A Debezium source's values: Avro in Confluent's wire format, the envelope's schema in
    the registry (DebeziumSource fetches it from hoodie.streamer.schemaprovider.registry.url)."""
    name = source_class.rsplit(".", 1)[1]
    deserializer = job.streamer(DESERIALIZER)
    if deserializer is not None and deserializer[1] == STRING_DESERIALIZER:
        raise UserError(
            f"{name} with {deserializer[0]}=StringDeserializer: the values are Debezium's JSON "
            "without Kafka Connect's schemas, which the runner reads with the row's columns "
            "declared in sources[0].schema (Spark DDL), and the import cannot know them: write "
            "that source by hand (docs/cdc-database.md), or have the connector write Avro"
        )
    if deserializer is not None and deserializer[1] not in AVRO_DESERIALIZERS:
        raise UserError(
            f"{deserializer[0]}={deserializer[1]}: the runner reads a Debezium topic's values "
            "as Avro in Confluent's wire format (KafkaAvroDeserializer) or as Kafka Connect's "
            "JSON; write the source by hand for another format"
        )
    registry = _registry_url(job)
    if registry is None:
        raise UserError(
            f"{name}: Hudi's Debezium sources read Avro values whose schema is in a schema "
            "registry, and this job names none: set hoodie.streamer.schemaprovider.registry.url "
            "(or schema.registry.url) with --set"
        )
    job.skip(deserializer, f"{AT}value_format debezium decodes Confluent's wire format itself")
    found = schema_file(job)
    if found is not None:
        job.out.skipped.append((found.setting, "the registry gives each value's writer schema"))
    return {"schema_registry_url": registry}


def _registry_url(job: Job) -> str | None:
    """The schema registry's base URL: the deserializer's schema.registry.url, else the
    SchemaRegistryProvider's URL of a subject's schema, cut to the registry's base."""
    deserializer = job.prop("schema.registry.url")
    provider = job.streamer("schemaprovider.registry.url")
    if deserializer is not None:
        urls = [u.strip() for u in deserializer[1].split(",") if u.strip()]
        more = f"; only the first of its {len(urls)} URLs is kept" if len(urls) > 1 else ""
        job.out.mapped.append((deserializer[0], f"{AT}schema_registry_url{more}"))
        job.skip(provider, f"{deserializer[0]} is set too: the values are decoded with it")
        return _without_password(job, deserializer[0], urls[0].rstrip("/"))
    if provider is None:
        return None
    base, sep, subject = provider[1].partition("/subjects/")
    cut = f"; {sep}{subject} cut: each value names its schema id" if sep else ""
    job.out.mapped.append((provider[0], f"{AT}schema_registry_url (the base URL{cut})"))
    return _without_password(job, provider[0], base.rstrip("/"))


def _without_password(job: Job, setting: str, url: str) -> str:
    """url with the password of its user info (https://user:password@host, as Hudi's
    SchemaRegistryProvider takes credentials) as an `${env:NAME}` reference."""
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^/@:]*):([^/@]*)@", url)
    if match is None or _ENV_REF.fullmatch(match.group(3)):
        return url
    job.out.env.append((REGISTRY_PASSWORD, f"the schema registry password written in {setting}"))
    return f"{match.group(1)}{match.group(2)}:${{env:{REGISTRY_PASSWORD}}}@{url[match.end() :]}"


def _starting_offsets(job: Job, topic: str) -> str | dict[str, dict[str, int]]:
    """Where the first run starts: --checkpoint's offsets, else auto.offset.reset (Hudi's
    default latest)."""
    kind = job.streamer("source.kafka.checkpoint.type")
    found = job.setting(["--checkpoint"], "auto.offset.reset")
    if found is not None and found[0] == "--checkpoint":
        job.out.mapped.append(
            (
                "--checkpoint",
                f"{AT}starting_offsets (where the first run starts; later runs go on from "
                "the offsets their commits keep)",
            )
        )
        return _checkpoint_offsets(found[1], topic, kind[1] if kind else "string")
    job.skip(kind, "only --checkpoint's form depends on it, and it is not given")
    if found is None:
        job.out.mapped.append(
            (
                f"auto.offset.reset unset (Hudi's default {HUDI_DEFAULT_OFFSET_RESET})",
                f"{AT}starting_offsets",
            )
        )
        return HUDI_DEFAULT_OFFSET_RESET
    reset = found[1].lower()
    if reset in ("earliest", "latest"):
        job.out.mapped.append((found[0], f"{AT}starting_offsets"))
        return reset
    if reset == "group":
        raise UserError(
            "auto.offset.reset=group: the runner keeps offsets in the table, not in a consumer "
            "group, so it cannot start at the group's committed offsets; list them "
            "(kafka-consumer-groups --describe --group GROUP) and give them as --checkpoint "
            f"{topic},0:OFFSET,1:OFFSET, or --set auto.offset.reset=earliest (or latest)"
        )
    raise UserError(f"auto.offset.reset={found[1]}: Hudi takes earliest, latest or group")


def _checkpoint_offsets(value: str, topic: str, kind: str) -> dict[str, dict[str, int]]:
    """Hudi's Kafka checkpoint, `topic,partition:offset,...` (or a single_offset one's
    offset of partition 0), as starting_offsets."""
    if kind.lower() == "single_offset" and value.isdigit():
        return {topic: {"0": int(value)}}
    name, _, rest = value.partition(",")
    pairs = [pair.split(":") for pair in rest.split(",") if pair.strip()]
    if name.strip() != topic or not pairs or not all(_offset_pair(p) for p in pairs):
        raise UserError(
            f"--checkpoint {value}: a Kafka source starts at offsets, written as Hudi writes "
            f"its checkpoint: {topic},0:OFFSET,1:OFFSET (partition:offset); convert a "
            "timestamp to offsets, or leave --checkpoint out to start at auto.offset.reset"
        )
    return {topic: {p.strip(): int(o) for p, o in pairs}}


def _offset_pair(pair: list[str]) -> bool:
    return len(pair) == 2 and all(part.strip().isdigit() for part in pair)


def _max_records(job: Job) -> int:
    """--source-limit (a number of records for a Kafka source) wins over maxEvents."""
    found = job.setting(["--source-limit"], *_streamer_names("kafka.source.maxEvents"))
    if found is None:
        job.out.mapped.append(
            (f"(Hudi's default of {HUDI_DEFAULT_MAX_EVENTS} records)", f"{AT}max_records_per_run")
        )
        return HUDI_DEFAULT_MAX_EVENTS
    if not found[1].isdigit() or int(found[1]) < 1:
        raise UserError(f"{found[0]} {found[1]}: give a number of records, 1 or more")
    job.out.mapped.append((found[0], f"{AT}max_records_per_run"))
    return int(found[1])


def _on_data_loss(job: Job) -> str:
    """failOnDataLoss true: fail; false (Hudi's default): skip, as Hudi moves to the
    earliest offsets left when the checkpoint's are gone."""
    found = job.streamer("source.kafka.enable.failOnDataLoss")
    fail = found is not None and found[1].lower() == "true"  # Java's Boolean.parseBoolean
    setting = found[0] if found else "hoodie.streamer.source.kafka.enable.failOnDataLoss unset"
    setting += "" if found else " (Hudi's default false)"
    why = "" if fail else " (Hudi then moves to the earliest offsets left)"
    job.out.mapped.append((setting, f"{AT}on_data_loss {'fail' if fail else 'skip'}{why}"))
    return "fail" if fail else "skip"


def _consumer_options(job: Job) -> dict[str, str]:
    """The properties not named hoodie.* that are left: Kafka consumer settings, as Hudi
    hands them to its consumer; secrets as `${env:NAME}`."""
    options = {}
    for key in sorted(job.props):
        if key in job.used or key.startswith(("hoodie.", "spark.")):
            continue
        job.used.add(key)
        if key in NOT_OPTIONS or _REGISTRY_CLIENT.match(key):
            job.out.skipped.append((key, NOT_OPTIONS.get(key, _REGISTRY_CLIENT_WHY)))
            continue
        value = job.props[key]
        note = ""
        if _secret(key) and not _ENV_REF.fullmatch(value.strip()):
            name = "KAFKA_" + re.sub(r"[^A-Za-z0-9]+", "_", key).upper()
            value = f"${{env:{name}}}"
            job.out.env.append((name, f"the value of {key}"))
            note = f" as {value}"
        options[key] = value
        job.out.mapped.append((key, f"{AT}options{note}"))
    return options


def _secret(key: str) -> bool:
    """A consumer setting whose value is a secret: a password, a JAAS line (it holds one),
    a private key."""
    name = key.lower()
    return (
        "password" in name
        or "secret" in name
        or name.endswith("jaas.config")
        or name == "ssl.keystore.key"
    )


def _streamer_names(suffix: str) -> tuple[str, str]:
    return f"hoodie.streamer.{suffix}", f"hoodie.deltastreamer.{suffix}"
