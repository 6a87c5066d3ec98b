"""File groups inside a bucket: which files form a group, where a key goes, where rows are
cut (runner/write/file_groups.py)."""

from __future__ import annotations

import pyarrow as pa

from runner.delta.snapshot import DataFile
from runner.write.file_groups import cut_points, file_groups, route


def _file(file_id: str, lo: str | None, hi: str | None, size: int = 100) -> DataFile:
    return DataFile(f"{file_id}.parquet", size, 10, "", 0, file_id, min_key=lo, max_key=hi)


def test_disjoint_groups_come_in_key_order_with_their_files():
    files = [_file("b", "m", "p"), _file("a", "c", "f"), _file("b", "n", "q"), _file("c", "x", "z")]
    groups = file_groups(files)
    assert [(g.file_id, g.lowest, len(g.files)) for g in groups] == [
        ("a", "c", 1),
        ("b", "m", 2),  # a base file and its delta file: one group
        ("c", "x", 1),
    ]


def test_overlapping_groups_or_missing_statistics_make_one_unit():
    overlapping = [_file("a", "c", "n", size=50), _file("b", "m", "p", size=80)]
    assert [(g.file_id, len(g.files)) for g in file_groups(overlapping)] == [("b", 2)]
    touching = [_file("a", "c", "m"), _file("b", "m", "p")]  # one key in both ranges
    assert len(file_groups(touching)) == 1
    unknown = [_file("a", "c", "f"), _file("b", None, None)]
    [unit] = file_groups(unknown)
    assert unit.lowest is None and len(unit.files) == 2
    assert file_groups([]) == []


def test_a_key_goes_to_the_last_group_starting_at_or_below_it():
    groups = file_groups([_file("a", "c", "f"), _file("b", "m", "p"), _file("c", "x", "z")])
    keys = pa.array(["a", "c", "g", "m", "q", "w", "x", "zz"])
    # below every range: the first group; between two ranges: the lower one
    assert route(keys, groups).tolist() == [0, 0, 0, 1, 1, 1, 2, 2]


def test_rows_are_cut_in_equal_parts_never_inside_a_key():
    keys = pa.array([f"k{i:03d}" for i in range(100)])
    assert cut_points(keys, per_row=10, target_bytes=1000) == []  # fits one group
    assert cut_points(keys, per_row=10, target_bytes=999) == [50]  # a leaf split in two
    assert cut_points(keys, per_row=10, target_bytes=250) == [25, 50, 75]
    repeated = pa.array(["a"] * 3 + ["b"] * 5 + ["c"] * 2)
    assert cut_points(repeated, per_row=10, target_bytes=60) == [8]  # not inside "b"
    assert cut_points(pa.array(["a"] * 10), per_row=10, target_bytes=20) == []
