"""A dry run's file system: it reads the table's files where they are and writes every new
file into a scratch directory instead, so `runner run --dry-run` merges for real (and can
count what it would add and remove) while nothing under the table changes.

Every write, directory and removal of the run's pyarrow code goes through the table's
file system (`TableLocation.filesystem`), so redirecting it there covers the data files,
deletion vectors and change data files of every write handle, on the driver and in Spark
tasks (the handler is picklable). A removal of a file under the table is refused.
"""

from __future__ import annotations

from typing import Any

import pyarrow.fs as pafs


class RedirectedWrites(pafs.FileSystemHandler):  # type: ignore[misc]
    """`base`'s files under `root`, with writes under `root` sent to `scratch`."""

    def __init__(self, base: pafs.FileSystem, root: str, scratch: str) -> None:
        self.base, self.root, self.scratch = base, root.rstrip("/"), scratch.rstrip("/")

    def __reduce__(self) -> tuple[Any, ...]:
        return (RedirectedWrites, (self.base, self.root, self.scratch))

    def _moved(self, path: str) -> str:
        """Where a path under the table is written instead."""
        if path == self.root or path.startswith(self.root + "/"):
            return self.scratch + path[len(self.root) :]
        return path

    def _readable(self, path: str) -> str:
        """A file this run wrote is read from the scratch directory, any other where it is."""
        moved = self._moved(path)
        if moved != path and self.base.get_file_info(moved).type != pafs.FileType.NotFound:
            return moved
        return path

    def get_type_name(self) -> str:
        return "runner-dry-run"

    def equals(self, other: Any) -> bool:
        return isinstance(other, RedirectedWrites) and (other.root, other.scratch) == (
            self.root,
            self.scratch,
        )

    def normalize_path(self, path: str) -> str:
        return str(self.base.normalize_path(path))

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return [self.base.get_file_info(self._readable(p)) for p in paths]

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return list(self.base.get_file_info(selector))

    def create_dir(self, path: str, recursive: bool) -> None:
        self.base.create_dir(self._moved(path), recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self._refuse_under_table(path)
        self.base.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self._refuse_under_table(path)
        self.base.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise PermissionError("a dry run removes nothing")

    def delete_file(self, path: str) -> None:
        self.base.delete_file(self._moved(path))  # a table's own file is not there: not found

    def move(self, src: str, dest: str) -> None:
        self.base.move(self._moved(src), self._moved(dest))

    def copy_file(self, src: str, dest: str) -> None:
        self.base.copy_file(self._readable(src), self._moved(dest))

    def open_input_stream(self, path: str) -> Any:
        return self.base.open_input_stream(self._readable(path))

    def open_input_file(self, path: str) -> Any:
        return self.base.open_input_file(self._readable(path))

    def open_output_stream(self, path: str, metadata: Any = None) -> Any:
        moved = self._moved(path)
        self.base.create_dir(moved.rsplit("/", 1)[0], recursive=True)
        return self.base.open_output_stream(moved, metadata=metadata)

    def open_append_stream(self, path: str, metadata: Any = None) -> Any:
        return self.base.open_append_stream(self._moved(path), metadata=metadata)

    def _refuse_under_table(self, path: str) -> None:
        if self._moved(path) != path:
            raise PermissionError(f"a dry run removes nothing under the table ({path})")


def scratch_root(root: str, instant: str) -> str:
    """A dry run's scratch directory: beside the table, on the same store."""
    parent, _, name = root.rstrip("/").rpartition("/")
    return f"{parent}/_runner_dry_run/{name}-{instant}"
