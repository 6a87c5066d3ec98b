"""runner/spec/ddl.py reads the same top-level column names as Spark's DDL parser, the one a
source's `schema:` goes through (DataFrameReader.schema)."""

from __future__ import annotations

import pytest

from runner.spec.ddl import ddl_columns
from tests.unit.test_ddl import COLUMNS

pytestmark = pytest.mark.spark


def test_the_names_are_spark_s(spark, tmp_path):
    for ddl, _ in COLUMNS:
        frame = spark.read.schema(ddl).json(str(tmp_path))  # an empty directory
        assert ddl_columns(ddl) == tuple(frame.columns), ddl
