"""The meta columns every data file starts with, like Hudi's `_hoodie_*` columns: their
names and types, declared once for every layer that reads or writes them."""

from __future__ import annotations

import pyarrow as pa

COMMIT_TIME = "_commit_time"  # the instant of the commit that wrote the row
COMMIT_SEQNO = "_commit_seqno"  # <instant>_<task>_<row>: the row's place in that commit
RECORD_KEY = "_record_key"
PARTITION_PATH = "_partition_path"
BUCKET = "_bucket"

META_FIELDS = (
    pa.field(COMMIT_TIME, pa.string()),
    pa.field(COMMIT_SEQNO, pa.string()),
    pa.field(RECORD_KEY, pa.string()),
    pa.field(PARTITION_PATH, pa.string()),
    pa.field(BUCKET, pa.int32()),
)
META_COLUMNS = tuple(f.name for f in META_FIELDS)

# The columns Delta's change data feed adds to a table's rows (its names, as delta-spark's
# readChangeFeed returns them): the change (insert, update_preimage, update_postimage,
# delete), its version and its commit time. Only _change_type is in the change data files.
CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"

# Where a table's change data files are (Delta's change data feed), beside its partitions.
CHANGE_DATA_DIR = "_change_data"

# Internal columns of a run carry this prefix; an input column may not.
RESERVED_PREFIX = "__runner_"
