"""The top-level column names of a Spark DDL schema, read without Spark (runner/spec/ddl.py).
tests/spark/test_ddl.py holds them against Spark's own parser."""

from __future__ import annotations

import pytest

from runner.spec.ddl import ddl_columns

# DDL strings with the names Spark gives their columns; the Spark test checks them.
COLUMNS = [
    ("trip_id long, city string", ("trip_id", "city")),
    (
        "trip_id long, loc struct<lat:double,lon:double>, amt decimal(10,2), ts timestamp",
        ("trip_id", "loc", "amt", "ts"),
    ),
    ("`odd, name` string, `a``b` int, plain int", ("odd, name", "a`b", "plain")),
    (
        "a int COMMENT 'x, (y> `z', b map<string,array<struct<c:int,d:string>>>",
        ("a", "b"),
    ),
    ("A INT NOT NULL,\n  b STRING,\tc_2 array<int>", ("A", "b", "c_2")),
    ("x struct<`p, q`: int, r: map<string, decimal(5, 1)>>, y string", ("x", "y")),
    ("  id long  ", ("id",)),
]


@pytest.mark.parametrize(("ddl", "names"), COLUMNS)
def test_top_level_names(ddl, names):
    assert ddl_columns(ddl) == names


@pytest.mark.parametrize(
    "ddl",
    [
        "",  # no column
        "id",  # no type
        "id long,",  # an empty column
        "a struct<b:int",  # unbalanced
        "a int)",
        "`a int",  # an unclosed name
        "a string COMMENT 'open",  # an unclosed string
        "struct<a:int>",  # a type, not columns
        "café string",  # a name this reader does not know how Spark reads
    ],
)
def test_text_it_cannot_split_turns_the_check_off(ddl):
    assert ddl_columns(ddl) is None
