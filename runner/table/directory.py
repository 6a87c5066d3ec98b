"""What lies in a table's directory, beside what its Delta log references.

The runner owns only the data files it wrote, which its naming gives away (bucket id, file
group id, write token, instant: runner.index.naming). Everything else in the directory, a
user's file, another tool's output, a nested table, is someone else's: the runner never
creates a table on top of it and never deletes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow.fs as pafs

from runner.errors import UserError
from runner.index.naming import parse_data_file_name
from runner.table.deletion_vectors import RUNNER_DV_PATH
from runner.table.storage import TableLocation

DELTA_LOG = "_delta_log"
SHOWN = 5  # files named in a refusal


@dataclass(frozen=True)
class StoredFile:
    path: str  # relative to the table root
    size: int
    mtime_ns: int | None  # None where the store does not say

    @property
    def written_by_runner(self) -> bool:
        """A data file or a deletion vector file, named as the runner names them."""
        return (
            parse_data_file_name(self.path) is not None
            or RUNNER_DV_PATH.match(self.path) is not None
        )


def walk(location: TableLocation) -> Iterator[StoredFile]:
    """Every file under the table root but its Delta log, lazily, directory by directory
    (a caller that needs a few stops early, which matters on an object store).

    A subdirectory that holds a Delta log is another table: it is listed as one entry,
    `<dir>/_delta_log/`, never walked into."""
    fs, root = location.filesystem()
    pending = [root]
    while pending:
        directory = pending.pop(0)
        selector = pafs.FileSelector(directory, recursive=False, allow_not_found=True)
        entries = sorted(fs.get_file_info(selector), key=lambda info: info.path)
        relative = directory[len(root) :].strip("/")
        if relative and any(e.base_name == DELTA_LOG for e in entries):
            yield StoredFile(f"{relative}/{DELTA_LOG}/", 0, None)
            continue
        for entry in entries:
            if entry.type == pafs.FileType.Directory:
                if not (directory == root and entry.base_name == DELTA_LOG):
                    pending.append(entry.path)
            elif entry.type == pafs.FileType.File:
                path = entry.path[len(root) :].lstrip("/")
                yield StoredFile(path, max(entry.size or 0, 0), entry.mtime_ns)


def check_new_table_location(location: TableLocation, field: str) -> None:
    """Refuse to create a table where other files already are (a typo in the path, an old
    dataset): the table would be laid over them, and cleaning could take them for its own.
    Files a killed first run of the runner left there are fine: they are the runner's."""
    fs, root = location.filesystem()
    if fs.get_file_info(root).type == pafs.FileType.File:
        raise UserError(f"{field} {location.uri} is a file; give the directory of a table")
    foreign: list[str] = []
    for stored in walk(location):
        if not stored.written_by_runner:
            foreign.append(stored.path)
            if len(foreign) > SHOWN:
                break
    if not foreign:
        return
    shown = ", ".join(foreign[:SHOWN]) + (", ..." if len(foreign) > SHOWN else "")
    raise UserError(
        f"{field} {location.uri} is not empty and holds no Delta table ({shown}); the runner "
        "creates a new table only in an empty or missing directory: choose an empty location"
    )
