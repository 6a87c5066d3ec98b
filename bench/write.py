"""Write-path benchmarks: the runner beside the peers a user would compare it with.

    python -m bench --only write [--rows 200000] [--repeats 3] [--buckets 16]

Scenarios, each checked (row count and checksums equal across systems) before it is timed:
- bulk_insert of R rows vs Spark's own `partitionBy(...).parquet(...)` of the same rows, and
  vs Spark writing what the runner writes: the same columns (its five meta columns
  computed with the runner's own key expressions), one directory per partition and bucket,
  zstd (Spark's own file names and path escaping; the checksum covers `id` and `amount`);
- upserts of batches (each --fractions of R) into an R-row table vs delta-rs
  `DeltaTable.merge` and vs a naive Spark rewrite (anti-join, union, overwrite), with the
  bytes each one rewrites.

Data is generated with numpy and pyarrow compute (seeded, no Python loop over rows) and
written CHUNK_ROWS rows per parquet file, so a 20,000,000-row source never sits in memory;
checksums stream the `id` and `amount` columns batch by batch.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import yaml
from deltalake import DeltaTable

from runner.spec import load_spec

CITIES = ["ams", "sf", "nyc", "sp", "tokyo", "lagos", "paris", "delhi"]
CHUNK_ROWS = 1_000_000  # rows generated and written at a time: one parquet file each
PEERS = {  # --skip-peer NAME -> the peer as reported
    "spark-parquet": "spark partitionBy().parquet",
    "spark-same-files": "spark, the runner's files",
    "delta-merge": "delta-rs merge",
    "naive-rewrite": "naive spark rewrite",
}


def make_rows(
    n: int, seed: int | tuple[int, ...], ids: Iterable[int] | None = None, ts: int = 1
) -> pa.Table:
    """Rows with ids 0..n-1 (or `ids`, then n is ignored), the same for the same seed."""
    id_array = np.arange(n, dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
    rng = np.random.default_rng(seed)
    amount = np.round(rng.uniform(0, 500, len(id_array)), 2)
    note = pc.cast(pa.array(rng.integers(0, 10**6, len(id_array))), pa.string())
    return pa.table(
        {
            "id": pa.array(id_array, pa.int64()),
            "city": pa.array(CITIES).take(pa.array(id_array % len(CITIES))),
            "ts": pa.array(np.full(len(id_array), ts, dtype=np.int64)),
            "amount": pa.array(amount, pa.float64()),
            "note": pc.binary_join_element_wise("note-", pc.utf8_lpad(note, 6, "0"), ""),
        }
    )


@dataclass(frozen=True)
class Checksum:
    """Row count, sum of ids and sum of amounts in cents: exact, whatever the row order."""

    rows: int = 0
    id_sum: int = 0
    cents: int = 0

    def __add__(self, other: Checksum) -> Checksum:
        return Checksum(
            self.rows + other.rows, self.id_sum + other.id_sum, self.cents + other.cents
        )

    def __sub__(self, other: Checksum) -> Checksum:
        return Checksum(
            self.rows - other.rows, self.id_sum - other.id_sum, self.cents - other.cents
        )


def checksum(data: pa.Table | ds.Dataset, where: pc.Expression | None = None) -> Checksum:
    """Of a table, or of a dataset read batch by batch (only `id` and `amount`)."""
    if isinstance(data, ds.Dataset):
        batches = data.to_batches(columns=["id", "amount"], filter=where)
    else:
        table = data.select(["id", "amount"])
        batches = (table.filter(where) if where is not None else table).to_batches()
    total = Checksum()
    for batch in batches:  # a loop over record batches, not rows
        cents = pc.cast(pc.round(pc.multiply(batch.column("amount"), 100)), pa.int64())
        total += Checksum(
            batch.num_rows,
            pc.sum(batch.column("id")).as_py() or 0,
            pc.sum(cents).as_py() or 0,
        )
    return total


def parquet_dataset(path: Path) -> ds.Dataset:
    return ds.dataset(str(path), format="parquet")


def delta_dataset(path: Path) -> ds.Dataset:
    return DeltaTable(str(path)).to_pyarrow_dataset()


def write_source(directory: Path, rows: int, seed: int, chunk_rows: int = CHUNK_ROWS) -> Checksum:
    """`rows` rows into `directory`, chunk_rows per parquet file; their checksum."""
    directory.mkdir(parents=True, exist_ok=True)
    total = Checksum()
    for i, start in enumerate(range(0, rows, chunk_rows)):
        chunk = make_rows(0, seed=(seed, i), ids=np.arange(start, min(start + chunk_rows, rows)))
        pq.write_table(chunk, directory / f"part-{i:05d}.parquet")
        total += checksum(chunk)
    return total


def spec_file(spec: Path, operation: str, source: Path, table: Path, buckets: int, **target):
    """A pipeline spec file `spec`.yaml named after `spec` (and its loaded spec); `target` adds
    target keys (table_type)."""
    spec_dict = {
        "name": spec.name,
        "sources": [{"name": "src", "format": "parquet", "path": str(source)}],
        "target": {
            "path": str(table),
            "operation": operation,
            "record_key": "id",
            "precombine_field": "ts",
            "key_generator": {"partition_fields": "city"},
            "index": {"buckets": buckets},
            **target,
        },
    }
    path = spec.parent / f"{spec.name}.yaml"
    path.write_text(yaml.safe_dump(spec_dict))
    return load_spec(path)


def timed(
    repeats: int,
    prepare: Callable[[], None],
    run: Callable[[], object],
    outputs: list | None = None,
    warmup: bool = True,
) -> list[float]:
    """Seconds of each of `repeats` runs, after one untimed warm-up run (JIT, caches) unless
    warmup is False; what each timed run returned goes to `outputs`."""
    if warmup:
        prepare()
        run()
    times = []
    for _ in range(repeats):
        prepare()
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
        if outputs is not None:
            outputs.append(result)
    return times


def stage_report(summaries: list) -> dict:
    """Each run's stage seconds (RunSummary.stage_seconds) and the median per stage."""
    runs = [dict(s.stage_seconds) for s in summaries]
    stages = list(dict.fromkeys(stage for run in runs for stage in run))
    median = {
        stage: round(statistics.median(run[stage] for run in runs if stage in run), 3)
        for stage in stages
    }
    return {"runner_stage_seconds": runs, "runner_stages_median": median}


def runner_process(spec: Path, summary_file: Path) -> tuple[float, dict]:
    """`runner SPEC --summary-json FILE` as a user runs it, a whole process: its wall seconds
    and its run summary (a failed run raises, with the end of its stderr)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "runner", str(spec), "--summary-json", str(summary_file)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"runner exited {done.returncode}:\n{error_text(done.stderr)}")
    return seconds, json.loads(summary_file.read_text())


def error_text(stderr: str, most: int = 4000) -> str:
    """The end of a failed process's stderr without Java's stack frames, which would
    otherwise fill it and hide the error above them."""
    lines = [
        line
        for line in stderr.splitlines()
        if not line.lstrip().startswith("at ") and not line.lstrip().startswith("... ")
    ]
    return "\n".join(lines)[-most:]


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*.parquet"))


def size_text(n: int) -> str:
    """Bytes as the bench's tables show them: MiB from 1 MiB on, else KiB."""
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def percent(fraction: float) -> str:
    return f"{fraction:.1%}" if fraction >= 0.001 else f"{fraction * 100:.2g}%"


def rewrite_files(files: list[Path], out: Path, threads: int = 2) -> None:
    """Read each file and write it again (zstd), `threads` at a time: a rewrite's floor."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()

    def rewrite(item: tuple[int, Path]) -> None:
        pq.write_table(pq.read_table(item[1]), out / f"{item[0]}.parquet", compression="zstd")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(rewrite, enumerate(files)))


def delta_rs_upsert(path: Path, batch: pa.Table) -> tuple[int, int]:
    """delta-rs MERGE of `batch` by (id, city): update matches, insert the rest. Returns
    the bytes of the files it added and of the live files it replaced."""
    table = DeltaTable(str(path))
    before = live_files(table)
    (
        table.merge(
            batch,
            predicate="t.id = s.id AND t.city = s.city",
            source_alias="s",
            target_alias="t",
        )
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    table.update_incremental()
    after = live_files(table)
    added = sum(s for p, s in after.items() if p not in before)
    return added, sum(s for p, s in before.items() if p not in after)


def live_files(table: DeltaTable) -> dict[str, int]:
    actions = pa.table(table.get_add_actions(flatten=True))
    return dict(zip(actions["path"].to_pylist(), actions["size_bytes"].to_pylist(), strict=True))


def fresh_copy(src: Path, dst: Path) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
