"""The entry a catalog keeps of a Delta table so that engines find it by name and read it as
Delta, made from the table's latest version (docs/catalogs.md says which engine reads what):

- `spark.sql.sources.provider=delta`: how Trino's and Presto's Delta Lake connectors and
  Spark's session catalog (delta-spark) tell a Delta table in a Hive Metastore or Glue
  (Trino's `HiveUtil.isDeltaLakeTable`; https://trino.io/docs/current/connector/delta-lake.html
  reads tables "registered in the metastore" through this provider), also the value Athena's
  console procedure sets (https://docs.aws.amazon.com/athena/latest/ug/delta-lake-tables-syncing-metadata.html);
- `table_type=DELTA`: what Athena's engine reads a native Delta Lake table by
  (https://docs.aws.amazon.com/athena/latest/ug/delta-lake-tables-getting-started.html);
- `EXTERNAL=TRUE` and the table type EXTERNAL_TABLE: dropping the entry leaves the files;
- the SerDe parameter `path` and the storage descriptor's location, both the table's root:
  Trino's Delta Lake connector takes the location from `path` alone and refuses a table
  without it (`HiveMetastoreBackedDeltaLakeMetastore.getTableLocation`: "No path property
  defined for table"), as delta-spark writes it; Athena and Glue's console read the location;
- the columns, with Hive's type names, in the table's order: the engines read the schema
  from the Delta log, but Lake Formation, views and Glue's own tools read these (Athena's
  "Synchronize Delta Lake metadata" page asks for the same schema as the log);
- the table's `delta.*` settings, as delta-spark's catalog keeps them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from deltalake import DeltaTable

from runner.storage.location import local_path

Done = Literal["created", "updated", "unchanged"]  # what a catalog's client did
PROVIDER = "spark.sql.sources.provider"
DELTA_PARAMETERS = {PROVIDER: "delta", "table_type": "DELTA", "EXTERNAL": "TRUE"}
SERDE = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"  # as delta-spark writes it

_HIVE_TYPES = {
    "long": "bigint",
    "integer": "int",
    "short": "smallint",
    "byte": "tinyint",
    "timestamp_ntz": "timestamp",
}


@dataclass(frozen=True)
class TableEntry:
    """What a catalog holds of the table: where it is, its columns, its parameters."""

    location: str
    columns: tuple[tuple[str, str], ...]  # (name, Hive type)
    parameters: Mapping[str, str]


def table_entry(table: DeltaTable, uri: str) -> TableEntry:
    """The entry of the table at `uri` as its latest version (`table`) has it."""
    schema = json.loads(table.schema().to_json())
    settings = {k: v for k, v in table.metadata().configuration.items() if k.startswith("delta.")}
    return TableEntry(
        location=catalog_location(uri),
        columns=tuple((f["name"], hive_type(f["type"])) for f in schema["fields"]),
        parameters={**settings, **DELTA_PARAMETERS},
    )


def catalog_location(uri: str) -> str:
    """The table's root as a catalog names it: a URI (`s3://`, also for `s3a://`; a local
    path as `file:///...`), without a trailing slash."""
    path = local_path(uri)
    if path is not None:
        return Path(path).absolute().as_uri()
    if uri.lower().startswith(("s3a://", "s3n://")):  # Athena and Glue know s3:// only
        uri = "s3://" + uri.split("://", 1)[1]
    return uri.rstrip("/")


def hive_type(delta_type: Any) -> str:
    """A Delta type (the log's JSON form) as Hive names it: `bigint`, `struct<a:int>`..."""
    if isinstance(delta_type, str):
        return _HIVE_TYPES.get(delta_type, delta_type)
    kind = delta_type["type"]
    if kind == "array":
        return f"array<{hive_type(delta_type['elementType'])}>"
    if kind == "map":
        return f"map<{hive_type(delta_type['keyType'])},{hive_type(delta_type['valueType'])}>"
    fields = ",".join(f"{f['name']}:{hive_type(f['type'])}" for f in delta_type["fields"])
    return f"struct<{fields}>"
