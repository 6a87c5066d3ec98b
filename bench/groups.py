"""File groups inside buckets: small upserts into a table whose buckets are too large.

    python -m bench --only groups [--rows 20000000] [--repeats 3] [--group-keys 100]
                                  [--group-bytes 1572864]

The table: --rows rows in 8 partitions (cities) of 2 buckets each, so 16 buckets of about
16 MiB at 20M rows: a table whose bucket count was chosen too small. It is loaded once per
table type with bulk_insert, then `runner compact` folds each copy two ways: with the
default `index.file_group_bytes` (128 MiB: one sorted group per bucket, as before groups)
and with --group-bytes (1.5 MiB by default: about 10 groups per bucket at 20M rows; a
copy-on-write upsert of keys that fall in one group per bucket writes about 1/groups of
the bytes).

Scenarios, each a whole `runner SPEC` process per timed run, from a fresh copy of its table
(copied untimed), medians over --repeats:
1. a copy-on-write upsert of K existing keys, one group per bucket beside groups: bytes
   written (the run summary's), wall and job seconds;
2. the same on merge-on-read tables: the bytes of the key columns (`_record_key`, `ts`)
   of the files whose groups the upsert had to read (every file of a touched group: the
   ones its keys' deletion vectors land in, and their group's other files), from the
   files' parquet footers.
K keys two ways: drawn at random over the table (they touch most groups), and K
consecutive ids (recent records corrected: they fall in few key ranges per bucket).
Every upsert is checked: the row count is unchanged and the keys hold their new values.
3. `runner read TABLE --key K` of one key of the grouped copy-on-write table, a whole
   process, beside a whole `python` process running Polars' `scan_delta` filtered on
   `_record_key == K`; the files opened as the lookup reports them; both rows checked.
4. a hot-bucket split, `runner expand SPEC --bucket P/B` of one bucket (one group per
   bucket table), beside `runner expand SPEC --partition P` (multiple_rehash, x2) of its
   whole partition: wall seconds, bytes of the files read (removed) and written (added),
   from the commit; the row count is checked after each.
5. the load itself, once (not --repeats: minutes at 20M rows): `runner SPEC` bulk_insert
   as by default (one unsorted file per bucket and task, no shuffle) beside
   `bulk_insert_sort: by_key` (shuffled by bucket, each bucket written sorted in groups of
   --group-bytes): wall and job seconds, files written, groups per bucket.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from bench.write import fresh_copy, make_rows, runner_process, spec_file, write_source
from runner.actions.compact import compact_table
from runner.delta.snapshot import DataFile, open_table
from runner.pipeline.run import run_pipeline

BUCKETS = 2
GROUP_BYTES = 3 * 2**19  # 1.5 MiB: about 10 groups per bucket at 20M rows
KEY_COLUMNS = ("_record_key", "ts")


@dataclass(frozen=True)
class Tables:
    """The base tables of one table type: one group per bucket, and groups."""

    table_type: str
    one_group: Path
    groups: Path


def run_groups_benchmarks(
    spark,
    work: Path,
    rows: int,
    repeats: int,
    keys: int = 100,
    group_bytes: int = GROUP_BYTES,
) -> list[dict]:
    work.mkdir(parents=True, exist_ok=True)
    write_source(work / "source", rows, seed=36)
    rng = np.random.default_rng(36)
    key_sets = {
        "random": sorted(rng.choice(rows, size=keys, replace=False).tolist()),
        "consecutive": list(range(rows // 2, rows // 2 + keys)),
    }
    results = []
    for table_type in ("COPY_ON_WRITE", "MERGE_ON_READ"):
        tables = _base_tables(spark, work, table_type, group_bytes)
        for how, ids in key_sets.items():
            runs = {
                name: _upserts(work, (table, table_type), ids, size, rows, repeats)
                for name, table, size in (
                    ("one group per bucket", tables.one_group, None),
                    (f"groups of {group_bytes / 2**20:g} MiB", tables.groups, group_bytes),
                )
            }
            results.append(_result(table_type, how, keys, rows, runs))
        if table_type == "COPY_ON_WRITE":
            results.append(_key_lookup(tables.groups, rows, repeats))
            results.append(_hot_split(work, tables.one_group, rows, repeats))
    results.append(_loads(work, group_bytes))
    return results


def _loads(work: Path, group_bytes: int) -> dict:
    """bulk_insert of the source two ways, a whole process each, once."""
    runs = {}
    for sort in ("none", "by_key"):
        table = work / f"load-{sort}"
        shutil.rmtree(table, ignore_errors=True)
        index = {"buckets": BUCKETS, "file_group_bytes": group_bytes}
        target = {"index": index, "bulk_insert_sort": sort}
        spec_file(work / f"load-{sort}", "bulk_insert", work / "source", table, BUCKETS, **target)
        run = _runner(work, f"load-{sort}")
        groups = _by_bucket(open_table(str(table)).files())
        run["groups_per_bucket"] = sum(map(len, groups.values())) / len(groups)
        runs[sort] = run
    by_key, none = runs["by_key"], runs["none"]
    return {
        "scenario": (
            f"bulk_insert_sort: by_key, {by_key['summary']['files_added']} files, "
            f"{by_key['groups_per_bucket']:.1f} groups per bucket; job "
            f"{by_key['job_seconds']:.1f} s (once, whole process)"
        ),
        "runner_s": by_key["seconds"],
        "peers": {
            f"bulk_insert (sort none), {none['summary']['files_added']} files, job "
            f"{none['job_seconds']:.1f} s": none["seconds"]
        },
    }


def _base_tables(spark, work: Path, table_type: str, group_bytes: int) -> Tables:
    """The table loaded with bulk_insert, then two copies compacted: one sorted group per
    bucket (the default target) and groups of `group_bytes`."""
    loaded = work / f"{table_type}-loaded"
    spec = spec_file(
        work / "load", "bulk_insert", work / "source", loaded, BUCKETS, table_type=table_type
    )
    run_pipeline(spec, spark=spark)
    tables = Tables(table_type, work / f"{table_type}-one", work / f"{table_type}-groups")
    for table, size in ((tables.one_group, None), (tables.groups, group_bytes)):
        fresh_copy(loaded, table)
        index = {"buckets": BUCKETS, **({"file_group_bytes": size} if size else {})}
        compacting = spec_file(
            work / "compact",
            "upsert",
            work / "source",
            table,
            BUCKETS,
            table_type=table_type,
            index=index,
        )
        compact_table(compacting, spark=spark)
    return tables


def _upserts(
    work: Path,
    loaded: tuple[Path, str],
    ids: list[int],
    group_bytes: int | None,
    rows: int,
    repeats: int,
) -> list[dict]:
    """`repeats` whole-process upserts of `ids`, each from a fresh copy of the `loaded`
    table (its path and table type)."""
    base, table_type = loaded
    batch_dir = work / "batch"
    batch_dir.mkdir(exist_ok=True)
    batch = make_rows(0, seed=99, ids=ids, ts=2)
    pq.write_table(batch, batch_dir / "part-0.parquet")
    table = work / "upserted"
    index = {"buckets": BUCKETS, **({"file_group_bytes": group_bytes} if group_bytes else {})}
    spec_file(
        work / "upsert", "upsert", batch_dir, table, BUCKETS, table_type=table_type, index=index
    )
    runs = []
    groups = _by_bucket(open_table(str(base)).files())
    for _ in range(repeats):
        fresh_copy(base, table)
        before = {f.path: f for f in open_table(str(table)).files()}
        runs.append(_runner(work, "upsert"))
        runs[-1]["key_bytes_read"] = _key_bytes_read(table, before)
        runs[-1]["groups_per_bucket"] = sum(map(len, groups.values())) / len(groups)
    _check(table, batch, rows)
    return runs


def _runner(work: Path, spec_name: str) -> dict:
    """`runner SPEC --summary-json FILE`, a whole process: wall seconds and the summary."""
    seconds, summary = runner_process(work / f"{spec_name}.yaml", work / "summary.json")
    job = sum(s for stage, s in summary["stage_seconds"].items() if stage != "start")
    return {"seconds": seconds, "job_seconds": job, "summary": summary}


def _key_bytes_read(table: Path, before: dict[str, DataFile]) -> int:
    """The compressed bytes of KEY_COLUMNS in every file of the groups the upsert touched:
    those whose files were replaced or gained a deletion vector."""
    after = {f.path: f for f in open_table(str(table)).files()}
    touched = {
        (f.partition_path, f.bucket, f.file_id)
        for path, f in before.items()
        if path not in after or after[path].deletion_vector != f.deletion_vector
    }
    total = 0
    for f in before.values():
        if (f.partition_path, f.bucket, f.file_id) in touched:
            meta = pq.ParquetFile(table / f.path).metadata
            names = meta.schema.names
            for g in range(meta.num_row_groups):
                group = meta.row_group(g)
                for name in KEY_COLUMNS:
                    total += group.column(names.index(name)).total_compressed_size
    return total


def _check(table: Path, batch, rows: int) -> None:
    """The upsert kept every row and gave its keys their new values (read with Polars,
    deletion vectors honoured)."""
    frame = pl.read_delta(str(table), columns=["id", "amount"])
    assert frame.height == rows, f"{frame.height} rows after the upsert, not {rows}"
    got = frame.filter(pl.col("id").is_in(batch.column("id").to_pylist())).sort("id")
    ids, amounts = batch.column("id").to_pylist(), batch.column("amount").to_pylist()
    want = sorted(zip(ids, amounts, strict=True))
    assert list(zip(got["id"].to_list(), got["amount"].to_list(), strict=True)) == want


def _median(runs: list[dict], value: Callable[[dict], float]) -> float:
    return statistics.median(value(r) for r in runs)


def _result(table_type: str, how: str, keys: int, rows: int, runs: dict[str, list]) -> dict:
    """One result row: the groups' figures, with one group per bucket as the peer."""
    base_name, name = runs
    figures = {
        label: {
            "seconds": round(_median(r, lambda x: x["seconds"]), 2),
            "job_seconds": round(_median(r, lambda x: x["job_seconds"]), 2),
            "bytes_written": int(_median(r, lambda x: x["summary"]["bytes_written"])),
            "files_removed": int(_median(r, lambda x: x["summary"]["files_removed"])),
            "key_bytes_read": int(_median(r, lambda x: x["key_bytes_read"])),
            "groups_per_bucket": r[0]["groups_per_bucket"],
        }
        for label, r in runs.items()
    }
    return {
        "scenario": f"{table_type} upsert of {keys} {how} keys into {rows:,} rows ({name})",
        "runner_s": figures[name]["seconds"],
        "peers": {f"runner, {base_name}": figures[base_name]["seconds"]},
        "groups": figures,
    }


def render_groups(results: list[dict]) -> str:
    lines = [
        "| upsert | layout | groups per bucket | wall s | job s | bytes written | files removed "
        "| key bytes read |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        if "groups" not in result:
            continue
        for label, f in result["groups"].items():
            lines.append(
                f"| {result['scenario'].split(' (')[0]} | {label} | "
                f"{f['groups_per_bucket']:.1f} | {f['seconds']} | "
                f"{f['job_seconds']} | {f['bytes_written'] / 2**20:.2f} MiB | "
                f"{f['files_removed']} | {f['key_bytes_read'] / 2**20:.2f} MiB |"
            )
    return "\n".join(lines)


def _key_lookup(table: Path, rows: int, repeats: int) -> dict:
    """One key read back by `runner read --key` and by Polars, each a whole process."""
    key = str(rows // 3)
    runner = [sys.executable, "-m", "runner", "read", str(table), "--key", key]
    polars = [
        sys.executable,
        "-c",
        "import sys, polars as pl; print(pl.scan_delta(sys.argv[1])"
        ".filter(pl.col('_record_key') == sys.argv[2]).collect().height)",
        str(table),
        key,
    ]
    times: dict[str, list[float]] = {"runner": [], "polars": []}
    for _ in range(repeats):
        for name, command in (("runner", runner), ("polars", polars)):
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            times[name].append(time.perf_counter() - start)
            if name == "runner":
                assert json.loads(done.stdout)["id"] == rows // 3, done.stdout
                said = done.stderr.strip().splitlines()[-1]  # "... from 8 of 128 file(s) ..."
                opened = said[said.index("from ") :]
            else:
                assert done.stdout.strip() == "1", done.stdout
    return {
        "scenario": f"runner read --key of one key of {rows:,} rows, whole process ({opened})",
        "runner_s": statistics.median(times["runner"]),
        "peers": {"polars scan_delta + filter, whole process": statistics.median(times["polars"])},
    }


def _hot_split(work: Path, base: Path, rows: int, repeats: int) -> dict:
    """One bucket split alone beside its partition doubled, whole processes."""
    files = open_table(str(base)).files()
    partition = sorted({f.partition_path for f in files})[0]
    table = work / "split"
    spec_file(work / "split", "upsert", work / "source", table, BUCKETS)
    commands = {
        "split": ["expand", str(work / "split.yaml"), "--bucket", f"{partition}/0"],
        "partition": ["expand", str(work / "split.yaml"), "--partition", partition],
    }
    figures: dict[str, list[tuple[float, int, int]]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, args in commands.items():
            fresh_copy(base, table)
            before = {f.path: f.size for f in open_table(str(table)).files()}
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "runner", *args], check=True, capture_output=True)
            seconds = time.perf_counter() - start
            after = {f.path: f.size for f in open_table(str(table)).files()}
            read = sum(size for path, size in before.items() if path not in after)
            written = sum(size for path, size in after.items() if path not in before)
            assert sum(f.live_records for f in open_table(str(table)).files()) == rows
            figures[name].append((seconds, read, written))
    med = {
        name: [statistics.median(run[i] for run in runs) for i in range(3)]
        for name, runs in figures.items()
    }
    mib = 2**20
    return {
        "scenario": (
            f"runner expand --bucket {partition}/0 (read {med['split'][1] / mib:.1f} MiB, "
            f"wrote {med['split'][2] / mib:.1f} MiB), whole process"
        ),
        "runner_s": med["split"][0],
        "peers": {
            f"runner expand --partition {partition} (read {med['partition'][1] / mib:.1f} MiB, "
            f"wrote {med['partition'][2] / mib:.1f} MiB)": med["partition"][0]
        },
    }


def _by_bucket(files: list[DataFile]) -> dict:
    """Each bucket's file group ids."""
    groups: dict = defaultdict(set)
    for f in files:
        groups[(f.partition_path, f.bucket)].add(f.file_id)
    return groups
