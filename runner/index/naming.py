"""Data file names (Hudi RFC-29): the bucket id leads the file id, so no mapping is stored.

<partition path>/<bucket:08d>-<uuid tail>-0_<task>-<stage>-<attempt>_<instant>.parquet
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

FILE_NAME_RE = re.compile(
    r"^(?P<file_id>(?P<bucket>\d{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-\d+)"
    r"_(?P<write_token>\d+-\d+-\d+)_(?P<instant>\d{17})\.parquet$"
)


@dataclass(frozen=True)
class DataFileName:
    bucket: int
    file_id: str
    write_token: str
    instant: str


def commits_among(paths: Iterable[str]) -> int:
    """How many commits wrote these data files: their distinct instants (a file whose name
    does not say counts as one of its own). A bulk load's several files of a bucket are one
    base, written together, not delta files to compact."""
    instants = set()
    for path in paths:
        found = FILE_NAME_RE.match(path.rsplit("/", 1)[-1])
        instants.add(found["instant"] if found else path)
    return len(instants)


def new_instant() -> str:
    """Hudi's instant format, yyyyMMddHHmmssSSS, in UTC: the suffix of every file a run
    or an expansion writes."""
    now = dt.datetime.now(dt.UTC)
    return now.strftime("%Y%m%d%H%M%S") + f"{now.microsecond // 1000:03d}"


def new_file_id(bucket: int) -> str:
    """A fresh file group id: a random UUID whose first 8 characters are the bucket id."""
    return f"{bucket:08d}{str(uuid.uuid4())[8:]}-0"


def derived_file_id(bucket: int, *parts: str) -> str:
    """A file group id every task derives alike from `parts` (a run's instant and the
    bucket's partition path): tasks that write the same new bucket without talking to each
    other put their files in one file group."""
    derived = uuid.uuid5(uuid.NAMESPACE_URL, "/".join([*parts, str(bucket)]))
    return f"{bucket:08d}{str(derived)[8:]}-0"


def data_file_name(file_id: str, write_token: str, instant: str) -> str:
    return f"{file_id}_{write_token}_{instant}.parquet"


def data_file_path(partition_path: str, file_id: str, write_token: str, instant: str) -> str:
    """A data file's path in the table: in its partition's directory ("" has none)."""
    name = data_file_name(file_id, write_token, instant)
    return f"{partition_path}/{name}" if partition_path else name


def parse_data_file_name(name: str) -> DataFileName | None:
    """Parse the last path segment; None for a file that does not follow the layout."""
    match = FILE_NAME_RE.match(name.rsplit("/", 1)[-1])
    if not match:
        return None
    return DataFileName(
        bucket=int(match["bucket"]),
        file_id=match["file_id"],
        write_token=match["write_token"],
        instant=match["instant"],
    )
