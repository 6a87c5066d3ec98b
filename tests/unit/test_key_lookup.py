"""Key lookups without Spark: a record key read back into its hash fields, and a table whose
buckets hold several file groups of disjoint key ranges, written here with pyarrow, where a
lookup opens one file per partition and reads one row group of it."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from runner.commands.key_bucket import KeyHasher, key_hasher
from runner.commands.key_lookup import BY_BUCKET, lookup_keys
from runner.delta.log_entry import NewFile
from runner.delta.snapshot import open_table
from runner.delta.table_config import table_settings
from runner.delta.table_setup import TableFeaturesWanted, create_table
from runner.delta.transaction import Commit, commit
from runner.index.naming import data_file_path, new_file_id, new_instant
from runner.pipeline.commit_stage import RunRule
from runner.storage.location import locate
from runner.storage.meta_columns import META_FIELDS
from runner.storage.parquet_file import BucketFile
from tests.cli_in_process import run_cli
from tests.helpers import keys_target
from tests.reference import bucket_of, spark_hash

TWO = KeyHasher(("id", "name"), ("id", "name"), composite=True)


@pytest.mark.parametrize(
    ("key", "values"),
    [
        ("id:1,name:x", ("1", "x")),
        ("id:1,name:a,b", ("1", "a,b")),  # a comma alone is no separator
        ("id:1,name:name:2", ("1", "name:2")),
        ("id:-1,name:__null__", ("-1", None)),
        ("id:1,name:__empty__", ("1", "")),
        ("id:1", None),  # no key of this table has one field only
        ("name:x,id:1", None),  # nor the fields in another order
        ("id:,name:x", None),  # an empty value is written __empty__
        ("1", None),
    ],
)
def test_a_composite_key_is_read_back_into_its_field_values(key, values):
    assert TWO.field_values(key) == values


def test_the_hash_is_sparks_over_the_hash_fields_only():
    assert TWO.hash_of("id:7,name:x") == spark_hash("7", "x")
    assert TWO.hash_of("id:7,name:__null__") == spark_hash("7", None)
    on_name = KeyHasher(("id", "name"), ("name",), composite=True)
    assert on_name.hash_of("id:7,name:x") == spark_hash("x")
    simple = KeyHasher(("id",), ("id",), composite=False)
    assert simple.hash_of("a,b:c") == spark_hash("a,b:c") and simple.hash_of("") is None


@pytest.mark.parametrize(
    ("key_generator", "record_key", "composite"),
    [
        ({"type": "SIMPLE", "partition_fields": "p"}, "id", False),
        ({"type": "COMPLEX", "partition_fields": "p"}, "id", True),
        ({"type": "COMPLEX", "partition_fields": "p", "complex_encoding": "VALUE_ONLY"},
         "id", False),
        ({"type": "CUSTOM", "partition_fields": "p:SIMPLE"}, "id", False),
        ({"type": "CUSTOM", "partition_fields": "p:SIMPLE"}, ["id", "p"], True),
        ({"type": "NON_PARTITIONED"}, "id", False),
        ({"type": "GLOBAL_DELETE"}, "id", True),
    ],
)  # fmt: skip
def test_each_generators_keys_are_read_in_their_form(
    tmp_path, key_generator, record_key, composite
):
    hasher = key_hasher(table_settings(keys_target(tmp_path, key_generator, record_key)))
    assert isinstance(hasher, KeyHasher) and hasher.composite == composite


def test_a_table_whose_key_form_is_unknown_has_no_hasher(tmp_path):
    settings = table_settings(keys_target(tmp_path, {"partition_fields": "p"}, "id"))
    assert "key generator class my.keys:Gen" in str(
        key_hasher({**settings, "runner.keygen.class": "my.keys:Gen"})
    )
    assert "hash function" in str(key_hasher({**settings, "runner.index.hash.function": "x"}))
    complex_one = table_settings(
        keys_target(tmp_path, {"type": "COMPLEX", "partition_fields": "p"}, "id")
    )
    del complex_one["runner.keygen.complex.encoding"]  # a table from before it was stored
    assert "encoding is not stored" in str(key_hasher(complex_one))


SCHEMA = pa.schema([*META_FIELDS, ("id", pa.string()), ("v", pa.string())])
KEYS = [f"k{i:04d}" for i in range(400)]
GROUPS, ROW_GROUPS = 5, 4  # file groups per bucket, row groups per file


def _file(root: str, partition: str, bucket: int, keys: list[str], drop_key_stats=False):
    """One sorted file of a bucket, ROW_GROUPS row groups, with its Delta statistics."""
    path = data_file_path(partition, new_file_id(bucket), "0-0-0", new_instant())
    out = BucketFile(pafs.LocalFileSystem(), f"{root}/{path}", SCHEMA, key_filter=True)
    step = -(-len(keys) // ROW_GROUPS)
    for start in range(0, len(keys), step):
        part = keys[start : start + step]
        out.write(
            pa.table(
                {
                    "_commit_time": ["20260101000000000"] * len(part),
                    "_commit_seqno": [f"20260101000000000_0_{k}" for k in part],
                    "_record_key": part,
                    "_partition_path": [partition] * len(part),
                    "_bucket": pa.array([bucket] * len(part), pa.int32()),
                    "id": part,
                    "v": [f"{partition}-{k}" for k in part],
                },
                schema=SCHEMA,
            )
        )
        out.flush()  # a row group per slice
    assert out.close()
    stats = json.loads(out.stats.to_json())
    if drop_key_stats:
        del stats["minValues"]["_record_key"], stats["maxValues"]["_record_key"]
    return NewFile(path, out.size, json.dumps(stats))


@pytest.fixture
def grouped(tmp_path):
    """2 partitions x 2 buckets x GROUPS files of disjoint key ranges; in p=b, one more
    file of the first key's bucket without _record_key statistics (keys z...)."""
    location = locate(str(tmp_path / "t"))
    settings = table_settings(keys_target(tmp_path, {"partition_fields": "p"}, "id"))
    settings["runner.index.buckets"] = "2"
    create_table(location, "t", SCHEMA, settings, TableFeaturesWanted())
    _, root = location.filesystem()
    files = []
    for partition in ("p=a", "p=b"):
        for bucket in (0, 1):
            mine = [k for k in KEYS if bucket_of((k,), 2) == bucket]
            size = -(-len(mine) // GROUPS)
            files += [
                _file(root, partition, bucket, mine[i : i + size])
                for i in range(0, len(mine), size)
            ]
    first = bucket_of((KEYS[0],), 2)
    unbounded = [k for k in (f"z{i}" for i in range(50)) if bucket_of((k,), 2) == first]
    files.append(_file(root, "p=b", first, unbounded, drop_key_stats=True))
    snapshot = open_table(location)
    assert snapshot is not None
    change = Commit(writer="run", operation="WRITE", metadata={}, added=tuple(files))
    commit(snapshot, change, RunRule())
    return location.uri


def test_a_key_opens_one_file_per_partition_and_reads_one_row_group(grouped):
    assert len(open_table(grouped).files()) == 2 * 2 * GROUPS + 1
    found = lookup_keys(grouped, [KEYS[0]])
    assert found.pruning == BY_BUCKET and found.missing == ()
    assert found.rows.column("v").to_pylist() == [f"p=a-{KEYS[0]}", f"p=b-{KEYS[0]}"]
    # p=b also opens the file without key statistics: it could hold any key; its row
    # groups' own statistics then keep it from being read
    assert found.opened == {"p=a": 1, "p=b": 2}
    assert found.row_groups_read == 2
    assert "from 3 of 21 file(s) opened (at most 2 per partition, in 2 partition(s))" in (
        found.describe(grouped)
    )


def test_a_key_inside_a_files_range_but_not_in_it_reads_no_row_group(grouped):
    # between two stored keys of one bucket, inside one row group's range: the statistics
    # open the file and would read that row group; the file's key filter rules it out
    first = bucket_of((KEYS[0],), 2)
    mine = [k for k in KEYS if bucket_of((k,), 2) == first]
    absent = next(f"{k}a" for k in mine[1:-1] if bucket_of((f"{k}a",), 2) == first)
    found = lookup_keys(grouped, [absent])
    assert found.missing == (absent,) and found.opened["p=a"] == 1
    assert found.row_groups_read == 0


def test_many_keys_return_their_rows_in_the_order_asked(grouped):
    keys = [KEYS[399], "nope", KEYS[7], KEYS[200]]
    found = lookup_keys(grouped, keys)
    assert found.missing == ("nope",)
    got = [(r["_record_key"], r["v"]) for r in found.rows.to_pylist()]
    expected = [(k, f"{p}-{k}") for k in (KEYS[399], KEYS[7], KEYS[200]) for p in ("p=a", "p=b")]
    assert got == expected
    # at most one file per key in each partition, and p=b's file without key statistics
    assert found.opened["p=a"] <= 3 and found.opened["p=b"] <= 4


def test_no_key_and_no_table_are_refused(tmp_path, grouped):
    from runner.errors import UserError

    with pytest.raises(UserError, match="no key to look up"):
        lookup_keys(grouped, [])
    with pytest.raises(UserError, match="no Delta table at"):
        lookup_keys(str(tmp_path / "none"), ["x"])


def test_a_key_not_in_the_tables_key_form_is_shown_that_form(tmp_path):
    """`runner read --key 1` where keys are `order_id:1,customer_id:7` (COMPLEX)."""
    location = locate(str(tmp_path / "orders"))
    target = keys_target(tmp_path, {"type": "COMPLEX"}, ["order_id", "customer_id"])
    create_table(location, "t", SCHEMA, table_settings(target), TableFeaturesWanted())

    done = run_cli("read", location.uri, "--key", "1", "--key", "order_id:2,customer_id:3")

    assert done.returncode == 0 and done.stdout == ""
    assert done.stderr.splitlines()[0] == (
        '0 of 2 key(s) found; not found: "1", "order_id:2,customer_id:3" (a key of this table '
        "is order_id:VALUE,customer_id:VALUE, e.g. order_id:1,customer_id:...)"
    )
