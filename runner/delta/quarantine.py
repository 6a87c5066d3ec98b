"""The quarantine table: a plain Delta table of rejected rows, appended by delta-rs.

It is written before the target's commit, so a rejected row is never lost; a run that then
fails leaves its rows here under its run id and instant (the instant is not in the target's
history). With a batch id the append carries the same app transaction as the target's
commit, so re-running that batch does not quarantine its rows twice.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import structlog
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import CommitProperties, Transaction

from runner.storage.location import storage_options

log = structlog.get_logger(__name__)


def append_quarantine(
    path: str, rows: pa.Table, metadata: dict[str, Any], app_id: str | None
) -> bool:
    """Append `rows`; False when `app_id` already committed to this table (nothing written)."""
    options = storage_options(path)
    try:
        existing = DeltaTable(path, storage_options=options)
    except TableNotFoundError:
        existing = None
    if existing is not None and app_id and existing.transaction_version(app_id) is not None:
        log.info("quarantine_batch_already_there", table=path, app_id=app_id)
        return False
    write_deltalake(
        path,
        rows,
        mode="append",
        schema_mode="merge",
        storage_options=options,
        commit_properties=CommitProperties(
            custom_metadata={k: str(v) for k, v in metadata.items()},
            app_transactions=(
                [Transaction(app_id, 1, int(time.time() * 1000))] if app_id else None
            ),
        ),
    )
    log.info("quarantined", table=path, rows=rows.num_rows)
    return True
