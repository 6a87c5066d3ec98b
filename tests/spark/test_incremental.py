"""Incremental sources: new files once each, table-to-table chains, JDBC against a real
PostgreSQL; checkpoints committed with the data."""

from __future__ import annotations

import io
import os
import threading
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner
from deltalake import DeltaTable

from runner.actions.expand import ExpansionRequest, expand_table
from runner.cli import cli
from runner.commands.read import read_rows
from runner.errors import UserError
from runner.pipeline.context import RunOptions
from runner.pipeline.run import run_pipeline
from runner.sources.jdbc import plan_jdbc
from runner.sources.model import SourcePlan
from runner.sources.plan import read_source
from runner.spec import load_spec
from runner.spec.model import Incremental
from tests.helpers import read_table

UPSERT = {
    "operation": "upsert",
    "record_key": "id",
    "precombine_field": "ts",
    "key_generator": {"partition_fields": "country"},
    "index": {"buckets": 2},
}


def _spec(directory: Path, name: str, sources: list[dict], target: dict, **extra) -> Path:
    spec = {"name": name, "sources": sources, "target": target, **extra}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _drop(directory: Path, name: str, frame: pd.DataFrame, mtime: float | None = None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def _rows(ids, ts: int, country: str = "nl", tag: str = "") -> pd.DataFrame:
    ids = list(ids)
    return pd.DataFrame(
        {"id": ids, "country": [country] * len(ids), "ts": [ts] * len(ids), "v": [tag] * len(ids)}
    )


def _upsert(reference: pd.DataFrame | None, batch: pd.DataFrame) -> pd.DataFrame:
    both = batch if reference is None else pd.concat([reference, batch])
    both = both.sort_values("ts", kind="stable").drop_duplicates(["country", "id"], keep="last")
    return both.sort_values(["country", "id"]).reset_index(drop=True)


def _table(path: Path, columns=("id", "country", "ts", "v")) -> pd.DataFrame:
    frame = read_table(path)[list(columns)]
    return frame.sort_values(["country", "id"]).reset_index(drop=True)


def _commit_meta(path: Path) -> dict:
    return DeltaTable(str(path)).history(1)[0]["runner"]


def test_new_files_are_ingested_exactly_once(spark, tmp_path):
    inbox = tmp_path / "inbox"
    source = {"name": "events", "format": "parquet", "path": "inbox", "incremental": "new_files"}
    spec = load_spec(_spec(tmp_path, "files", [source], {"path": "table", **UPSERT}))
    now = time.time()
    _drop(inbox, "a.parquet", _rows(range(10), 1, tag="a"), now - 30)
    _drop(inbox / "_tmp", "half-written.parquet", _rows(range(99), 9), now - 30)  # hidden

    first = run_pipeline(spec, spark=spark)
    assert (first.rows_read, first.version) == (10, 1)
    assert first.sources["events"]["files"] == 1
    checkpoint = _commit_meta(tmp_path / "table")["checkpoint"]["events"]
    assert checkpoint["names"] == ["a.parquet"]

    idle = run_pipeline(spec, spark=spark)
    assert idle.nothing_new and idle.version is None
    assert "start" not in idle.stage_seconds  # decided from the listing: no Spark job
    assert DeltaTable(str(tmp_path / "table")).version() == 1

    # b keeps an older modification time than a's (moved in with `mv` or `cp -p`): it is
    # still new, as its change time says; a is not read again. c's name is a glob to Spark.
    moment = pd.Timestamp(time.time(), unit="s", tz="UTC").isoformat()
    time.sleep(0.05)
    _drop(inbox, "b.parquet", _rows(range(5, 15), 2, tag="b"), now - 60)
    _drop(inbox, "c[1].parquet", _rows(range(20, 25), 2, tag="c"), now - 10)
    second = run_pipeline(spec, spark=spark)
    assert (second.rows_read, second.version) == (15, 2)
    reference = _upsert(
        _upsert(None, _rows(range(10), 1, tag="a")),
        pd.concat([_rows(range(5, 15), 2, tag="b"), _rows(range(20, 25), 2, tag="c")]),
    )
    pd.testing.assert_frame_equal(_table(tmp_path / "table"), reference, check_dtype=False)

    # a reset reads everything again; an upsert of the same rows changes nothing but the
    # checkpoint, which is still committed (with its origin)
    reset = run_pipeline(spec, spark=spark, options=RunOptions(ignore_checkpoint=True))
    assert reset.rows_read == 25
    assert _commit_meta(tmp_path / "table")["checkpoint_origin"] == "reset"
    pd.testing.assert_frame_equal(_table(tmp_path / "table"), reference, check_dtype=False)

    # a chosen start: files changed after that time only (b and c)
    chosen = run_pipeline(spec, spark=spark, options=RunOptions(checkpoint=(moment,)))
    assert chosen.rows_read == 15 and chosen.sources["events"]["files"] == 2

    # renamed, the pipeline has no checkpoint in the table (they are under the old name):
    # it reads every file again, and says so
    renamed = load_spec(_spec(tmp_path, "files_v2", [source], {"path": "table", **UPSERT}))
    again = run_pipeline(renamed, spark=spark)
    assert again.rows_read == 25
    assert again.checkpoint_origin == (
        "none of this pipeline in this table, which holds rows already (checkpoints of "
        f"pipeline 'files' in version {chosen.version}): events every file"
    )
    assert f"  checkpoints  {again.checkpoint_origin}" in again.render()


def test_a_failed_run_does_not_move_the_checkpoint(spark, tmp_path, monkeypatch):
    inbox = tmp_path / "inbox"
    source = {"name": "events", "format": "parquet", "path": "inbox", "incremental": "new_files"}
    spec = load_spec(_spec(tmp_path, "files", [source], {"path": "table", **UPSERT}))
    _drop(inbox, "a.parquet", _rows(range(10), 1))
    run_pipeline(spec, spark=spark)
    _drop(inbox, "b.parquet", _rows(range(10, 20), 1))

    monkeypatch.setenv("RUNNER_FAULT", "before_commit")
    with pytest.raises(Exception, match="injected fault"):
        run_pipeline(spec, spark=spark)
    monkeypatch.delenv("RUNNER_FAULT")

    again = run_pipeline(spec, spark=spark)
    assert again.rows_read == 10 and again.inserted == 10
    assert len(read_table(tmp_path / "table")) == 20


def _chain(tmp_path: Path, inbox: str, table_a: str, buckets_b: int = 2, **downstream):
    """Specs of files -> table A (new_files) and table A -> table B ({since: last})."""
    upstream = load_spec(
        _spec(
            tmp_path,
            "up",
            [{"name": "raw", "format": "parquet", "path": inbox, "incremental": "new_files"}],
            {"path": table_a, **UPSERT},
        )
    )
    source = {
        "name": "a",
        "format": "delta",
        "path": table_a,
        "incremental": {"since": "last", "deletes": "ignore"},
    }
    target = {"path": "table_b", **UPSERT, "index": {"buckets": buckets_b}}
    return upstream, load_spec(_spec(tmp_path, "down", [source], target, **downstream))


def test_chained_tables_read_only_new_commits(spark, tmp_path):
    inbox = tmp_path / "inbox"
    upstream, downstream = _chain(
        tmp_path,
        "inbox",
        "table_a",
        buckets_b=3,
        transform={"sql": "SELECT id, country, ts, upper(v) AS v FROM a"},
    )
    now = time.time()
    batches = [
        pd.concat([_rows(range(20), 1, "nl", "x"), _rows(range(10), 1, "us", "x")]),
        pd.concat([_rows(range(15, 25), 2, "nl", "y")]),
        pd.concat([_rows(range(5), 3, "us", "z"), _rows(range(3), 3, "de", "z")]),
    ]
    reference = None
    for i, batch in enumerate(batches):
        _drop(inbox, f"{i}.parquet", batch, now - 100 + i)
        run_pipeline(upstream, spark=spark)
        done = run_pipeline(downstream, spark=spark)
        assert done.rows_read == len(batch), f"round {i}: only the new commit's rows"
        reference = _upsert(reference, batch.assign(v=batch["v"].str.upper()))
        pd.testing.assert_frame_equal(_table(tmp_path / "table_b"), reference, check_dtype=False)
        if i == 1:
            # moving rows between buckets is not news downstream
            expand_table(upstream, ExpansionRequest(4), spark=spark)
            assert run_pipeline(downstream, spark=spark).nothing_new
    last = run_pipeline(downstream, spark=spark)
    assert last.nothing_new


def test_a_delta_source_without_commit_times_is_refused_for_incremental(spark, tmp_path):
    from deltalake import write_deltalake

    write_deltalake(str(tmp_path / "plain"), pa.table({"id": ["a"], "ts": [1]}))
    write_deltalake(str(tmp_path / "plain"), pa.table({"id": ["b"], "ts": [2]}), mode="append")
    sources = [
        {
            "name": "p",
            "format": "delta",
            "path": "plain",
            "incremental": {"since": "last", "deletes": "ignore"},
        }
    ]
    target = {"path": "t", "operation": "insert", "record_key": "id", "index": {"buckets": 1}}
    spec = load_spec(_spec(tmp_path, "plain", sources, target))
    first = run_pipeline(spec, spark=spark)  # the first read is a full read
    assert first.rows_read == 2
    with pytest.raises(UserError, match="needs a runner table"):
        run_pipeline(spec, spark=spark)


def _jdbc_source(postgres, **jdbc) -> dict:
    return {
        "name": "orders",
        "format": "jdbc",
        "jdbc": {
            "url": postgres.url,
            "user": "${env:PGUSER_TEST}",
            "password": "${env:PGPASSWORD_TEST}",
            **jdbc,
        },
    }


def test_jdbc_full_incremental_and_partitioned_reads(spark, tmp_path, postgres, monkeypatch):
    monkeypatch.setenv("PGUSER_TEST", postgres.user)
    monkeypatch.setenv("PGPASSWORD_TEST", postgres.password)
    postgres.execute(
        """
        DROP TABLE IF EXISTS orders;
        CREATE TABLE orders (id text PRIMARY KEY, country text, ts bigint, v text,
                             updated_at timestamptz NOT NULL, n int);
        INSERT INTO orders
        SELECT 'o' || g, CASE WHEN g % 2 = 0 THEN 'nl' ELSE 'us' END, 1, 'first',
               timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second', g
        FROM generate_series(1, 40) g;
        """
    )
    target = {"path": "table", **UPSERT}
    transform = {"sql": "SELECT id, country, ts, v FROM orders"}
    full = load_spec(
        _spec(
            tmp_path, "full", [_jdbc_source(postgres, table="orders")], target, transform=transform
        )
    )
    assert run_pipeline(full, spark=spark).rows_read == 40

    source = {**_jdbc_source(postgres, table="orders"), "incremental": {"column": "updated_at"}}
    incremental = load_spec(_spec(tmp_path, "inc", [source], target, transform=transform))
    assert run_pipeline(incremental, spark=spark).rows_read == 40  # no checkpoint yet
    stored = _commit_meta(tmp_path / "table")["checkpoint"]["orders"]
    assert stored.startswith("2026-01-01 00:00:40")

    postgres.execute(
        """
        UPDATE orders SET v = 'second', ts = 2, updated_at = updated_at + interval '1 day'
        WHERE id IN ('o1', 'o2', 'o3');
        INSERT INTO orders
        VALUES ('o41', 'de', 2, 'second', timestamptz '2026-01-03 00:00:00+00', 41);
        """
    )
    delta = run_pipeline(incremental, spark=spark)
    assert (delta.rows_read, delta.updated, delta.inserted) == (4, 3, 1)
    assert run_pipeline(incremental, spark=spark).nothing_new
    expected = postgres.query("SELECT id, country, ts, v FROM orders ORDER BY country, id")
    got = _table(tmp_path / "table")
    assert [tuple(str(x) for x in row) for row in got.itertuples(index=False)] == expected

    # a partitioned read splits the query into ranges and reads every row once
    plan = SourcePlan(
        load_spec(
            _spec(
                tmp_path,
                "parts",
                [
                    _jdbc_source(
                        postgres,
                        query="SELECT * FROM orders",
                        partition_column="n",
                        num_partitions=3,
                    )
                ],
                target,
            )
        ).sources[0]
    )
    frame = read_source(spark, plan_jdbc(spark, plan))
    assert frame.rdd.getNumPartitions() == 3
    assert sorted(r.id for r in frame.collect()) == sorted(
        r[0] for r in postgres.query("SELECT id FROM orders")
    )
    assert Incremental("column", "updated_at") == incremental.sources[0].incremental


def test_runner_read_pulls_commits_since_an_instant_and_reads_as_of(spark, tmp_path):
    inbox = tmp_path / "inbox"
    source = {"name": "events", "format": "parquet", "path": "inbox", "incremental": "new_files"}
    spec = load_spec(_spec(tmp_path, "files", [source], {"path": "table", **UPSERT}))
    now = time.time()
    batches = [
        pd.concat([_rows(range(20), 1, "nl", "a"), _rows(range(20), 1, "us", "a")]),
        _rows(range(5), 2, "nl", "b"),  # touches the nl buckets only
        _rows(range(3), 3, "us", "c"),
    ]
    instants, states, reference = [], [], None
    for i, batch in enumerate(batches):
        _drop(inbox, f"{i}.parquet", batch, now - 100 + i)
        instants.append(run_pipeline(spec, spark=spark).instant)
        reference = _upsert(reference, batch)
        states.append(reference)

    table = str(tmp_path / "table")
    result = CliRunner().invoke(
        cli,
        [
            "read",
            table,
            "--since",
            instants[0],
            "--format",
            "csv",
            "--out",
            str(tmp_path / "pull.csv"),
        ],
    )
    assert result.exit_code == 0, result.output
    pulled = pd.read_csv(tmp_path / "pull.csv", dtype={"_commit_time": str})
    expected = pd.concat([batches[1], batches[2]]).sort_values(["country", "id"])
    assert sorted(zip(pulled["country"], pulled["id"], pulled["v"], strict=True)) == sorted(
        zip(expected["country"], expected["id"], expected["v"], strict=True)
    )
    assert set(pulled["_commit_time"]) == {instants[1], instants[2]}
    assert "8 row(s)" in result.stderr

    last = read_rows(table, since=instants[1])  # the nl files hold nothing newer: not opened
    assert last.rows.num_rows == 3 and last.files_total == 4 and last.files_read <= 2

    only_second = CliRunner().invoke(
        cli, ["read", table, "--since", instants[0], "--until", instants[1]]
    )
    assert only_second.exit_code == 0
    assert len(only_second.stdout.splitlines()) == 5

    as_of = CliRunner().invoke(cli, ["read", table, "--as-of", instants[0], "--format", "json"])
    rows = pd.read_json(io.StringIO(as_of.stdout), lines=True, dtype={"id": int})
    got = rows[["id", "country", "ts", "v"]].sort_values(["country", "id"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, states[0], check_dtype=False)

    # what `runner history --since` takes: a time ago, a UTC date or time
    every = len(states[2])
    for given, rows in [
        (["--since", "1d"], every),
        (["--since", "2999-01-01"], 0),
        (["--until", "1d"], 0),
        (["--until", "2999-01-01T00:00"], every),
    ]:
        pulled_then = CliRunner().invoke(cli, ["read", table, *given])
        assert pulled_then.exit_code == 0, pulled_then.output
        assert len(pulled_then.stdout.splitlines()) == rows, given

    bad = CliRunner().invoke(cli, ["read", table, "--since", "yesterday"])
    assert bad.exit_code != 0 and "is not an instant" in str(bad.exception)
    assert "a time ago (30m, 24h, 7d)" in str(bad.exception)


def _two_file_sources(tmp_path: Path):
    sources = [
        {"name": s, "format": "parquet", "path": f"inbox_{s}", "incremental": "new_files"}
        for s in ("a", "b")
    ]
    transform = {"sql": "SELECT * FROM a UNION ALL SELECT * FROM b"}
    target = {"path": "table", **UPSERT}
    return load_spec(_spec(tmp_path, "two", sources, target, transform=transform))


def test_a_chosen_checkpoint_moves_only_the_named_source_and_is_recorded(spark, tmp_path):
    spec = _two_file_sources(tmp_path)
    _drop(tmp_path / "inbox_a", "1.parquet", _rows(range(10), 1, "nl"))
    _drop(tmp_path / "inbox_b", "1.parquet", _rows(range(10), 1, "us"))
    assert run_pipeline(spec, spark=spark).rows_read == 20
    time.sleep(0.05)
    moment = pd.Timestamp(time.time(), unit="s", tz="UTC").isoformat()
    # a new file's time stamp may come from the kernel's coarse clock, a tick behind
    # time.time(): written at once, it failed about one run in three
    time.sleep(0.05)
    _drop(tmp_path / "inbox_a", "2.parquet", _rows(range(10, 15), 2, "nl"))
    _drop(tmp_path / "inbox_b", "2.parquet", _rows(range(10, 13), 2, "us"))

    # a starts at the chosen time, b where the table says: only the new files of both
    done = run_pipeline(spec, spark=spark, options=RunOptions(checkpoint=(f"a={moment}",)))
    assert done.rows_read == 8

    # a start in the future with nothing to read is recorded all the same
    later = pd.Timestamp(time.time() + 3600, unit="s", tz="UTC").isoformat()
    skipped = run_pipeline(
        spec, spark=spark, options=RunOptions(checkpoint=(f"a={later}", f"b={later}"))
    )
    assert skipped.nothing_new and skipped.version is not None
    assert "recorded in version" in skipped.render()
    _drop(tmp_path / "inbox_a", "3.parquet", _rows(range(20, 22), 3, "nl"))
    assert run_pipeline(spec, spark=spark).nothing_new  # 3.parquet is before the chosen start


def test_a_second_run_of_the_pipeline_committing_first_is_not_read_twice(
    spark, tmp_path, monkeypatch
):
    spec = _two_file_sources(tmp_path)
    _drop(tmp_path / "inbox_a", "1.parquet", _rows(range(10), 1, "nl"))
    _drop(tmp_path / "inbox_b", "1.parquet", _rows(range(10), 1, "us"))
    run_pipeline(spec, spark=spark)
    _drop(tmp_path / "inbox_a", "2.parquet", _rows(range(10, 15), 2, "nl"))

    marker = tmp_path / "held"
    monkeypatch.setenv("RUNNER_FAULT", "before_commit:wait")
    monkeypatch.setenv("RUNNER_FAULT_MARKER", str(marker))
    outcome: dict = {}

    def first() -> None:
        try:
            outcome["summary"] = run_pipeline(spec, spark=spark)
        except Exception as exc:
            outcome["error"] = exc

    held = threading.Thread(target=first)
    held.start()
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert time.monotonic() < deadline and held.is_alive(), outcome
        time.sleep(0.1)
    monkeypatch.delenv("RUNNER_FAULT")
    second = run_pipeline(spec, spark=spark)  # reads 2.parquet too, and commits first
    assert second.rows_read == 5
    Path(f"{marker}.go").touch()
    held.join(120)

    assert "another run of pipeline two committed" in str(outcome.get("error"))
    assert len(read_table(tmp_path / "table")) == 25
    assert run_pipeline(spec, spark=spark).nothing_new


def test_a_delta_source_with_spaces_in_its_paths_is_read(spark, tmp_path):
    inbox = tmp_path / "in box"
    upstream, downstream = _chain(tmp_path, "in box", "table a")
    batch = pd.concat([_rows(range(5), 1, "new york"), _rows(range(3), 1, "são paulo")])
    _drop(inbox, "batch 1.parquet", batch)
    run_pipeline(upstream, spark=spark)
    assert run_pipeline(downstream, spark=spark).rows_read == 8
    pd.testing.assert_frame_equal(
        _table(tmp_path / "table_b"), _upsert(None, batch), check_dtype=False
    )


def test_init_makes_a_spec_of_a_database_table_keyed_by_its_primary_key(
    spark, tmp_path, postgres, monkeypatch
):
    from runner.pipeline.run import run_pipeline
    from tests.cli_in_process import run_cli

    monkeypatch.setattr("runner.jvm.session.spark_session", lambda *args, **kwargs: spark)
    monkeypatch.setenv("PGUSER_TEST", postgres.user)
    monkeypatch.setenv("PGPASSWORD_TEST", postgres.password)
    postgres.execute(
        "DROP TABLE IF EXISTS lines;"
        "CREATE TABLE lines (order_id int, line int, sku text, updated_at timestamp,"
        " PRIMARY KEY (order_id, line));"
        "INSERT INTO lines VALUES (1, 1, 'a', '2024-01-01'), (1, 2, 'b', '2024-01-02');"
    )
    out = tmp_path / "lines.yaml"
    done = run_cli(
        "init", "--jdbc", postgres.url, "--table", "public.lines",
        "--user-env", "PGUSER_TEST", "--password-env", "PGPASSWORD_TEST", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "record_key: order_id,line   # the table's primary key" in text
    assert "precombine_field: updated_at   # check:" in text
    assert "password: ${env:PGPASSWORD_TEST}" in text and postgres.password not in text
    summary = run_pipeline(load_spec(out), spark)
    assert summary.inserted == 2
