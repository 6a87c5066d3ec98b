"""Buckets split alone (extendible hashing): the layout's math, its stored form, and the plan
of a split, against an independent model of the leaves. No JVM: the tables are written
without Spark (tests/unit/test_metrics.py runner_table)."""

from __future__ import annotations

import json
import random

import pytest

from runner.actions.expansion_plan import plan_expansion
from runner.actions.expansion_split import parse_bucket, plan_hot_splits, plan_split
from runner.commands.inspect import inspect_table, render_report
from runner.delta.snapshot import open_table
from runner.errors import RunnerError, UserError
from runner.index.layout import BucketLayout
from runner.observe.run_metrics import table_state
from tests.helpers import keys_target
from tests.unit.test_metrics import runner_table

HASHES = [random.Random(5).randrange(-(2**31), 2**31) for _ in range(4000)]


class Leaves:
    """The model: a partition's buckets as a set of (bucket, modulus) leaves, split by hand;
    a hash is in the one leaf whose residue it has."""

    def __init__(self, count: int):
        self.leaves = {(b, count) for b in range(count)}

    def split(self, bucket: int) -> None:
        (modulus,) = [m for b, m in self.leaves if b == bucket]
        self.leaves -= {(bucket, modulus)}
        self.leaves |= {(bucket, 2 * modulus), (bucket + modulus, 2 * modulus)}

    def bucket_of(self, h: int) -> int:
        (found,) = [b for b, m in self.leaves if h % m == b]
        return found


def test_buckets_split_alone_hold_exactly_the_hashes_of_the_model():
    layout, model = BucketLayout(4, {"city=b": 6}), Leaves(4)
    for bucket in (3, 7, 1, 15, 3):  # a child splits again, and a child of a child
        before = {h: layout.bucket_of("city=a", h) for h in HASHES}
        layout = layout.split("city=a", bucket)
        model.split(bucket)
        modulus = dict(model.leaves)[bucket] // 2
        for h in HASHES:
            now = layout.bucket_of("city=a", h)
            assert now == model.bucket_of(h)
            # only the split bucket's rows move, and only to its new child
            if before[h] == bucket:
                assert now in (bucket, bucket + modulus)
            else:
                assert now == before[h]
    assert sorted(layout.leaves("city=a")) == sorted(model.leaves)
    assert layout.leaf_count("city=a") == len(model.leaves) == 9
    # another partition and its own count are untouched
    assert layout.leaves("city=b") == [(b, 6) for b in range(6)]
    assert all(layout.bucket_of("city=b", h) == h % 6 for h in HASHES)


def test_the_splits_round_trip_through_the_configuration_and_old_tables_read_as_before():
    old = {"runner.index.buckets": "4", "runner.index.buckets.created": "4"}
    plain = BucketLayout.from_configuration(old)
    assert plain == BucketLayout(4, {}, 4) and plain.to_configuration() == old

    layout = plain.split("city=a", 3).split("city=a", 7).split("", 0)
    stored = layout.to_configuration()
    assert json.loads(stored["runner.index.buckets.splits"]) == {
        "": {"0": 8, "4": 8},
        "city=a": {"3": 8, "7": 16, "15": 16},
    }
    assert BucketLayout.from_configuration(stored) == layout
    assert layout.describe() == "4 buckets, 3 bucket split(s) in 2 partition(s)"


@pytest.mark.parametrize(
    "leaves, problem",
    [
        ({"3": 8}, "do not cover"),  # 7 at 8 is missing
        ({"3": 12, "7": 12}, "not 4 times a power of two"),
        ({"3": 8, "7": 8, "11": 16}, "lies inside bucket 3"),
        ({"9": 8, "7": 8}, "not below its modulus"),
    ],
)
def test_a_hand_edited_splits_setting_is_refused(leaves, problem):
    conf = {"runner.index.buckets": "4", "runner.index.buckets.splits": json.dumps({"a": leaves})}
    with pytest.raises(RunnerError, match=problem):
        BucketLayout.from_configuration(conf)


def test_a_bucket_the_partition_does_not_have_cannot_split():
    layout = BucketLayout(4).split("city=a", 1)
    with pytest.raises(
        UserError, match=r"no bucket 6 yet: it would come from bucket 2 \(modulus 4"
    ):
        layout.split("city=a", 6)
    with pytest.raises(
        UserError, match=r"no bucket 13 yet: it would come from bucket 5 \(modulus 8"
    ):
        layout.split("city=a", 13)
    assert layout.modulus_of("city=a", 5) == 8 and layout.modulus_of("city=a", 2) == 4
    assert layout.modulus_of("city=a", 1) == 8 and layout.modulus_of("city=b", 5) is None


def test_growing_a_partition_by_a_power_of_two_folds_its_shallow_splits():
    layout = BucketLayout(4).split("a", 3).split("a", 7).split("b", 0)
    grown = layout.with_counts({"a": 8, "b": 8})
    # a: 3 and 7 at 8 are now plain buckets of 8; 7's children at 16 stay split
    assert dict(grown.splits) == {"a": {7: 16, 15: 16}}
    assert grown.leaf_across(layout, "a") is None and grown.leaf_across(layout, "b") is None
    model = Leaves(8)
    model.split(7)
    assert all(grown.bucket_of("a", h) == model.bucket_of(h) for h in HASHES)
    # to 12 buckets, a bucket at modulus 8 (or 16) would be cut across: the plan refuses
    odd = layout.with_counts({"a": 12})
    assert "a" not in odd.splits and odd.leaf_across(layout, "a") in {(3, 8), (7, 16), (15, 16)}
    # to 24, the leaves at 8 divide it, but those at 16 do not
    assert (
        layout.split("c", 1).with_counts({"c": 24}).leaf_across(layout.split("c", 1), "c") is None
    )
    assert layout.with_counts({"a": 24}).leaf_across(layout, "a") is not None
    # the whole table to 8: a partition without its own count follows the default
    assert dict(layout.with_counts({}, default=8).splits) == {"a": {7: 16, 15: 16}}


@pytest.mark.parametrize(
    "text, group",
    [
        ("city=a/3", ("city=a", 3)),
        ("3", ("", 3)),
        ("/3", ("", 3)),
        ("2020/01/06/7", ("2020/01/06", 7)),
    ],
)
def test_bucket_names(text, group):
    assert parse_bucket(text) == group


@pytest.mark.parametrize("text", ["city=a/", "city=a/x", "city=a/-1", ""])
def test_bad_bucket_names_say_the_syntax(text):
    with pytest.raises(UserError, match="expected PARTITION/BUCKET"):
        parse_bucket(text)


def test_a_split_plans_one_bucket_its_files_and_the_layout_after(tmp_path):
    table = tmp_path / "t"
    rows = {("city=a", 0): 40, ("city=a", 1): 5, ("city=b", 1): 7}
    runner_table(table, rows, BucketLayout(2))
    snapshot = open_table(str(table))
    plan = plan_split(snapshot, ["city=a/0", "city=a/0"])  # named twice: split once
    (split,) = plan.splits
    assert (split.partition_path, split.bucket, split.modulus, split.children) == (
        "city=a",
        0,
        2,
        (0, 2),
    )
    assert [f.bucket for f in plan.files] == [0] and plan.rows == 40 and not plan.changes
    assert plan.layout_after.leaves("city=a") == [(0, 4), (1, 2), (2, 4)]
    assert plan.new_buckets() == [("city=a", 0), ("city=a", 2)]
    assert "city=a bucket 0: modulus 2 -> 4, into 0 and 2" in plan.render()
    assert plan.to_dict()["buckets_after"]["splits"] == {"city=a": {"0": 4, "2": 4}}

    with pytest.raises(UserError, match="did you mean 'city=a'"):
        plan_split(snapshot, ["city=aa/0"])
    with pytest.raises(UserError, match="no bucket 3 yet: it would come from bucket 1"):
        plan_split(snapshot, ["city=b/3"])

    # the automatic trigger: the buckets whose live bytes pass the threshold, not partitions
    sizes = {(f.partition_path, f.bucket): f.size for f in snapshot.files()}
    hot = plan_hot_splits(snapshot, max(sizes[("city=a", 1)], sizes[("city=b", 1)]))
    assert hot is not None and [s.name for s in hot.splits] == ["city=a/0"]
    assert plan_hot_splits(snapshot, sizes[("city=a", 0)]) is None


def test_inspect_and_metrics_count_the_buckets_split_alone(tmp_path):
    table = tmp_path / "t"
    layout = BucketLayout(2).split("city=a", 0).split("city=a", 2)
    runner_table(table, {("city=a", 0): 30, ("city=a", 6): 10, ("city=a", 1): 5}, layout)
    report = inspect_table(str(table))
    (part,) = report["partitions"]
    assert part["count"] == 2 and part["buckets"] == 4  # 1 at 2, 0 at 4, 2 and 6 at 8
    assert part["split_buckets"] == [
        {"bucket": 0, "modulus": 4, "depth": 1},
        {"bucket": 2, "modulus": 8, "depth": 2},
        {"bucket": 6, "modulus": 8, "depth": 2},
    ]
    assert [b["rows"] for b in part["bucket_detail"]] == [30, 5, 0, 10]
    assert report["buckets_split"] == {"city=a": {"0": 4, "2": 8, "6": 8}}
    assert "split alone, of 2 buckets: 0 (modulus 4, depth 1), 2 (modulus 8, depth 2)" in (
        render_report(report)
    )
    state = table_state(str(table))
    assert state is not None and state.buckets == 4


def test_a_partition_wide_expansion_keeps_or_refuses_the_splits(tmp_path):
    table = tmp_path / "t"
    layout = BucketLayout(2).split("city=a", 1)  # 1 and 3 at 4
    runner_table(table, {("city=a", 0): 3, ("city=a", 3): 3, ("city=b", 1): 3}, layout)
    snapshot, target = (
        open_table(str(table)),
        keys_target(tmp_path, {"partition_fields": "city"}, "id"),
    )
    plan = plan_expansion(snapshot, target, 4, "multiple_rehash", ["city=a"])
    assert plan.layout_after.splits == {} and plan.layout_after.count_for("city=a") == 4
    assert plan.new_buckets() == [("city=a", b) for b in range(4)]
    plan = plan_expansion(snapshot, target, 8, "multiple_rehash")  # the whole table
    assert [c.buckets_after for c in plan.changes] == [8, 8]
    with pytest.raises(
        UserError, match=r"bucket \d of city=a was split alone .* --policy overwrite"
    ):
        plan_expansion(snapshot, target, 6, "multiple_rehash", ["city=a"])
    plan = plan_expansion(snapshot, target, 6, "overwrite", ["city=a"])
    assert plan.layout_after.leaves("city=a") == [(b, 6) for b in range(6)]
