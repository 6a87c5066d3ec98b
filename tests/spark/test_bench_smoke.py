"""The benchmark scenarios at the smallest size: they run and their result checks pass.

No timing is asserted here; figures come from `python -m bench` (docs/performance.md).
"""

from __future__ import annotations

from bench.expand import run_expand_benchmarks
from bench.merge_on_read import run_mor_benchmarks
from bench.write import run_write_benchmarks


def test_benchmark_scenarios_run_and_check_their_results(spark, tmp_path):
    results = run_write_benchmarks(
        spark, tmp_path / "w", rows=800, repeats=1, buckets=2, fractions=(0.1,)
    )
    results += run_expand_benchmarks(spark, tmp_path / "e", rows=800, repeats=1, buckets=2)
    assert len(results) == 4
    for r in results:
        assert r["runner_s"] > 0 and all(s > 0 for s in r["peers"].values()), r
    one_partition = results[2]
    assert "in one partition" in one_partition["scenario"]
    # the runner rewrites only the buckets of the one partition; a full rewrite everything
    assert (
        one_partition["touched"]["runner buckets"]
        <= 2
        < one_partition["touched"]["runner files in the table before"]
    )
    replaced = one_partition["bytes_replaced"]
    assert 0 < replaced["runner"] < replaced["naive spark rewrite"]


def test_merge_on_read_scenarios_run_and_check_their_results(spark, tmp_path):
    upsert, read, compact = run_mor_benchmarks(
        spark, tmp_path, rows=800, repeats=1, buckets=2, keys=20, warmup=False, upserts=3
    )
    for r in (upsert, read, compact):
        assert r["runner_s"] > 0 and all(s > 0 for s in r["peers"].values()), r
    # the merge-on-read upsert writes the batch's rows and deletion vectors, not the buckets
    written = upsert["bytes_written"]
    assert 0 < written["runner MERGE_ON_READ"] < written["runner COPY_ON_WRITE"]
    assert upsert["touched"]["runner MOR buckets given deletion vectors + a delta file"] > 0
    assert read["touched"]["files with deletion vectors"] > 0
    assert compact["bytes_written"]["runner compact"] > 0
