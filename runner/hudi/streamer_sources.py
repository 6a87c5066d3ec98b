"""HoodieStreamer's DFS sources as the spec's file sources, and the schema file of its
FilebasedSchemaProvider as a source's Spark DDL `schema` (runner/hudi/avro_schema.py).

The Kafka sources are runner/hudi/streamer_kafka.py; both read the schema file here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.hudi.avro_schema import avro_ddl, read_avro_schema
from runner.hudi.streamer_job import Job

SOURCES = "org.apache.hudi.utilities.sources."
SOURCE_FORMATS = {
    f"{SOURCES}JsonDFSSource": "json",
    f"{SOURCES}ParquetDFSSource": "parquet",
    f"{SOURCES}CsvDFSSource": "csv",
    f"{SOURCES}ORCDFSSource": "orc",
}
DEFAULT_SOURCE = f"{SOURCES}JsonDFSSource"
SOURCE_NAME = "src"
SCHEMA_FILE = "schemaprovider.source.schema.file"  # after hoodie.streamer. (or deltastreamer.)
_URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")


@dataclass(frozen=True)
class SchemaFile:
    """The FilebasedSchemaProvider's source schema file: the property naming it, the path as
    written, and the file on this machine (None for a remote one: hdfs://, s3://...)."""

    setting: str
    path: str
    local: Path | None

    def remote_reason(self) -> str:
        return (
            f"{self.path} is not on this machine, and the import reads local schema files "
            f"only: copy it here and --set {self.setting}=LOCAL_PATH"
        )


def schema_file(job: Job) -> SchemaFile | None:
    """The source schema file, if the job names one; a relative path is read from the
    directory of the properties file."""
    found = job.streamer(SCHEMA_FILE)
    if found is None:
        return None
    path = found[1]
    if path.startswith("file://"):
        local: str | None = path.removeprefix("file://")
    elif path.startswith("file:"):
        local = path.removeprefix("file:")
    else:
        local = None if _URI_SCHEME.match(path) else path
    return SchemaFile(found[0], path, (job.base / local).resolve() if local else None)


def schema_ddl(found: SchemaFile) -> str:
    """The Spark DDL of a local schema file."""
    assert found.local is not None
    return avro_ddl(read_avro_schema(found.local, found.setting), where=str(found.local))


def schema_mapped(found: SchemaFile) -> str:
    return f"sources[0].schema (the Avro schema of {found.path} as Spark DDL)"


def dfs_source(job: Job, source_class: str) -> dict[str, Any]:
    """sources[0]: a DFS source's files, read incrementally as the source does."""
    fmt = SOURCE_FORMATS[source_class]
    root = job.required_streamer("source.dfs.root", "source path", "the DFS sources")
    source: dict[str, Any] = {
        "name": SOURCE_NAME,
        "format": fmt,
        "path": root[1],
        "incremental": "new_files",
    }
    job.out.mapped.append((f"--source-class {source_class.rsplit('.', 1)[1]}", "sources[0].format"))
    # Hudi's DFS sources read the files newer than their checkpoint: new_files
    job.out.mapped.append((root[0], "sources[0].path, incremental: new_files"))
    found = schema_file(job)
    typed = bool(found) or "--schemaprovider-class" in job.flags
    if found and found.local:
        source["schema"] = schema_ddl(found)
        job.out.mapped.append((found.setting, schema_mapped(found)))
    if fmt == "csv":
        options = _csv_options(job, typed)
        if options:
            source["options"] = options
    inferred = "Spark infers the source schema; give sources[0].schema (Spark DDL) to fix it"
    if found and not found.local:
        job.out.skipped.append((found.setting, f"{found.remote_reason()}. {inferred}"))
    elif typed and not found:
        job.out.skipped.append(("--schemaprovider-class", inferred))
    return source


def _csv_options(job: Job, typed: bool) -> dict[str, str]:
    """CsvDFSSource's hoodie.streamer.csv.* properties as Spark's csv options."""
    options = {}
    for key in sorted(job.props):
        for prefix in ("hoodie.deltastreamer.csv.", "hoodie.streamer.csv."):
            if key.startswith(prefix):
                job.used.add(key)
                option = key[len(prefix) :]
                if option == "inferSchema":
                    job.out.skipped.append((key, "CsvDFSSource sets inferSchema itself"))
                    continue
                options[option] = job.props[key]
                job.out.mapped.append((key, f"sources[0].options.{option}"))
    if not typed:
        # CsvDFSSource infers the column types without a schema provider; Spark's csv
        # reader alone reads every column as a string (a string ordering field then)
        options["inferSchema"] = "true"
        job.out.mapped.append(
            ("CsvDFSSource without a schema provider", "sources[0].options.inferSchema")
        )
    return options
