"""`runner run DIR`: a directory of specs as one run, in one process and one Spark application.

The directory holds independent specs, a chain bronze -> silver -> gold whose file names
sort the other way, two specs over one input that differ only in their session's time
zone (a spark.sql setting of one spec must not reach the next), a spec that fails at run
time (its transform reads a view only another spec's session has) and one that reads its
table, and a YAML file that is no spec. Then the application is killed with SIGKILL just
after the first commit of a second run, and run again: each table holds its rows once.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
from deltalake import DeltaTable

from tests.kill import RUNNER, kill_at

SCHEMA = "id long, country string, ts long, v string"
UPSERT = {
    "operation": "upsert",
    "record_key": "id",
    "precombine_field": "ts",
    "key_generator": {"partition_fields": "country"},
    "index": {"buckets": 2},
}
ORDER = [
    "bronze",
    "cities",
    "fares_ny",
    "fares_utc",
    "orders",
    "order_totals",
    "silver",
    "gold",
]


def _files(name: str, fmt: str = "json", **extra) -> dict:
    source = {"name": name, "format": fmt, "path": f"../inbox/{name}", "schema": SCHEMA}
    return {**source, "incremental": "new_files", **extra}


def _delta(name: str) -> dict:
    path = f"../tables/{name}"
    return {
        "name": name,
        "format": "delta",
        "path": path,
        "incremental": {"since": "last", "deletes": "ignore"},
    }


SPECS = {
    "c_bronze": ("bronze", [_files("raw_events")], None, {}),
    "b_silver": (
        "silver",
        [_delta("bronze")],
        "SELECT id, country, ts, upper(v) AS v FROM bronze",
        {},
    ),
    "a_gold": ("gold", [_delta("silver")], "SELECT id, country, ts, v || '!' AS v FROM silver", {}),
    "cities": ("cities", [_files("cities", "csv", options={"header": "true"})], None, {}),
    "fares_ny": (
        "fares_ny",
        [_files("fares")],
        "SELECT id, country, ts, string(hour(timestamp_seconds(ts))) AS v FROM fares",
        {"spark.sql.session.timeZone": "America/New_York"},
    ),
    "fares_utc": (
        "fares_utc",
        [_files("fares")],
        "SELECT id, country, ts, string(hour(timestamp_seconds(ts))) AS v FROM fares",
        {},
    ),
    # raw_events is bronze's source: a view of bronze's session only
    "orders": ("orders", [_files("orders")], "SELECT * FROM raw_events", {}),
    "order_totals": ("order_totals", [_delta("orders")], None, {}),
}


def _write_specs(work: Path) -> Path:
    specs = work / "specs"
    specs.mkdir()
    for file, (name, sources, sql, conf) in SPECS.items():
        spec = {"name": name, "sources": sources, "target": {"path": f"../tables/{name}", **UPSERT}}
        if sql:
            spec["transform"] = {"sql": sql}
        spec["spark"] = {"master": "local[2]", "conf": conf} if conf else {"master": "local[2]"}
        (specs / f"{file}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (specs / "defaults.yml").write_text("spark: {master: local[2]}\n")  # no target: no spec
    return specs


def _rows(ids: range, ts: int, tag: str) -> pd.DataFrame:
    ids = list(ids)
    return pd.DataFrame(
        {
            "id": ids,
            "country": ["nl", "us"] * (len(ids) // 2) + ["nl"] * (len(ids) % 2),
            "ts": [ts] * len(ids),
            "v": [tag] * len(ids),
        }
    )


def _drop(work: Path, source: str, name: str, frame: pd.DataFrame) -> None:
    inbox = work / "inbox" / source
    inbox.mkdir(parents=True, exist_ok=True)
    if source == "cities":
        frame.to_csv(inbox / f"{name}.csv", index=False)
    else:
        frame.to_json(inbox / f"{name}.json", orient="records", lines=True)


def _table(work: Path, name: str) -> pd.DataFrame:
    frame = DeltaTable(str(work / "tables" / name)).to_pyarrow_table().to_pandas()
    return frame[["id", "country", "ts", "v"]].sort_values("id").reset_index(drop=True)


def _upserted(*frames: pd.DataFrame) -> pd.DataFrame:
    both = pd.concat(frames).sort_values("ts").drop_duplicates("id", keep="last")
    return both.sort_values("id").reset_index(drop=True)


def _check(work: Path, events: pd.DataFrame, cities: pd.DataFrame, fares: pd.DataFrame) -> None:
    def same(name: str, expected: pd.DataFrame) -> None:
        pd.testing.assert_frame_equal(_table(work, name), expected, check_dtype=False)

    same("bronze", events)
    same("silver", events.assign(v=events["v"].str.upper()))
    same("gold", events.assign(v=events["v"].str.upper() + "!"))
    same("cities", cities)
    utc = pd.to_datetime(fares["ts"], unit="s", utc=True)
    same("fares_utc", fares.assign(v=utc.dt.hour.astype(str)))
    same("fares_ny", fares.assign(v=utc.dt.tz_convert("America/New_York").dt.hour.astype(str)))
    assert not (work / "tables" / "orders" / "_delta_log").exists()


def _runner(work: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RUNNER, "--log-format", "json", "run", *args],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def _one_pipeline_per_run_id(stderr: str) -> None:
    """Every log event of a run carries that run's pipeline, none another's."""
    pipelines: dict[str, set[str]] = {}
    for line in stderr.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if "run_id" in event and "pipeline" in event:
                pipelines.setdefault(event["run_id"], set()).add(event["pipeline"])
    assert pipelines
    assert all(len(names) == 1 for names in pipelines.values()), pipelines


@pytest.mark.e2e
@pytest.mark.slow
def test_a_directory_of_specs_runs_as_one_in_order(tmp_path):
    _write_specs(tmp_path)
    events, cities, fares = _rows(range(6), 1, "a"), _rows(range(4), 1, "c"), _rows(range(5), 0, "")
    fares = fares.assign(ts=[3600 * h + 7 for h in (0, 3, 5, 13, 23)])
    _drop(tmp_path, "raw_events", "0", events)
    _drop(tmp_path, "cities", "0", cities)
    _drop(tmp_path, "fares", "0", fares)
    _drop(tmp_path, "orders", "0", _rows(range(3), 1, "o"))

    done = _runner(tmp_path, "specs")

    assert done.returncode == 1, done.stderr[-3000:]
    out = done.stdout.splitlines()
    assert out[0] == (
        f"8 spec(s), one after another: {', '.join(ORDER)}; "
        "1 YAML file(s) without a target: left out"
    )
    table = out[out.index(next(line for line in out if line.startswith("spec "))) :]
    assert [line.split()[0] for line in table[1:-1]] == ORDER
    outcomes = {line.split()[0]: line for line in table[1:-1]}
    assert "committed version 1" in outcomes["gold"] and " 6 " in outcomes["gold"]
    assert "failed: transform.sql in" in outcomes["orders"]
    assert "skipped: because orders failed" in outcomes["order_totals"]
    assert table[-1].startswith("8 spec(s): 6 committed, 1 failed, 1 skipped (")
    (failed,) = [line for line in done.stderr.splitlines() if ": failed: " in line]
    assert failed.startswith("specs/orders.yaml: failed: transform.sql in ")
    assert "[TABLE_OR_VIEW_NOT_FOUND] The table or view `raw_events` cannot be found" in failed
    _one_pipeline_per_run_id(done.stderr)
    _check(tmp_path, events, cities, fares)

    more_events, more_cities = _rows(range(4, 9), 2, "b"), _rows(range(2, 7), 2, "d")
    _drop(tmp_path, "raw_events", "1", more_events)
    _drop(tmp_path, "cities", "1", more_cities)
    # killed at bronze's commit: silver, gold and cities not run yet
    kill_at(tmp_path, "after_commit", "run", "specs", wait_s=300)
    again = _runner(tmp_path, "specs", "--exclude", "orders,order_totals")

    assert again.returncode == 0, again.stderr[-3000:]
    table = again.stdout.splitlines()[-8:]
    outcomes = {line.split()[0]: line for line in table[1:-1]}
    assert "nothing new" in outcomes["bronze"] and "nothing new" in outcomes["fares_ny"]
    assert "committed version 2" in outcomes["silver"] and " 5 " in outcomes["silver"]
    assert table[-1].startswith("6 spec(s): 3 committed, 3 nothing new (")
    _check(tmp_path, _upserted(events, more_events), _upserted(cities, more_cities), fares)
