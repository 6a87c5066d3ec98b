"""A rehash's bitmaps (runner/actions/rehash_bitmaps.py): how the writer reads them back,
and how the files are shared out among the writer tasks. Spark's part is in
tests/spark/test_expand.py and test_bucket_split.py."""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pytest

from runner.actions.rehash_bitmaps import bitmaps_by_file, rounds, task_files
from runner.delta.snapshot import DataFile
from runner.errors import RunnerError
from runner.storage.meta_columns import BUCKET
from runner.write.regroup_writer import BITS, WORD, new_buckets


def _bitmaps(rows_by_bucket: dict[int, list[int]]) -> pa.Table:
    """What Spark's aggregate gives for a file: a row per (bucket, word), bits set by hand."""
    out: dict[tuple[int, int], int] = {}
    for bucket, rows in rows_by_bucket.items():
        for r in rows:
            out[(bucket, r // 64)] = out.get((bucket, r // 64), 0) | (1 << (r % 64))
    signed = [v - (1 << 64) if v >= 1 << 63 else v for v in out.values()]  # bit 63: negative
    return pa.table(
        {
            BUCKET: pa.array([b for b, _ in out], pa.int32()),
            WORD: pa.array([w for _, w in out], pa.int64()),
            BITS: pa.array(signed, pa.int64()),
        }
    )


def test_every_row_gets_the_bucket_its_bit_names():
    rng = np.random.default_rng(3)
    count = 1000  # past several words, with rows 63 and 127 (the sign bit) among them
    chosen = rng.choice([5, 21, 37], size=count)
    rows = {b: [int(r) for r in np.flatnonzero(chosen == b)] for b in (5, 21, 37)}
    shuffled = _bitmaps(rows).take(rng.permutation(len(_bitmaps(rows))))
    np.testing.assert_array_equal(new_buckets(shuffled, count, "f.parquet"), chosen)


@pytest.mark.parametrize(
    ("rows_by_bucket", "count"),
    [
        ({1: [0, 1], 3: [3]}, 4),  # row 2 has no bucket
        ({1: [0, 1, 2], 3: [2, 3]}, 4),  # row 2 has two
        ({1: [0, 1, 2, 3, 4]}, 4),  # a row past the file's end
    ],
)
def test_a_row_missing_doubled_or_past_the_end_is_refused(rows_by_bucket, count):
    with pytest.raises(RunnerError, match=r"f\.parquet: Spark gave \d+ of its 4 rows"):
        new_buckets(_bitmaps(rows_by_bucket), count, "f.parquet")


def _file(name: str, bucket: int, size: int, partition: str = "city=a") -> DataFile:
    return DataFile(f"{partition}/{name}", size, 10, partition, bucket, f"g{bucket}")


def test_tasks_hold_whole_old_buckets_and_about_equal_bytes():
    files = [
        _file("b0-1", 0, 500), _file("b0-2", 0, 400),  # bucket 0: 900 bytes in two files
        _file("b1", 1, 600), _file("b2", 2, 300), _file("b3", 3, 250),
        _file("b0-x", 0, 100, "city=b"),  # bucket 0 of another partition: another bucket
    ]  # fmt: skip
    tasks = task_files(files, 2)
    assert len(tasks) == 2
    where = {(f.partition_path, f.bucket): i for i, held in enumerate(tasks) for f in held}
    assert all(
        where[(f.partition_path, f.bucket)] == i for i, held in enumerate(tasks) for f in held
    )
    held_0 = next(held for held in tasks if any(f.path.endswith("b0-1") for f in held))
    names = [f.path.rsplit("/", 1)[-1] for f in held_0]
    assert names.index("b0-2") == names.index("b0-1") + 1  # one after the other
    loads = sorted(sum(f.size for f in held) for held in tasks)
    assert sum(loads) == 2150 and loads[1] <= 1150  # not 1500 and 650: the largest first
    assert task_files(files[:1], 8) == [files[:1]]  # no more tasks than buckets


def test_each_task_gets_the_bitmaps_of_its_files_in_its_file_order():
    files = [_file("x", 0, 10), _file("y", 1, 20), _file("z", 2, 30), _file("empty", 3, 5)]
    tasks = task_files(files, 2)
    names = ["z", "x", "y", "z", "y"]
    found = pa.table(
        {
            "__runner_stored_file": names,
            BUCKET: pa.array([2, 0, 1, 6, 5], pa.int32()),
            WORD: pa.array([0, 0, 0, 0, 1], pa.int64()),
            BITS: pa.array([1, 2, 3, 4, 5], pa.int64()),
        }
    )
    by_file = bitmaps_by_file(found, tasks)
    assert [len(per_file) for per_file in by_file] == [len(held) for held in tasks]
    for held, per_file in zip(tasks, by_file, strict=True):
        for stored, bitmaps in zip(held, per_file, strict=True):
            name = stored.path.rsplit("/", 1)[-1]
            got = sorted(bitmaps.column(BITS).to_pylist())
            assert got == [b + 1 for b, n in enumerate(names) if n == name], name
            assert bitmaps.column_names == [BUCKET, WORD, BITS]

    stray = found.set_column(0, "__runner_stored_file", pa.array(["x", "w", "y", "z", "y"]))
    with pytest.raises(RunnerError, match=r"Spark read a file \(w\) that is not one of this"):
        bitmaps_by_file(stray, tasks)


def test_a_large_expansion_goes_in_rounds_of_whole_old_buckets():
    files = [_file(f"b{b}-{i}", b, 100) for b in range(4) for i in range(2)]  # 20 rows a bucket
    got = rounds(files, most_rows=45)
    assert [[f.path.rsplit("/", 1)[-1] for f in r] for r in got] == [
        ["b0-0", "b0-1", "b1-0", "b1-1"],
        ["b2-0", "b2-1", "b3-0", "b3-1"],
    ]
    assert len(rounds(files, most_rows=5)) == 4  # a bucket past the limit goes alone
    assert rounds(files) == [sorted(files, key=lambda f: f.path)]


def test_the_bitmaps_travel_to_the_tasks_once_not_once_per_file():
    """Each file's bitmaps are their own buffers: a slice would pickle (and ship to every
    writer task) the whole table's for each of its files, 200 times the bytes here."""
    files = [_file(f"f{i}", i % 8, 100) for i in range(200)]
    found = pa.table(
        {
            "__runner_stored_file": [f"f{i}" for i in range(200) for _ in range(50)],
            BUCKET: pa.array([i % 8 for i in range(200) for _ in range(50)], pa.int32()),
            WORD: pa.array([w for _ in range(200) for w in range(50)], pa.int64()),
            BITS: pa.array([-1] * 10_000, pa.int64()),
        }
    )
    shipped = len(pickle.dumps(bitmaps_by_file(found, task_files(files, 2))))
    assert shipped < 3 * len(pickle.dumps(found.drop_columns(["__runner_stored_file"])))
