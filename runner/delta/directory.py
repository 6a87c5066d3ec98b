"""What lies in a table's directory, beside what its Delta log references.

The runner owns only the files it wrote, which their naming gives away: data files and
change data files (under `_change_data/`) named with bucket id, file group id, write token
and instant (runner.index.naming), deletion vector files under `_deletion_vectors/<instant>/`.
Everything else in the directory, a user's file, another tool's output, a nested table, is
someone else's: the runner never creates a table on top of it and never deletes it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow.fs as pafs

from runner.delta.deletion_vectors import DV_DIR, RUNNER_DV_PATH
from runner.errors import CommitConflictError, UserError
from runner.index.naming import parse_data_file_name
from runner.storage.in_flight import RUNNER_DIR
from runner.storage.location import TableLocation
from runner.storage.meta_columns import CHANGE_DATA_DIR

DELTA_LOG = "_delta_log"
# The directories at a table's root that are no partition and that no partition path may
# take: the runner's own, and Delta's change data files.
RESERVED = (DV_DIR, RUNNER_DIR, CHANGE_DATA_DIR)
SHOWN = 5  # files named in a refusal


@dataclass(frozen=True)
class StoredFile:
    path: str  # relative to the table root
    size: int
    mtime_ns: int | None  # None where the store does not say
    link: bool = False  # a symbolic link: never followed, never the runner's

    @property
    def written_by_runner(self) -> bool:
        """A data file, a change data file or a deletion vector file, named as the runner
        names them."""
        if self.link:
            return False
        return (
            parse_data_file_name(self.path) is not None
            or RUNNER_DV_PATH.match(self.path) is not None
        )

    @property
    def instant(self) -> str | None:
        """The instant of the writer of one of the runner's files (in its name)."""
        name = parse_data_file_name(self.path)
        if name is not None:
            return name.instant
        return self.path.split("/")[1] if RUNNER_DV_PATH.match(self.path) else None


def canonical(path: str) -> str:
    """A table-relative path in the one form a listing gives back: no empty or '.' names
    (the Delta log may hold `a//b` or `a/b/` where a directory walk finds `a/b`)."""
    return "/".join(part for part in path.split("/") if part not in ("", "."))


def walk(location: TableLocation) -> Iterator[StoredFile]:
    """Every file under the table root but its Delta log and the runner's own directory,
    lazily, directory by directory (a caller that needs a few stops early, which matters on
    an object store).

    A subdirectory that holds a Delta log is another table: it is listed as one entry,
    `<dir>/_delta_log/`, never walked into. A symbolic link is listed as itself and never
    followed: what it points to is outside the table, whatever its name."""
    fs, root = location.filesystem()
    pending = [root]
    while pending:
        directory = pending.pop(0)
        entries = _entries(fs, directory, location.is_local)
        relative = directory[len(root) :].strip("/")
        if relative and any(name == DELTA_LOG for name, _ in entries):
            yield StoredFile(f"{relative}/{DELTA_LOG}/", 0, None)
            continue
        for name, entry in entries:
            path = f"{relative}/{name}" if relative else name
            if isinstance(entry, StoredFile):
                yield StoredFile(path, entry.size, entry.mtime_ns, entry.link)
            elif not (directory == root and name in (DELTA_LOG, RUNNER_DIR)):
                pending.append(f"{directory}/{name}")


def _entries(
    fs: pafs.FileSystem, directory: str, local: bool
) -> list[tuple[str, StoredFile | None]]:
    """The names in `directory`, sorted, each with its file (None: a directory to walk)."""
    if local:  # os.scandir tells a symbolic link from what it points to; pyarrow does not
        try:
            with os.scandir(directory) as scan:
                found = list(scan)
        except FileNotFoundError:
            return []
        entries: list[tuple[str, StoredFile | None]] = []
        for entry in found:
            if entry.is_dir(follow_symlinks=False):
                entries.append((entry.name, None))
            else:
                try:
                    stat = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed since the listing (a writer's cleanup)
                    continue
                link = entry.is_symlink()
                entries.append((entry.name, StoredFile("", stat.st_size, stat.st_mtime_ns, link)))
        return sorted(entries, key=lambda e: e[0])
    selector = pafs.FileSelector(directory, recursive=False, allow_not_found=True)
    infos = sorted(fs.get_file_info(selector), key=lambda info: info.base_name)
    return [
        (info.base_name, None)
        if info.type == pafs.FileType.Directory
        else (info.base_name, StoredFile("", max(info.size or 0, 0), info.mtime_ns))
        for info in infos
        if info.type in (pafs.FileType.Directory, pafs.FileType.File)
    ]


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


def missing_files(location: TableLocation, paths: Iterable[str]) -> list[str]:
    """Those of `paths` (table-relative) that are not in the table's directory: one listing
    per directory, not one request per file. A commit checks its new files with this, so
    that no version names a file that is gone."""
    fs, root = location.filesystem()
    by_directory: dict[str, list[str]] = {}
    for path in paths:
        directory, _, name = canonical(path).rpartition("/")
        by_directory.setdefault(directory, []).append(name)
    gone = []
    for directory, names in by_directory.items():
        selector = pafs.FileSelector(f"{root}/{directory}".rstrip("/"), allow_not_found=True)
        present = {info.base_name for info in fs.get_file_info(selector)}
        gone += [
            f"{directory}/{name}" if directory else name for name in names if name not in present
        ]
    return sorted(gone)


def require_files(location: TableLocation, paths: Iterable[str], writer: str) -> None:
    """Refuse to commit files that are gone (a clean, or a hand, removed them while the
    writer was stopped longer than its heartbeat lasts): a version must not name them."""
    gone = missing_files(location, paths)
    if gone:
        shown = ", ".join(gone[:SHOWN]) + (", ..." if len(gone) > SHOWN else "")
        raise CommitConflictError(
            f"{len(gone)} file(s) this {writer} wrote under {location.uri} are gone before its "
            f"commit ({shown}): something removed them while it ran (a `runner clean` while "
            "its heartbeat had lapsed?); nothing was committed, the table is as it was: "
            "run it again"
        )
