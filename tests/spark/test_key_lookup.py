"""`runner read --key`: the live rows of record keys, from only the files that can hold them.

Tables are written with run_pipeline; the expected rows come from delta-rs (pandas), the
expected files from the Delta log's statistics and the reference hash (tests/reference.py).
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pandas as pd
import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from runner.actions.expand import ExpansionRequest, expand_table
from runner.cli import cli
from runner.commands.key_bucket import KeyHasher, key_hasher
from runner.commands.key_lookup import BY_BUCKET, lookup_keys, read_keys
from runner.commands.keys import preview_keys, target_from_properties
from runner.delta.snapshot import open_table
from runner.delta.table_config import table_settings
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from runner.storage.meta_columns import META_COLUMNS
from tests.helpers import NEVER_REWRITE, keys_target, read_table, write_batch, write_spec
from tests.reference import bucket_of
from tests.s3 import moto_server, s3_environment

Values = Callable[[str], tuple[str | None, ...]]  # a key's hash field values


def _rows(ids: list[str], cities: list[str] | None, ts: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": ids,
            "city": cities or ["ams" if n % 2 else "sf" for n in range(len(ids))],
            "ts": [ts] * len(ids),
            "v": [f"v{ts}-{i}" for i in ids],
        }
    )


def _target(operation: str, buckets: int, **extra) -> dict:
    return {
        "operation": operation,
        "record_key": "id",
        "precombine_field": "ts",
        "key_generator": {"type": "SIMPLE", "partition_fields": "city"},
        "index": {"buckets": buckets},
        **extra,
    }


def _run(spark, directory, spec, frame: pd.DataFrame) -> None:
    write_batch(directory, frame)
    run_pipeline(load_spec(spec), spark=spark)


def _expected(table, keys: list[str]) -> pd.DataFrame:
    """The table's live rows of `keys` (delta-rs), sorted."""
    rows = read_table(table)
    return _sorted(rows[rows["_record_key"].isin(keys)])


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(["_record_key", "_partition_path"]).reset_index(drop=True)


def _files_holding(table, keys: list[str], values: Values, count: Callable[[str], int]) -> int:
    """The live files of the keys' buckets whose _record_key range holds one of them."""
    actions = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()
    return sum(
        any(
            a["min._bucket"] == bucket_of(values(k), count(a["min._partition_path"]))
            and a["min._record_key"] <= k <= a["max._record_key"]
            for k in keys
        )
        for a in actions
    )


def _one(key: str) -> tuple[str | None, ...]:
    return (key,)


@contextmanager
def _copied_to_s3(table, monkeypatch) -> Iterator[str]:
    """The table's files copied to an S3 endpoint (moto), the AWS_* settings pointing at
    it; its s3:// URI."""
    boto3 = pytest.importorskip("boto3")
    with moto_server() as endpoint:
        for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3"):
            monkeypatch.delenv(name, raising=False)
        for name, value in s3_environment(endpoint).items():
            monkeypatch.setenv(name, value)
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket="lookups")
        for path in table.rglob("*"):
            if path.is_file():
                client.upload_file(str(path), "lookups", f"t/{path.relative_to(table)}")
        yield "s3://lookups/t"


@pytest.fixture(scope="module")
def ranged(spark, tmp_path_factory):
    """Two partitions x 2 buckets, each bucket two files with disjoint key ranges (keys k...
    in the base file, m... in a merge-on-read delta file), as a bucket of two file groups
    has."""
    work = tmp_path_factory.mktemp("ranged")
    spec = write_spec(
        work, _target("insert", 2, table_type="MERGE_ON_READ", compaction=NEVER_REWRITE)
    )
    _run(spark, work, spec, _rows([f"k{i:04d}" for i in range(200)], None, 1))
    _run(spark, work, spec, _rows([f"m{i:04d}" for i in range(200)], None, 2))
    return work / "table"


def test_one_file_is_opened_per_partition_in_a_bucket_of_several_ranges(ranged):
    files = DeltaTable(str(ranged)).get_add_actions(flatten=True)
    assert files.num_rows == 8  # 2 partitions x 2 buckets x 2 ranges

    found = lookup_keys(str(ranged), ["k0005"])
    # the key's bucket in each partition has two files; only the k... one can hold it
    assert found.opened == {"ams": 1, "sf": 1} and found.pruning == BY_BUCKET
    assert found.missing == () and found.rows.num_rows == 1
    assert found.rows.column_names[: len(META_COLUMNS)] == list(META_COLUMNS)
    pd.testing.assert_frame_equal(found.rows.to_pandas(), _expected(ranged, ["k0005"]))

    keys = ["m0199", "k0005", "zzz", "k0150", "a"]
    found = lookup_keys(str(ranged), keys)
    assert found.missing == ("zzz", "a")
    assert found.files_opened == _files_holding(ranged, keys, _one, lambda _: 2)
    # rows come in the order of the keys asked
    assert found.rows.column("_record_key").to_pylist() == ["m0199", "k0005", "k0150"]
    pd.testing.assert_frame_equal(_sorted(found.rows.to_pandas()), _expected(ranged, keys))
    assert '3 of 5 key(s) found; not found: "zzz", "a"' in found.describe("t")


def test_the_command_reads_keys_from_a_file_and_lists_the_missing(ranged, tmp_path):
    listed = tmp_path / "keys.txt"
    listed.write_text("k0007\nm0002\n\nnope\n")
    done = CliRunner().invoke(
        cli, ["read", str(ranged), "--keys-from", str(listed), "--key", "k0009", "--format", "csv"]
    )
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0].startswith('"_commit_time","_commit_seqno","_record_key"')
    assert sorted(line.split(",")[2] for line in lines[1:]) == ['"k0007"', '"k0009"', '"m0002"']
    assert '3 of 4 key(s) found; not found: "nope"' in done.stderr
    opened = _files_holding(ranged, ["k0007", "m0002", "nope", "k0009"], _one, lambda _: 2)
    assert f"from {opened} of 8 file(s) opened" in done.stderr

    clash = CliRunner().invoke(cli, ["read", str(ranged), "--key", "x", "--since", "1" * 17])
    assert clash.exit_code == 2 and "drop --since" in clash.output


def test_composite_keys_with_null_and_empty_values_on_a_table_without_partitions(spark, tmp_path):
    target = {
        "operation": "upsert",
        "record_key": ["id", "region"],
        "precombine_field": "ts",
        "key_generator": {"type": "NON_PARTITIONED"},
        "index": {"buckets": 4},
    }
    spec = write_spec(tmp_path, target)
    regions = ["eu", None, "", "a,b", "x:y"] * 8
    frame = pd.DataFrame(
        {"id": range(40), "region": regions, "ts": 1, "v": [f"v{i}" for i in range(40)]}
    )
    _run(spark, tmp_path, spec, frame)
    table = tmp_path / "table"
    keys = [
        "id:0,region:eu",
        "id:1,region:__null__",
        "id:2,region:__empty__",
        "id:3,region:a,b",
        "id:4,region:x:y",
        "id:0,region:us",  # no such row
        "id:0",  # no key of this table has this form
    ]
    found = lookup_keys(str(table), keys)
    assert found.missing == ("id:0,region:us", "id:0") and found.pruning == BY_BUCKET
    pd.testing.assert_frame_equal(_sorted(found.rows.to_pandas()), _expected(table, keys))

    values = {
        "id:0,region:eu": ("0", "eu"),
        "id:1,region:__null__": ("1", None),  # Spark's hash skips a null
        "id:2,region:__empty__": ("2", ""),
        "id:3,region:a,b": ("3", "a,b"),
        "id:4,region:x:y": ("4", "x:y"),
        "id:0,region:us": ("0", "us"),
    }
    expected = _files_holding(table, list(values), values.__getitem__, lambda _: 4)
    # "id:0" names no bucket: it is pruned by key range alone, and no file's range holds it
    # (every key of the table starts with "id:<n>,")
    assert found.opened == {"": expected}


def test_merge_on_read_returns_the_new_row_of_an_updated_key_and_none_of_a_deleted_one(
    spark, tmp_path, monkeypatch
):
    spec = write_spec(
        tmp_path, _target("upsert", 2, table_type="MERGE_ON_READ", compaction=NEVER_REWRITE)
    )
    ids = [str(i) for i in range(40)]
    _run(spark, tmp_path, spec, _rows(ids, None, 1))
    _run(spark, tmp_path, spec, _rows(["3"], ["ams"], 2))  # its partition in the first batch
    delete = _target("delete", 2, table_type="MERGE_ON_READ", compaction=NEVER_REWRITE)
    delete.pop("precombine_field")
    _run(spark, tmp_path, write_spec(tmp_path, delete, name="del"), _rows(["4"], ["sf"], 3))
    table = tmp_path / "table"
    assert any(f.deletion_vector for f in open_table(str(table)).files())

    keys = ["3", "4", "5"]
    found = lookup_keys(str(table), keys)
    assert found.missing == ("4",)
    three = found.rows.to_pandas().query("_record_key == '3'")
    assert list(three["v"]) == ["v2-3"]  # only the new row: the old one is deleted by a DV
    pd.testing.assert_frame_equal(_sorted(found.rows.to_pandas()), _expected(table, keys))
    assert found.files_opened == _files_holding(table, keys, _one, lambda _: 2)

    # the same table on an object store: the same rows from the same files, its deletion
    # vectors read from the store too
    with _copied_to_s3(table, monkeypatch) as uri:
        remote = lookup_keys(uri, keys)
    assert remote.rows.equals(found.rows) and remote.opened == found.opened


def test_a_partition_expanded_alone_is_looked_up_with_its_own_count(spark, tmp_path):
    spec = write_spec(tmp_path, _target("upsert", 4))
    ids = [str(i) for i in range(120)]
    _run(spark, tmp_path, spec, _rows(ids, None, 1))
    table = tmp_path / "table"
    before = DeltaTable(str(table)).version()
    expand_table(load_spec(spec), ExpansionRequest(16, partitions=["sf"]), spark=spark)
    counts = {"ams": 4, "sf": 16}

    found = lookup_keys(str(table), [*ids, "nope"])
    assert found.missing == ("nope",) and found.rows.num_rows == 120
    pd.testing.assert_frame_equal(_sorted(found.rows.to_pandas()), _expected(table, ids))
    for key in ("7", "8", "119"):
        one = lookup_keys(str(table), [key])
        assert one.files_opened == _files_holding(table, [key], _one, counts.__getitem__)
        assert set(one.opened.values()) == {1}  # one file per bucket: one per partition
    # as of the version before the expansion: its layout, 4 buckets everywhere
    old = read_keys(str(table), ["8", "9"], as_of=str(before))
    assert old.column("_bucket").to_pylist() == [bucket_of(("8",), 4), bucket_of(("9",), 4)]


USER_KEYS = """
from pyspark.sql import functions as F
from runner.keygen import KeyColumns, KeyGenerator

class UpperKeys(KeyGenerator):
    def columns(self, schema):
        key = F.upper(F.col(self.spec.record_key[0]).cast("string"))
        path = F.col(self.spec.partition_fields[0])
        return KeyColumns(key, path, F.lit(None).cast("string"))
"""


def test_a_user_key_generator_class_is_pruned_by_key_ranges_only(spark, tmp_path):
    module = f"user_keys_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(USER_KEYS))
    target = _target("upsert", 4, key_generator={"class": f"{module}:UpperKeys"})
    target["key_generator"]["partition_fields"] = "city"
    spec = write_spec(tmp_path, target)
    ids = [f"a{i}" for i in range(40)]
    _run(spark, tmp_path, spec, _rows(ids, None, 1))
    table = tmp_path / "table"

    found = lookup_keys(str(table), ["A7", "A8", "a7"])
    assert found.pruning != BY_BUCKET and "key generator class" in found.pruning
    assert found.missing == ("a7",)
    pd.testing.assert_frame_equal(_sorted(found.rows.to_pandas()), _expected(table, ["A7", "A8"]))


KEY_GENERATORS = {
    "simple": ({"type": "SIMPLE", "partition_fields": "region"}, "id", ()),
    "simple timestamp key": ({"type": "SIMPLE", "partition_fields": "region"}, "at", ()),
    "complex": ({"type": "COMPLEX", "partition_fields": "region"}, ["id", "name"], ()),
    "complex hashed on one": (
        {"type": "COMPLEX", "partition_fields": "region"},
        ["id", "name"],
        ("name",),
    ),
    "complex one field": ({"type": "COMPLEX", "partition_fields": "region"}, "id", ()),
    "complex value only": (
        {"type": "COMPLEX", "partition_fields": "region", "complex_encoding": "VALUE_ONLY"},
        "id",
        (),
    ),
    "custom": ({"type": "CUSTOM", "partition_fields": "region:SIMPLE"}, ["name", "id"], ()),
    "non partitioned": ({"type": "NON_PARTITIONED"}, "id", ()),
    "global delete": ({"type": "GLOBAL_DELETE"}, "id", ()),
}


@pytest.mark.parametrize("case", list(KEY_GENERATORS))
def test_the_bucket_read_from_a_key_is_the_one_spark_computed(spark, tmp_path, case):
    key_generator, record_key, hash_fields = KEY_GENERATORS[case]
    target = keys_target(tmp_path, key_generator, record_key)
    if hash_fields:
        target = dataclasses.replace(
            target, index=dataclasses.replace(target.index, hash_fields=hash_fields)
        )
    names = ["x", None, "", "a,b", "é:ü", "name:1", "__x__"] * 3
    records = [
        {"id": i * 7919 - 50, "name": n, "region": "eu", "at": f"2026-01-0{i % 9 + 1}T10:00:00"}
        for i, n in enumerate(names)
    ]
    lines = tmp_path / "r.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in records))
    schema = "id long, name string, region string, at timestamp"
    keyed = [r for r in preview_keys(spark, target, lines, schema) if "error" not in r]
    assert len(keyed) == len(records)
    hasher = key_hasher(table_settings(target))
    assert isinstance(hasher, KeyHasher), hasher
    for r in keyed:
        hashed = hasher.hash_of(r["record_key"])
        assert hashed is not None and hashed % 8 == r["bucket"], r


def test_the_timestamp_generator_keys_hash_like_spark(spark, tmp_path):
    target, _ = target_from_properties(
        {
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.partitionpath.field": "ts",
            "hoodie.datasource.write.keygenerator.type": "TIMESTAMP",
            "hoodie.keygen.timebased.timestamp.type": "EPOCHMILLISECONDS",
            "hoodie.keygen.timebased.output.dateformat": "yyyy-MM-dd",
        },
        8,
    )
    lines = tmp_path / "r.jsonl"
    lines.write_text(
        "".join(json.dumps({"id": f"t{i}", "ts": i * 10**8}) + "\n" for i in range(20))
    )
    hasher = key_hasher(table_settings(target))
    assert isinstance(hasher, KeyHasher), hasher
    for r in preview_keys(spark, target, lines, "id string, ts long"):
        assert hasher.hash_of(r["record_key"]) % 8 == r["bucket"], r
