"""What a reader of a table's changes applies when restores are in the versions it reads
(runner/delta/restores.py), on logs whose commits say only what they are: a restore's
runner metadata as runner restore writes it, any other commit a plain write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.delta.restores import NetChanges, Undone, net_changes
from runner.storage.location import locate


def _log(table: Path, restores: dict[int, int], latest: int) -> None:
    """Versions 0..latest; `restores` maps a restore's version to the one it brought back."""
    (table / "_delta_log").mkdir(parents=True)
    for version in range(latest + 1):
        meta = {"operation": "upsert", "instant": f"2026{version:013d}"}
        if version in restores:
            meta = {"operation": "restore", "restored_version": restores[version]}
        info = {"commitInfo": {"timestamp": version, "operation": "WRITE", "runner": meta}}
        (table / "_delta_log" / f"{version:020d}.json").write_text(json.dumps(info) + "\n")


@pytest.mark.parametrize(
    ("restores", "since", "until", "applied", "skipped"),
    [
        ({}, 3, 6, (4, 5, 6), ()),
        # the bad versions 5, 6 and the restore 7 to 4, read from before them
        ({7: 4}, 4, 8, (8,), (5, 6, 7)),
        ({7: 4}, 2, 8, (3, 4, 8), (5, 6, 7)),
        ({7: 4}, 4, 7, (), (5, 6, 7)),
        # a restore of a restore: 9 brings back 7, which is 4
        ({7: 4, 9: 7}, 2, 9, (3, 4), (5, 6, 7, 8, 9)),
        # a restore to a version before an earlier restore read: 7 brought back 2, and 9
        # brings back 3, which the reader at 7 lacks
        ({7: 2, 9: 3}, 7, 10, (3, 10), (8, 9)),
        # two restores in one read
        ({5: 3, 8: 6}, 2, 9, (3, 6, 9), (4, 5, 7, 8)),
    ],
)
def test_a_reader_skips_a_restore_and_what_it_undid(
    tmp_path, restores, since, until, applied, skipped
):
    _log(tmp_path, restores, until)
    net = net_changes(locate(str(tmp_path)), since, until)
    assert net == NetChanges(since, until, applied)
    assert sorted(net.skipped) == list(skipped)
    assert net.read == applied


def test_a_reader_that_read_what_a_restore_undid_reads_the_undo(tmp_path):
    _log(tmp_path, {7: 4, 10: 7}, 11)
    net = net_changes(locate(str(tmp_path)), 6, 11)
    # it read 5 and 6, which 7 undid; 10 undid 8 and 9, which it has not read yet
    assert net.undone == Undone(restore=7, restored=4, since=6, versions=(5, 6), common=4)
    assert net.read == (7, 8, 9, 10, 11) and not net.skipped
    # read from the version both lineages share, the restores are followed by skipping
    assert net_changes(locate(str(tmp_path)), 4, 11).skipped == {5, 6, 7, 8, 9, 10}
