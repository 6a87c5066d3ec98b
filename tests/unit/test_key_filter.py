"""A data file's key filter: written into every data file's footer, never wrong about a key
the file holds, and what lets a write of new keys leave a stored file's keys unread."""

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from runner.delta.deletion_vectors import DeletionVectorFile
from runner.delta.snapshot import DataFile
from runner.storage.key_filter import FOOTER_KEY, KeyFilter, footer_filter, key_hashes
from runner.storage.meta_columns import RECORD_KEY
from runner.storage.parquet_file import BucketFile
from runner.write.stored_bucket import StoredBucket
from runner.write.task import SeqNo, WriteTask

SCHEMA = pa.schema([(RECORD_KEY, pa.string()), ("amount", pa.int64())])


def _keys(prefix: str, n: int, start: int = 0) -> list[str]:
    return [f"{prefix}{i}" for i in range(start, start + n)]


def test_a_filter_holds_every_key_it_was_built_from_whatever_its_bytes():
    keys = [
        *_keys("order_id:", 50_000),
        *_keys("ключ-", 1_000),  # not ASCII: hashed byte by byte
        "x" * 1_000,  # longer than the padded words
        "",
        "a",
        "a\0",
    ]
    built = KeyFilter.of(key_hashes(pa.array(keys)))
    again = KeyFilter.decode(built.encode())
    assert again is not None
    assert again.might_hold(key_hashes(pa.array(keys))).all()
    # one key at a time (a slice, as a batch's bucket is) gives the same hashes
    assert again.might_hold(key_hashes(pa.array(keys).slice(50_500, 7))).all()


def test_a_filter_says_no_to_nearly_every_absent_key():
    built = KeyFilter.of(key_hashes(pa.array(_keys("order_id:", 100_000))))
    absent = key_hashes(pa.array(_keys("order_id:", 200_000, start=100_000)))
    assert built.might_hold(absent).mean() < 1e-3


def test_a_key_hashes_the_same_whatever_the_keys_beside_it():
    short = ["id:0,region:eu", "7", "ключ"]
    alone = key_hashes(pa.array(short))
    beside_longer = key_hashes(pa.array([*short, "x" * 40, "y" * 300]))
    assert (alone == beside_longer[:3]).all()
    assert (key_hashes(pa.array(["id:0,region:eu"])) == alone[:1]).all()


def test_equal_keys_hash_equal_and_different_keys_differ():
    one = key_hashes(pa.chunked_array([["a", "b"], ["ключ", "a"]]))
    assert one[0] == one[3] and len(set(one.tolist())) == 3
    assert len(np.unique(key_hashes(pa.array([str(i) for i in range(200_000)])))) == 200_000


def test_a_footer_value_of_another_version_is_not_read():
    value = KeyFilter.of(key_hashes(pa.array(["1"]))).encode()
    assert footer_filter({FOOTER_KEY: value}) is not None
    assert footer_filter({}) is None
    assert footer_filter({FOOTER_KEY: b"2:8:64:AAAAAAAAAAAA"}) is None  # a later version
    assert footer_filter({FOOTER_KEY: b"1:8:6400:AAAA"}) is None  # cut short


def _data_file(tmp_path, name: str, keys: list[str], dv=None) -> DataFile:
    out = BucketFile(pafs.LocalFileSystem(), f"{tmp_path}/{name}", SCHEMA, key_filter=True)
    half = len(keys) // 2  # written in two calls: the filter covers both
    out.write(pa.table({RECORD_KEY: keys[:half], "amount": range(half)}, schema=SCHEMA))
    rest = len(keys) - half
    out.write(pa.table({RECORD_KEY: keys[half:], "amount": range(rest)}, schema=SCHEMA))
    assert out.close()
    return DataFile(name, out.size, len(keys), "", 0, "f", deletion_vector=dv)


def _task(tmp_path) -> WriteTask:
    return WriteTask(pafs.LocalFileSystem(), str(tmp_path), SCHEMA, "1", "t", SeqNo("1", 0))


def test_every_data_file_carries_the_filter_of_its_keys_and_a_change_file_none(tmp_path):
    _data_file(tmp_path, "data.parquet", _keys("k", 1_000))
    found = footer_filter(pq.read_metadata(f"{tmp_path}/data.parquet").metadata)
    assert found is not None and found.might_hold(key_hashes(pa.array(_keys("k", 1_000)))).all()
    out = BucketFile(pafs.LocalFileSystem(), f"{tmp_path}/c.parquet", SCHEMA, key_filter=False)
    out.write(pa.table({RECORD_KEY: ["k1"], "amount": [1]}, schema=SCHEMA))
    out.close()
    assert FOOTER_KEY not in (pq.read_metadata(f"{tmp_path}/c.parquet").metadata or {})


def test_new_keys_leave_the_stored_files_unread_and_every_live_row_kept(tmp_path):
    task = _task(tmp_path)
    dv_file = DeletionVectorFile(task.fs, task.root, "1")
    dv = dv_file.add(np.array([0, 5], dtype=np.uint64))  # two of the first file's rows gone
    dv_file.close()
    files = [
        _data_file(tmp_path, "a.parquet", _keys("a", 2_000), dv=dv),
        _data_file(tmp_path, "b.parquet", _keys("b", 2_000)),
    ]
    new_keys = pa.chunked_array([_keys("new", 300)])
    stored = StoredBucket.read(task, files, [RECORD_KEY], whole=False, batch_keys=new_keys)
    assert stored.unread == {0, 1} and stored.keys.num_rows == 0
    assert stored.deleted_with(np.zeros(0, dtype=bool)) == 2  # the limits still count them
    # a rewrite of both files keeps every live row; the rows of the batch's keys: none
    kept = pa.concat_tables(stored.kept_rows(np.zeros(0, dtype=bool), [0, 1]))
    assert kept.num_rows == 3_998 and "a0" not in kept.column(RECORD_KEY).to_pylist()
    assert stored.rows_of_batch_keys().num_rows == 0


def test_a_file_that_may_hold_a_key_is_read_and_the_other_is_not(tmp_path):
    task = _task(tmp_path)
    files = [
        _data_file(tmp_path, "a.parquet", _keys("a", 2_000)),
        _data_file(tmp_path, "b.parquet", _keys("b", 2_000)),
    ]
    batch = pa.chunked_array([["b7", *_keys("new", 50)]])
    stored = StoredBucket.read(task, files, [RECORD_KEY], whole=False, batch_keys=batch)
    assert stored.unread == {0}
    assert stored.matched_keys.column(RECORD_KEY).to_pylist() == ["b7"]
    dropped = stored.dropped(pa.array(["b7"]))
    kept = pa.concat_tables(stored.kept_rows(dropped, [0, 1]))
    assert kept.num_rows == 3_999 and "b7" not in kept.column(RECORD_KEY).to_pylist()
    # a bucket read whole (copy-on-write, small) reads every file
    whole = StoredBucket.read(task, files, [RECORD_KEY], whole=True, batch_keys=batch)
    assert whole.unread == frozenset() and whole.keys.num_rows == 4_000
