"""A table's restores, and what a reader that has taken in its changes up to one version
must apply to reach another: a chained pipeline's `delta` source (runner/sources/delta.py).

A restore (runner/actions/restore.py) commits a version R whose rows are those of an older
version V, so the rows of a version descend from a chain of versions, its lineage: an
ordinary version and the lineage of the version before it; a restore R to V and V's
lineage (a restore of a restore follows both jumps). A reader at version `since` going to
`until` applies the versions of `until`'s lineage that `since`'s lacks, oldest first; the
versions a restore undid are skipped with the restore itself, whose change data files hold
their undo: A as of R equals A as of V, so the changes up to V and those after R are the
net change, whatever order the reader merges rows in.

When `since`'s lineage holds versions that `until`'s lacks, the reader has already taken
in changes a restore undid (`Undone`): only the restore's undo can take them out again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.delta.log_replay import read_commit
from runner.storage.location import TableLocation

OPERATION = "restore"  # the runner metadata's `operation` of a restore's commit
RESTORED_VERSION = "restored_version"  # its field: the version whose rows it brought back


@dataclass(frozen=True)
class Undone:
    """Versions a reader took in that a restore undid, the reader being at `since`."""

    restore: int  # the restore's version that took the lineage back before `since`
    restored: int  # the version that restore brought back
    since: int
    versions: tuple[int, ...]  # the versions read that the restore undid, oldest first
    common: int  # the newest version in both lineages (-1: none): a reader at it or before
    # it follows the restore by skipping what it undid


@dataclass(frozen=True)
class NetChanges:
    """The versions of (since, until] a reader applies, and the undone ones it has read."""

    since: int
    until: int
    applied: tuple[int, ...]  # oldest first
    undone: Undone | None = None

    @property
    def read(self) -> tuple[int, ...]:
        """The versions to read: those applied; every one of (since, until] when the reader
        has read undone versions (the restore's undo is what takes them out again)."""
        if self.undone is not None:
            return tuple(range(self.since + 1, self.until + 1))
        return self.applied

    @property
    def skipped(self) -> frozenset[int]:
        """The versions of (since, until] not read: a restore and those it undid."""
        return frozenset(range(self.since + 1, self.until + 1)) - set(self.read)


def restored_version(commit_info: Mapping[str, Any]) -> int | None:
    """The version a restore's commit brought back; None for any other commit."""
    meta = commit_info.get("runner")
    if not isinstance(meta, dict) or meta.get("operation") != OPERATION:
        return None
    value = meta.get(RESTORED_VERSION)
    return value if isinstance(value, int) else None


def net_changes(location: TableLocation, since: int, until: int) -> NetChanges:
    """What a reader of the table's changes at version `since` applies to reach `until`:
    the two lineages walked back together until they meet (each commit read once, only
    those the walk passes; a version the log no longer holds counts as no restore)."""
    jumps: dict[int, int | None] = {}

    def restored(version: int) -> int | None:
        if version not in jumps:
            entry = read_commit(location, version)
            back = restored_version(entry.commit_info) if entry is not None else None
            jumps[version] = back if back is not None and back < version else None
        return jumps[version]

    ahead, behind = until, since
    applied: list[int] = []
    read: list[int] = []
    crossing: tuple[int, int] | None = None
    while ahead != behind:
        if ahead > behind:
            back = restored(ahead)
            if back is None:
                applied.append(ahead)
                ahead -= 1
                continue
            if back < behind and crossing is None:
                crossing = (ahead, back)
            ahead = back
        else:
            back = restored(behind)
            if back is None:
                read.append(behind)
            behind = behind - 1 if back is None else back
    undone = None
    if read:
        assert crossing is not None, "the reader's walk moves only after a restore's jump"
        undone = Undone(crossing[0], crossing[1], since, tuple(reversed(read)), ahead)
    return NetChanges(since, until, tuple(reversed(applied)), undone)
