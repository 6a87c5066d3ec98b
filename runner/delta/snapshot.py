"""A table's current state as delta-rs sees it: version, settings, schema and files by bucket."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from runner.delta.deletion_vectors import DeletionVector
from runner.delta.log_replay import LoggedAdd, has_deletion_vectors, live_adds
from runner.errors import RunnerError
from runner.index.naming import parse_data_file_name
from runner.storage.location import TableLocation, locate

# The table setting that turns Delta's change data feed on.
CHANGE_FEED_SETTING = "delta.enableChangeDataFeed"
# Delta's type widening: the table feature, and the setting that lets writers widen a type.
TYPE_WIDENING = "typeWidening"
TIMESTAMP_NTZ = "timestampNtz"  # the table feature a timestamp_ntz field needs
TYPE_WIDENING_SETTING = "delta.enableTypeWidening"

Group = tuple[str, int]  # (partition path, bucket)


def add_actions(table: DeltaTable) -> pa.Table:
    """The table's live files (delta-rs' flattened add actions) as a pyarrow table. Read
    as a stream: `pa.table()` imports pandas (0.2 s) to look at its argument, which a key
    lookup of a few milliseconds would pay."""
    return pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=True)).read_all()


@dataclass(frozen=True)
class DataFile:
    path: str  # relative to the table root, decoded (the Delta log holds it URL-encoded)
    size: int
    num_records: int
    partition_path: str
    bucket: int
    file_id: str
    # MERGE_ON_READ tables only: the rows deletion vectors delete, and the stats as logged
    deletion_vector: DeletionVector | None = None
    stats: str | None = None
    # the least and greatest `_record_key` of the file's rows (Delta's statistics; None
    # without them): which of a bucket's file groups can hold a key, with no read
    min_key: str | None = None
    max_key: str | None = None

    @property
    def deleted_records(self) -> int:
        return self.deletion_vector.cardinality if self.deletion_vector else 0

    @property
    def live_records(self) -> int:
        return self.num_records - self.deleted_records


@dataclass
class TableSnapshot:
    location: TableLocation
    table: DeltaTable
    _logged: tuple[int, dict[str, LoggedAdd]] | None = field(default=None, repr=False)

    @property
    def uri(self) -> str:
        return self.location.uri

    @property
    def version(self) -> int:
        return self.table.version()

    @property
    def configuration(self) -> dict[str, str]:
        return dict(self.table.metadata().configuration)

    @property
    def has_change_feed(self) -> bool:
        """The table keeps Delta's change data feed (delta.enableChangeDataFeed)."""
        return self.configuration.get(CHANGE_FEED_SETTING) == "true"

    @property
    def has_deletion_vectors(self) -> bool:
        """The table has the deletionVectors feature (a MERGE_ON_READ table)."""
        return has_deletion_vectors(self.table)

    @property
    def has_type_widening(self) -> bool:
        """The table has the typeWidening feature: some stored files may hold a column in a
        narrower type than the table's; delta-rs neither reads nor writes such a table."""
        return TYPE_WIDENING in (self.table.protocol().writer_features or [])

    def _logged_adds(self) -> dict[str, LoggedAdd]:
        version = self.version
        if self._logged is None or self._logged[0] != version:
            self._logged = (version, live_adds(self.location, version))
        return self._logged[1]

    def arrow_schema(self) -> pa.Schema:
        return pa.schema(self.table.schema().to_arrow())

    def files(self) -> list[DataFile]:
        """Every live data file with its (partition path, bucket) from the Delta statistics.

        Each file holds one partition path and one bucket, so min == max for both.
        """
        actions = add_actions(self.table).to_pylist()
        logged = self._logged_adds() if self.has_deletion_vectors else {}
        files = []
        for row in actions:
            name = parse_data_file_name(row["path"])
            pp_min, pp_max = row.get("min._partition_path"), row.get("max._partition_path")
            bucket = row.get("min._bucket")
            if name is None or bucket is None or pp_min != pp_max or pp_min is None:
                raise RunnerError(
                    f"file {row['path']} in {self.uri} does not follow runner's layout "
                    "(bucket file name and _partition_path/_bucket statistics); was it "
                    "written by another tool?"
                )
            path = unquote(row["path"])
            add = logged.get(path)
            files.append(
                DataFile(
                    path=path,
                    size=row["size_bytes"],
                    num_records=row["num_records"],
                    partition_path=pp_min,
                    bucket=bucket,
                    file_id=name.file_id,
                    deletion_vector=add.deletion_vector if add else None,
                    stats=add.stats if add else None,
                    min_key=row.get("min._record_key"),
                    max_key=row.get("max._record_key"),
                )
            )
        return files

    def files_by_group(self) -> dict[Group, list[DataFile]]:
        groups: dict[Group, list[DataFile]] = defaultdict(list)
        for f in self.files():
            groups[(f.partition_path, f.bucket)].append(f)
        return dict(groups)


def open_table(uri: str | TableLocation) -> TableSnapshot | None:
    """The table's latest snapshot, or None when no Delta table exists there yet.

    A URI's object store settings come from the environment (runner.storage.location).
    """
    location = uri if isinstance(uri, TableLocation) else locate(uri)
    try:
        table = DeltaTable(location.uri, storage_options=location.storage_options())
    except TableNotFoundError:
        return None
    return TableSnapshot(location, table)
