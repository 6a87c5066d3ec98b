"""The first uses a small run's JVM makes while Spark starts (runner/jvm/java_warmup.py): a
failure there is only logged at debug level, so a renamed Spark class or method would turn
the warm-up off without a word. This calls each of them on Spark's JVM."""

from __future__ import annotations

import pytest

from runner.jvm.java_warmup import _first_uses

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("row_sources", [False, True])
def test_every_first_use_is_a_call_spark_s_jvm_knows(spark, row_sources):
    _first_uses(spark.sparkContext._jvm, row_sources)  # a Py4JError fails the test
