"""AWS Glue's Data Catalog: the table's entry created, or updated when it differs from the
table's (boto3; credentials, region and endpoint from the environment unless the spec names
the last two)."""

from __future__ import annotations

from typing import Any

from runner.catalog.entry import SERDE, Done, TableEntry
from runner.errors import CatalogError
from runner.spec.model import CatalogSpec

# a catalog that does not answer costs a run seconds, not minutes
_TIMEOUTS = {
    "connect_timeout": 5,
    "read_timeout": 20,
    "retries": {"mode": "standard", "total_max_attempts": 2},
}


def sync_glue(catalog: CatalogSpec, entry: TableEntry) -> tuple[Done, bool]:
    """Create or update the table's entry in Glue; (what was done, the database was created).
    Raises CatalogError with the catalog's own reason."""
    import boto3  # not at import: a run without a catalog does not pay for it
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        glue = boto3.client(
            "glue",
            region_name=catalog.region,
            endpoint_url=catalog.endpoint_url,
            config=Config(**_TIMEOUTS),
        )
        created_database = _ensure_database(glue, catalog.database)
        return _sync_table(glue, catalog, _table_input(catalog.table, entry)), created_database
    except (BotoCoreError, ClientError) as failure:
        raise CatalogError(_reason(failure)) from failure


def _ensure_database(glue: Any, database: str) -> bool:
    try:
        glue.get_database(Name=database)
        return False
    except glue.exceptions.EntityNotFoundException:
        glue.create_database(DatabaseInput={"Name": database})
        return True


def _sync_table(glue: Any, catalog: CatalogSpec, wanted: dict[str, Any]) -> Done:
    try:
        held = glue.get_table(DatabaseName=catalog.database, Name=catalog.table)["Table"]
    except glue.exceptions.EntityNotFoundException:
        glue.create_table(DatabaseName=catalog.database, TableInput=wanted)
        return "created"
    wanted = _keeping_others(wanted, held)
    if _held_input(held) == wanted:
        return "unchanged"
    glue.update_table(DatabaseName=catalog.database, TableInput=wanted)
    return "updated"


_OTHERS_FIELDS = ("Description", "Owner")  # an update keeps what others wrote there


def _keeping_others(wanted: dict[str, Any], held: dict[str, Any]) -> dict[str, Any]:
    """The entry with what others set kept (a description, an owner, a crawler's or a tag's
    parameters): the runner owns the Delta parameters and the table's `delta.*` settings."""
    others = {k: v for k, v in held.get("Parameters", {}).items() if not k.startswith("delta.")}
    kept = {k: held[k] for k in _OTHERS_FIELDS if k in held}
    return {**kept, **wanted, "Parameters": {**others, **wanted["Parameters"]}}


def _table_input(name: str, entry: TableEntry) -> dict[str, Any]:
    return {
        "Name": name,
        "TableType": "EXTERNAL_TABLE",
        "Parameters": dict(entry.parameters),
        "StorageDescriptor": {
            "Columns": [{"Name": n, "Type": t} for n, t in entry.columns],
            "Location": entry.location,
            "SerdeInfo": {"SerializationLibrary": SERDE, "Parameters": {"path": entry.location}},
        },
    }


def _held_input(held: dict[str, Any]) -> dict[str, Any]:
    """The part of a held entry the runner writes, shaped as its TableInput."""
    storage = held.get("StorageDescriptor", {})
    serde = storage.get("SerdeInfo", {})
    return {
        **{k: held[k] for k in _OTHERS_FIELDS if k in held},
        "Name": held.get("Name"),
        "TableType": held.get("TableType"),
        "Parameters": held.get("Parameters", {}),
        "StorageDescriptor": {
            "Columns": [{"Name": c["Name"], "Type": c["Type"]} for c in storage.get("Columns", [])],
            "Location": storage.get("Location"),
            "SerdeInfo": {
                "SerializationLibrary": serde.get("SerializationLibrary"),
                "Parameters": serde.get("Parameters", {}),
            },
        },
    }


def _reason(failure: Exception) -> str:
    """The catalog's reason on one line: its error code and message, or the connection's."""
    response = getattr(failure, "response", None)  # a ClientError's: the catalog answered
    if isinstance(response, dict):
        error = response.get("Error", {})
        return f"{error.get('Code', 'error')}: {error.get('Message', '')}".strip()
    return str(failure)
