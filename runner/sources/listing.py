"""`incremental: new_files`: which files of a file source have not been ingested yet.

The checkpoint is the newest change time ingested (modification, or locally a rename into
place) and the names that carry it, so a file changed in the same clock tick as the last
ingested one is still picked up once.
Files are listed with pyarrow, so deciding there is nothing new needs no JVM.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from runner.errors import UserError
from runner.spec.nearest import did_you_mean
from runner.storage.location import S3_SCHEMES, is_local, local_path, locate, scheme

_GLOB = "*?[{"  # Spark reads a glob's matches; it may match nothing yet


@dataclass(frozen=True)
class FileCheckpoint:
    mtime_ns: int
    names: tuple[str, ...]  # relative to the source path, the files at mtime_ns

    def to_json(self) -> dict[str, Any]:
        return {"mtime_ns": self.mtime_ns, "names": list(self.names)}

    @classmethod
    def from_json(cls, value: Any, where: str) -> FileCheckpoint | None:
        if value is None:
            return None
        if isinstance(value, dict) and "mtime_ns" in value:
            return cls(int(value["mtime_ns"]), tuple(value.get("names", ())))
        if isinstance(value, str):  # --checkpoint: a time; files modified after it
            try:
                moment = dt.datetime.fromisoformat(value)
            except ValueError:
                raise UserError(
                    f"{where}: checkpoint {value!r} is not a time; give an ISO time such as "
                    "2026-11-01T00:00:00+00:00 (files modified after it are read)"
                ) from None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=dt.UTC)
            return cls(int(moment.timestamp() * 1_000_000_000), ())
        raise UserError(f"{where}: checkpoint {value!r} is not one a file source wrote")


@dataclass(frozen=True)
class NewFiles:
    root: str  # the directory, as Spark names it (the scheme of the source kept)
    paths: list[str]  # full paths of the files to read, oldest first
    until: FileCheckpoint | None  # the checkpoint once they are committed
    bytes: int


def list_new_files(uri: str, since: FileCheckpoint | None) -> NewFiles:
    """The data files under `uri` modified after `since` (all of them when None).

    Hidden files and directories (names starting with `.` or `_`, as Spark skips them) are
    not data.
    """
    if scheme(uri) in S3_SCHEMES:  # the settings every S3 URI of the runner is read with
        fs, root = locate(uri).filesystem()
    elif "://" in uri:
        fs, root = pafs.FileSystem.from_uri(uri)
    else:
        fs, root = pafs.LocalFileSystem(), uri
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise UserError(f"source path {uri} does not exist{_nearest(uri)}")
    if info.type == pafs.FileType.File:
        found = [info]
        base = root.rsplit("/", 1)[0]
    else:
        found = [
            f
            for f in fs.get_file_info(pafs.FileSelector(root, recursive=True))
            if f.type == pafs.FileType.File and not _hidden(f.path[len(root) :])
        ]
        base = root
    local = isinstance(fs, pafs.LocalFileSystem)
    fresh = []
    for f in found:
        name = f.path[len(base) :].lstrip("/")
        stamp = _stamp(f, local)
        if (
            since is None
            or stamp > since.mtime_ns
            or (stamp == since.mtime_ns and name not in since.names)
        ):
            fresh.append((stamp, name, f))
    fresh.sort(key=lambda t: (t[0], t[1]))
    if not fresh:
        return NewFiles(_full(uri, base), [], since, 0)
    newest = fresh[-1][0]
    names = {name for mtime, name, _ in fresh if mtime == newest}
    if since is not None and since.mtime_ns == newest:
        names |= set(since.names)
    paths = [_full(uri, f.path) for _, _, f in fresh]
    until = FileCheckpoint(newest, tuple(sorted(names)))
    return NewFiles(_full(uri, base), paths, until, sum(f.size or 0 for _, _, f in fresh))


def check_path(uri: str, where: str) -> None:
    """A local source path (not a glob) that does not exist, refused before Spark starts,
    with the nearest existing name; an object store's path is left to the read."""
    path = local_path(uri)
    if path is None or any(c in path for c in _GLOB) or os.path.exists(path):
        return
    raise UserError(f"{where}: path {uri} does not exist{_nearest(uri)}")


def _nearest(uri: str) -> str:
    path = local_path(uri)
    return did_you_mean(path) if path is not None else ""


def _stamp(info: pafs.FileInfo, local: bool) -> int:
    """When the file last changed where it is. Locally that includes the status-change
    time, which a rename sets: a file written elsewhere and moved (or copied with its
    modification time kept) into the directory later is still new. On object stores a
    rename is a new object with a new modification time."""
    modified = int(info.mtime_ns)
    if not local:
        return modified
    return max(modified, os.stat(info.path).st_ctime_ns)


def _hidden(relative: str) -> bool:
    return any(part.startswith((".", "_")) for part in relative.split("/") if part)


def _full(uri: str, path: str) -> str:
    """A path Spark reads: the scheme of the source URI kept (s3://bucket/key)."""
    if "://" in uri:
        return f"{uri.split('://', 1)[0]}://{path}"
    return path


def local_bytes(paths: list[str], limit: int) -> int | None:
    """The bytes of the local files at `paths` (files, or directories walked), or None once
    they pass `limit` or a path is not on the local disk: what a run can know of its input's
    size before Spark starts, stopping as soon as the input is not small."""
    total = 0
    for path in paths:
        if not is_local(path):
            return None
        for name in _files_under(path.removeprefix("file://")):
            total += os.path.getsize(name)
            if total > limit:
                return None
    return total


def _files_under(path: str) -> Iterator[str]:
    if os.path.isfile(path):
        yield path
    for root, _, names in os.walk(path):
        for name in names:
            yield os.path.join(root, name)
