"""One bucket's merge decision, in pyarrow: no Spark needed."""

from __future__ import annotations

import pyarrow as pa

from runner.write.bucket_merge import DELETE, MergeSettings, merge_bucket, summarize_stored
from runner.write.writer import group_order, split_groups

UPSERT = MergeSettings("upsert", "ts", merge_mode="event_time", filter_dupes=False)


def _incoming(keys, ts, delete=None) -> pa.Table:
    return pa.table(
        {"_record_key": keys, "ts": pa.array(ts, pa.int64()), DELETE: delete or [False] * len(keys)}
    )


def _stored(keys, ts, settings=UPSERT) -> pa.Table:
    return summarize_stored(
        pa.table({"_record_key": keys, "ts": pa.array(ts, pa.int64())}), settings
    )


def test_upsert_event_time_inserts_updates_and_skips_older():
    merge = merge_bucket(
        _incoming(["a", "b", "c", "d"], [5, 1, 3, None]),
        _stored(["a", "b", "d"], [5, 2, 1]),
        UPSERT,
    )
    assert merge.counts == {"insert": 1, "update": 1, "deleted": 0, "stale": 2, "delete_missing": 0}
    assert merge.drop_keys.to_pylist() == ["a"]  # equal ts: the incoming record wins
    assert merge.write.column("_record_key").to_pylist() == ["a", "c"]


def test_upsert_commit_time_always_replaces_and_deletes_count_stored_rows():
    settings = MergeSettings("upsert", "ts", merge_mode="commit_time", filter_dupes=False)
    merge = merge_bucket(
        _incoming(["a", "b", "z"], [0, 0, 0], delete=[False, True, True]),
        _stored(["a", "b", "b"], [9, 9, 9], settings),
        settings,
    )
    assert merge.counts["update"] == 1 and merge.counts["deleted"] == 2
    assert merge.counts["delete_missing"] == 1
    assert sorted(merge.drop_keys.to_pylist()) == ["a", "b"]
    assert merge.write.column("_record_key").to_pylist() == ["a"]


def test_a_stored_row_without_ordering_value_is_replaced():
    merge = merge_bucket(_incoming(["a"], [1]), _stored(["a"], [None]), UPSERT)
    assert merge.counts["update"] == 1 and merge.drop_keys.to_pylist() == ["a"]


def test_insert_keeps_everything_unless_filter_dupes():
    plain = MergeSettings("insert", None, merge_mode="event_time", filter_dupes=False)
    merge = merge_bucket(_incoming(["a", "b"], [1, 1]), _stored(["a"], [1], plain), plain)
    assert merge.counts == {"insert": 2} and len(merge.drop_keys) == 0
    dedupe = MergeSettings("insert", None, merge_mode="event_time", filter_dupes=True)
    merge = merge_bucket(_incoming(["a", "b"], [1, 1]), _stored(["a"], [1], dedupe), dedupe)
    assert merge.counts == {"insert": 1, "duplicate": 1}
    assert merge.write.column("_record_key").to_pylist() == ["b"]


def test_delete_removes_stored_keys_and_counts_missing():
    settings = MergeSettings("delete", None, merge_mode="event_time", filter_dupes=False)
    merge = merge_bucket(
        _incoming(["a", "q"], [0, 0]), _stored(["a", "a", "b"], [1, 1, 1], settings), settings
    )
    assert merge.counts == {"deleted": 2, "delete_missing": 1}
    assert merge.drop_keys.to_pylist() == ["a"] and merge.write.num_rows == 0


def test_rows_in_any_order_are_written_one_whole_bucket_at_a_time():
    # a bulk_insert task's rows come in source-file order: the writer must hand each
    # (partition path, bucket) its rows in one piece, whatever their interleaving
    rows = pa.table(
        {
            "_partition_path": ["b", "a", "b", "a", "a", "b", "a"],
            "_bucket": pa.array([1, 0, 1, 1, 0, 0, 1], pa.int32()),
            "id": [0, 1, 2, 3, 4, 5, 6],
        }
    )
    order, codes = group_order(rows)
    groups = [
        (group, part.column("id").to_pylist())
        for group, part in split_groups(rows.take(order), codes=codes)
    ]
    assert sorted(groups) == [
        (("a", 0), [1, 4]),
        (("a", 1), [3, 6]),
        (("b", 0), [5]),
        (("b", 1), [0, 2]),
    ]  # each group once, whole, its rows in their first order
    # a table sorted by the strings themselves splits the same without codes
    sorted_rows = rows.sort_by([("_partition_path", "ascending"), ("_bucket", "ascending")])
    assert [g for g, _ in split_groups(sorted_rows)] == [g for g, _ in sorted(groups)]
