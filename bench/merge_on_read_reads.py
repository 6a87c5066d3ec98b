"""Scenarios 2 and 3 of the merge-on-read bench (bench/merge_on_read.py): full reads of the
MERGE_ON_READ table after every upsert batch, unfolded and compacted, and that compaction
beside a pyarrow read-and-rewrite of the files it folds."""

from __future__ import annotations

import shutil
import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from bench.merge_on_read import Setup, job_seconds, scan_checksum
from bench.write import Checksum, checksum, dir_bytes, fresh_copy, parquet_dataset, spec_file
from runner.actions.compact import CompactSummary, compact_table, plan_compaction
from runner.delta.snapshot import open_table
from runner.pipeline.run import run_pipeline


@dataclass(frozen=True)
class _Unfolded:
    """The MERGE_ON_READ table after the successive upserts, and what they did to it."""

    path: Path
    upsert_jobs: list[float]
    rewritten: int  # bucket rewrites past the thresholds
    files: int
    with_dv: int
    deleted: int
    buckets: int

    @property
    def state(self) -> str:
        return (
            f"{self.files} files in {self.buckets} buckets, {self.with_dv} with deletion "
            f"vectors, {self.deleted:,} deleted rows"
        )


@dataclass(frozen=True)
class _Compacted:
    seconds: list[float]
    summary: CompactSummary  # the last run's
    summary_seconds: float  # CompactSummary.seconds, median
    copy_seconds: list[float]  # the pyarrow rewrite of the same files
    copy_files: int
    copy_bytes: int


def read_and_compact(setup: Setup, expected: Checksum) -> list[dict]:
    """Scenarios 2 and 3: reads of the table after every upsert batch, and its compaction."""
    unfolded = _unfold(setup)
    reads: dict[str, list] = {"unfolded": [], "compacted": []}
    t_unfolded = setup.timed(
        lambda: None, lambda: polars_checksum(unfolded.path), reads["unfolded"]
    )
    assert all(r == expected for r in reads["unfolded"]), (reads["unfolded"][-1], expected)
    compacted_path = setup.work / "mor_compacted"
    compacted = _compact(setup, unfolded, compacted_path, expected)
    t_compacted = setup.timed(
        lambda: None, lambda: polars_checksum(compacted_path), reads["compacted"]
    )
    assert all(r == expected for r in reads["compacted"]), (reads["compacted"][-1], expected)
    unfolded_s, compacted_s = statistics.median(t_unfolded), statistics.median(t_compacted)
    for path in (unfolded.path, compacted_path, setup.work / "mor_copy"):
        shutil.rmtree(path)
    return [
        _read_result(setup, unfolded, unfolded_s, compacted_s),
        _compact_result(setup, unfolded, compacted),
    ]


def polars_checksum(path: Path) -> Checksum:
    """A full Polars read of a Delta table (every column), then its checksum."""
    frame = pl.read_delta(str(path))
    cents = (frame["amount"] * 100).round().cast(pl.Int64).sum()
    return Checksum(frame.height, int(frame["id"].sum()), int(cents))


def _unfold(setup: Setup) -> _Unfolded:
    """2. The successive upserts (untimed here: scenario 1 times one)."""
    work = setup.work
    unfolded = work / "mor_unfolded"
    fresh_copy(setup.bases["mor"], unfolded)
    upsert_jobs, rewritten = [], 0
    for i, (batch_dir, _) in enumerate(setup.batches):
        spec = spec_file(
            work / f"mor_upsert_{i}",
            "upsert",
            batch_dir,
            unfolded,
            setup.scale.buckets,
            **setup.mor,
        )
        summary = run_pipeline(spec, spark=setup.spark)
        upsert_jobs.append(job_seconds(summary))
        rewritten += summary.buckets_rewritten
    files = open_table(str(unfolded)).files()
    return _Unfolded(
        unfolded,
        upsert_jobs,
        rewritten,
        files=len(files),
        with_dv=sum(1 for f in files if f.deletion_vector is not None),
        deleted=sum(f.deleted_records for f in files),
        buckets=len({(f.partition_path, f.bucket) for f in files}),
    )


def _compact(setup: Setup, unfolded: _Unfolded, compacted: Path, expected: Checksum) -> _Compacted:
    """3. Compaction of that table, from a fresh copy each time, beside a pyarrow rewrite."""
    work, batches = setup.work, setup.batches
    compact_spec = spec_file(
        work / "mor_compact", "upsert", batches[0][0], compacted, setup.scale.buckets, **setup.mor
    )
    summaries: list = []
    t_compact = setup.timed(
        lambda: fresh_copy(unfolded.path, compacted),
        lambda: compact_table(compact_spec, spark=setup.spark),
        summaries,
    )
    assert scan_checksum(compacted) == expected, "compact_table"
    after = open_table(str(compacted)).files()
    assert len(after) == unfolded.buckets and not any(f.deletion_vector for f in after)
    compact = summaries[-1]
    t_copy, copied, copy_bytes = _pyarrow_copy(setup, unfolded, compact)
    return _Compacted(
        t_compact,
        compact,
        statistics.median(s.seconds for s in summaries),
        t_copy,
        copied,
        copy_bytes,
    )


def _pyarrow_copy(
    setup: Setup, unfolded: _Unfolded, compact: CompactSummary
) -> tuple[list[float], int, int]:
    """The files compaction reads (those of every bucket with several files or deleted rows)
    read and written again with pyarrow, 2 threads like local[2]: seconds, files, bytes."""
    folded = [f for b in plan_compaction(open_table(str(unfolded.path))) for f in b.files]
    assert len(folded) == compact.files_read, (len(folded), compact.files_read)
    live = [str(unfolded.path / f.path) for f in folded]
    stored = checksum(ds.dataset(live, format="parquet"))  # deleted rows included
    copy_dir = setup.work / "mor_copy"

    def copy_files() -> None:
        def one(i_path: tuple[int, str]) -> None:
            i, path = i_path
            pq.write_table(pq.read_table(path), copy_dir / f"{i}.parquet", compression="zstd")

        with ThreadPoolExecutor(max_workers=2) as pool:  # the 2 task slots of local[2]
            list(pool.map(one, enumerate(live)))

    t_copy = setup.timed(
        lambda: (shutil.rmtree(copy_dir, ignore_errors=True), copy_dir.mkdir()), copy_files
    )
    assert checksum(parquet_dataset(copy_dir)) == stored, "pyarrow copy"
    return t_copy, len(live), dir_bytes(copy_dir)


def _read_result(setup: Setup, unfolded: _Unfolded, unfolded_s: float, compacted_s: float) -> dict:
    upserts, jobs = len(setup.batches), unfolded.upsert_jobs
    return {
        "scenario": f"MOR read: polars read_delta (all columns, count + 2 sums) after "
        f"{upserts} upserts of {setup.keys} keys ({unfolded.state})",
        "runner_s": unfolded_s,
        "peers": {"same read after compact_table (1 file per bucket)": compacted_s},
        "notes": [
            f"unfolded / compacted read time: {unfolded_s / compacted_s:.2f}x",
            f"the {upserts} upserts: job s median {statistics.median(jobs):.2f}, "
            f"max {max(jobs):.2f}; {unfolded.rewritten} bucket rewrites past the default "
            "thresholds",
        ],
        "touched": {
            "files": unfolded.files,
            "files with deletion vectors": unfolded.with_dv,
            "deleted rows": unfolded.deleted,
        },
    }


def _compact_result(setup: Setup, unfolded: _Unfolded, compacted: _Compacted) -> dict:
    compact = compacted.summary
    return {
        "scenario": f"MOR compact_table after {len(setup.batches)} upserts ({unfolded.state}): "
        f"{compact.buckets} buckets, {compact.files_read} files folded",
        "runner_s": statistics.median(compacted.seconds),
        "peers": {
            f"pyarrow read + write zstd of the same {compacted.copy_files} files (2 threads, "
            f"Arrow CPU pool {pa.cpu_count()})": statistics.median(compacted.copy_seconds)
        },
        "bytes_written": {
            "runner compact": compact.bytes_written,
            "pyarrow copy": compacted.copy_bytes,
        },
        "notes": [
            f"CompactSummary.seconds median {compacted.summary_seconds:.2f}; "
            f"{compact.rows:,} live rows kept, {compact.deleted_rows:,} deleted rows dropped; "
            f"the pyarrow copy keeps the deleted rows and does not sort",
        ],
    }
