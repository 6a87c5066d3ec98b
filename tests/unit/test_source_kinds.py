"""The source kinds' registry: every format the spec takes has one plug-in behind the one
interface, with its spec section and schema part; nothing outside the registry compares a
source's format. No JVM."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from runner.errors import UserError
from runner.sources.bad_input import unreadable_file
from runner.sources.kinds import kind_of, registered, source_jars
from runner.sources.kinds.base import SourceKind
from runner.sources.model import InputSchema
from runner.spec.derived import FILE_FORMATS, TEXT_FORMATS
from runner.spec.model import Incremental, JdbcSpec, KafkaSpec, Source

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "schemas" / "pipeline.schema.json").read_text())
SOURCE_SCHEMA = SCHEMA["$defs"]["source"]
REGISTRY = ROOT / "runner" / "sources" / "kinds" / "__init__.py"


def _sample(kind: SourceKind, tmp_path: Path) -> Source:
    """A source of `kind` as the loader builds it, with a declared schema where it takes one."""
    if kind.spec_section == "jdbc":
        return Source("db", "jdbc", jdbc=JdbcSpec("jdbc:postgresql://u:pw@db:5432/shop", "orders"))
    if kind.spec_section == "kafka":
        return Source("events", "kafka", kafka=KafkaSpec("PLAINTEXT://k:9092", ("orders",)))
    return Source("s", kind.format, path=str(tmp_path / "in"), schema="id BIGINT, city STRING")


def test_every_format_of_the_schema_has_one_registered_kind():
    formats = [kind.format for kind in registered()]
    assert formats == SOURCE_SCHEMA["properties"]["format"]["enum"]
    assert len(set(formats)) == len(formats)
    assert [k.format for k in registered() if k.bad_file_places] == list(FILE_FORMATS)
    assert [k.format for k in registered() if k.text_records] == list(TEXT_FORMATS)


@pytest.mark.parametrize("kind", registered(), ids=lambda kind: kind.format)
def test_a_kinds_spec_section_has_its_dataclass_and_schema_part(kind):
    """A kind with settings of its own (jdbc:, kafka:) has them in Source, in the JSON
    Schema's $defs, and required by the schema for its format."""
    if kind.spec_section is None:
        return
    assert kind.spec_section in {f.name for f in dataclasses.fields(Source)}
    assert SOURCE_SCHEMA["properties"][kind.spec_section] == {
        "$ref": f"#/$defs/{kind.spec_section}"
    }
    assert kind.spec_section in SCHEMA["$defs"]
    required = [
        rule["then"]["required"]
        for rule in SOURCE_SCHEMA["allOf"]
        if rule["if"]["properties"]["format"] == {"const": kind.format}
    ]
    assert [kind.spec_section] in required


@pytest.mark.parametrize("kind", registered(), ids=lambda kind: kind.format)
def test_every_kind_answers_the_questions_asked_without_a_jvm(kind, tmp_path):
    assert isinstance(kind, SourceKind)
    source = _sample(kind, tmp_path)
    assert kind_of(source) is kind
    assert isinstance(kind.first_read(source), str)
    assert kind.shown_checkpoint("7").endswith("7")
    datasets = kind.datasets(source)
    assert datasets and all(isinstance(ns, str) and isinstance(name, str) for ns, name in datasets)
    assert "pw" not in repr(datasets)
    found = kind.input_schema(source)
    assert isinstance(found, InputSchema) and found.origin
    if source.schema:  # a declared schema is what the check knows of files and tables
        assert found.schema == pa.schema([("id", pa.int64()), ("city", pa.string())])
    else:
        assert found.schema is None and "whose columns Spark decodes" in found.origin
    assert (kind.rows_from_spark(source) is None) == (kind.format == "parquet")
    assert kind.read_failure("an error no kind knows") is None
    if kind.lists_files:  # read in full: Spark lists the path itself, once it is there
        with pytest.raises(UserError, match=r"source 's': path .*/in does not exist"):
            kind.plan(source, None, frozenset())
        (tmp_path / "in").mkdir()
        assert kind.plan(source, None, frozenset()).paths is None


def test_the_kinds_tell_checkpoints_first_reads_and_what_a_first_read_loses(tmp_path):
    delta = Source("t", "delta", path="/in/t", incremental=Incremental("since_last"))
    assert kind_of(delta).shown_checkpoint("3") == "version 3"
    assert kind_of(delta).first_read(delta) == "read whole"
    assert kind_of(delta).first_read_loses(delta) is not None
    kept = dataclasses.replace(delta, incremental=Incremental("since_last", deletes="ignore"))
    assert kind_of(kept).first_read_loses(kept) is None
    latest = KafkaSpec("k:9092", ("orders",), starting_offsets="latest")
    kafka = Source("events", "kafka", kafka=latest)
    assert kind_of(kafka).first_read(kafka) == "from the latest offsets"
    loss = kind_of(kafka).first_read_loses(kafka)
    assert loss is not None and "latest offsets" in loss.anyway
    assert kind_of(kafka).record_format(kafka) == "json"
    assert source_jars([_sample(kind_of(delta), tmp_path)], under_spark_submit=False) == []


def test_an_unknown_format_is_refused_naming_the_known_ones():
    with pytest.raises(UserError) as refused:
        kind_of(Source("cdc", "debezium"))
    message = str(refused.value)
    assert message.startswith("source 'cdc': format 'debezium' is not a source kind")
    assert "parquet, csv, json, orc, delta, jdbc, kafka" in message


def test_no_module_but_the_registry_compares_a_sources_format():
    compares = re.compile(r"\.format (==|!=|in|not in) ")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "runner").rglob("*.py"))
        if path != REGISTRY
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if compares.search(line)
    ]
    assert found == []


def test_a_file_spark_cannot_read_is_a_file_sources_never_a_kafka_sources(tmp_path):
    """A Kafka source has no path: a file Spark fails on belongs to the file source that
    holds it, even when the Kafka source comes first, so that source's on_bad_file holds."""
    events = Source("events", "kafka", kafka=KafkaSpec("k:9092", ("orders",)))
    files = Source("files", "parquet", path=str(tmp_path / "in"), on_bad_file="skip")
    failure = RuntimeError(f"Encountered error while reading file {tmp_path}/in/a.parquet. x")
    found = unreadable_file(failure, [events, files])
    assert found is not None and (found.source, found.skippable) == ("files", True)
