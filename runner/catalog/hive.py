"""A Hive Metastore (its Thrift API at `thrift://host:port`): the table's entry created, or
updated when it differs from the table's, the same entry glue.py writes, in the metastore's
Thrift structs (pymetastore's generated client: the calls used here, get_database,
create_database, get_table_req, create_table and alter_table, are in Hive 2.3 and 4.x alike;
Hive 4 has no get_table).

The metastore keeps column names in lowercase and a location as Hadoop's Path prints it
(`file:/data/t` for `file:///data/t`): the comparison reads them so, and an entry the
metastore holds in its own form is `unchanged`."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from runner.catalog.entry import SERDE, Done, TableEntry
from runner.errors import CatalogError
from runner.spec.model import CatalogSpec

# a metastore that does not answer costs a run seconds, not minutes
CONNECT_TIMEOUT_MS = 5_000
READ_TIMEOUT_MS = 20_000
_ADDRESS = re.compile(r"thrift://([^\s/:]+):([0-9]{1,5})")
# thrift logs a refused connection itself, on stderr when nothing else handles its logger:
# the runner says it once, in the registration's warning
logging.getLogger("thrift.transport.TSocket").addHandler(logging.NullHandler())


def sync_hive(catalog: CatalogSpec, entry: TableEntry) -> tuple[Done, bool]:
    """Create or update the table's entry in the metastore at `catalog.uri`; (what was done,
    the database was created). Raises CatalogError with the metastore's own reason."""
    # not at import: a run without a catalog does not pay for them
    from pymetastore.hive_metastore import ThriftHiveMetastore
    from thrift.protocol.TBinaryProtocol import TBinaryProtocol
    from thrift.Thrift import TException
    from thrift.transport import TSocket, TTransport

    host, port = _address(catalog.uri)
    connection = TSocket.TSocket(host, port)
    connection.setTimeout(CONNECT_TIMEOUT_MS)
    transport = TTransport.TBufferedTransport(connection)
    try:
        transport.open()
        connection.setTimeout(READ_TIMEOUT_MS)
        client = ThriftHiveMetastore.Client(TBinaryProtocol(transport))
        created_database = _ensure_database(client, catalog.database)
        return _sync_table(client, catalog, entry), created_database
    except (TException, OSError) as failure:
        raise CatalogError(_reason(failure, catalog.uri)) from failure
    finally:
        transport.close()


def _address(uri: str | None) -> tuple[str, int]:
    found = _ADDRESS.fullmatch(uri or "")
    if found is None:  # validate checks the form; a resolved ${env:NAME} may not have it
        raise CatalogError(f"uri {uri!r} is not thrift://host:port (thrift://hms:9083)")
    return found.group(1), int(found.group(2))


def _ensure_database(client: Any, database: str) -> bool:
    from pymetastore.hive_metastore.ttypes import Database, NoSuchObjectException

    try:
        client.get_database(database)
        return False
    except NoSuchObjectException:
        client.create_database(Database(name=database))
        return True


def _sync_table(client: Any, catalog: CatalogSpec, entry: TableEntry) -> Done:
    from pymetastore.hive_metastore.ttypes import GetTableRequest, NoSuchObjectException

    try:
        request = GetTableRequest(dbName=catalog.database, tblName=catalog.table)
        held = client.get_table_req(request).table
    except NoSuchObjectException:
        client.create_table(_table(catalog, entry))
        return "created"
    if _same(held, entry):
        return "unchanged"
    client.alter_table(catalog.database, catalog.table, _updated(held, entry))
    return "updated"


def _table(catalog: CatalogSpec, entry: TableEntry) -> Any:
    from pymetastore.hive_metastore.ttypes import SerDeInfo, StorageDescriptor, Table

    storage = StorageDescriptor(
        cols=_columns(entry),
        location=entry.location,
        serdeInfo=SerDeInfo(serializationLib=SERDE, parameters={"path": entry.location}),
        bucketCols=[],
        sortCols=[],
        parameters={},
    )
    return Table(
        tableName=catalog.table,
        dbName=catalog.database,
        tableType="EXTERNAL_TABLE",
        parameters=dict(entry.parameters),
        sd=storage,
        partitionKeys=[],
    )


def _columns(entry: TableEntry) -> list[Any]:
    from pymetastore.hive_metastore.ttypes import FieldSchema

    return [FieldSchema(name=name, type=kind) for name, kind in entry.columns]


def _updated(held: Any, entry: TableEntry) -> Any:
    """The held table with the runner's parts replaced: what others set (an owner, a
    comment, their parameters, the metastore's own) is kept; the runner owns the Delta
    parameters and the table's `delta.*` settings, as in Glue."""
    from pymetastore.hive_metastore.ttypes import SerDeInfo

    others = {k: v for k, v in (held.parameters or {}).items() if not k.startswith("delta.")}
    held.parameters = {**others, **entry.parameters}
    held.tableType = "EXTERNAL_TABLE"
    held.sd.cols = _columns(entry)
    held.sd.location = entry.location
    held.sd.serdeInfo = SerDeInfo(serializationLib=SERDE, parameters={"path": entry.location})
    return held


def _same(held: Any, entry: TableEntry) -> bool:
    """Whether the held table has the runner's parts as the entry has them."""
    parameters = held.parameters or {}
    serde = held.sd.serdeInfo
    return (
        held.tableType == "EXTERNAL_TABLE"
        and _settings(parameters) == _settings(entry.parameters)
        and entry.parameters.items() <= parameters.items()
        and [(c.name, c.type.lower()) for c in held.sd.cols]
        == [(n.lower(), t.lower()) for n, t in entry.columns]
        and _hadoop_path(held.sd.location) == _hadoop_path(entry.location)
        and serde is not None
        and serde.serializationLib == SERDE
        and serde.parameters == {"path": entry.location}
    )


def _settings(parameters: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in parameters.items() if k.startswith("delta.")}


def _hadoop_path(location: str | None) -> str | None:
    """A location as Hadoop's Path prints it: `file:/data/t` for `file:///data/t`."""
    return re.sub(r"^file:///", "file:/", location) if location else location


def _reason(failure: Exception, uri: str | None) -> str:
    """The metastore's reason on one line: its exception and message (MetaException: ...),
    or why it could not be reached."""
    from thrift.transport.TTransport import TTransportException

    message = getattr(failure, "message", None) or str(failure) or "no reason given"
    if isinstance(failure, TTransportException) and failure.type == failure.TIMED_OUT:
        return f"{uri}: no answer within {READ_TIMEOUT_MS / 1000:g} s"
    if isinstance(failure, OSError | TTransportException):
        return f"{uri}: {message}"
    return f"{type(failure).__name__}: {message}".replace("\n", " ")
