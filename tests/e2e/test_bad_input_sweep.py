"""A sweep of bad inputs through the CLI, as a user meets them.

Each case gets one error line that says what is wrong (no JVM stack trace), the exit code
the README documents (2: fix the spec, input or table settings; 1: the run failed), and
leaves the table and every other file as they were, byte for byte.

The cases run in this process, through the CLI's own error handling and on the shared
session (tests/cli_in_process.py): a process each would start a JVM each. A subprocess runs
where the process is the point: that a `runner` process prints the same line and exit code,
with nothing from its JVM (test_a_process_prints_the_same_line_and_exit_code), its working
directory, a read-only mount.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from deltalake import write_deltalake

from runner.observe.history import read as read_history
from runner.pipeline.run import run_pipeline
from runner.spec import load_spec
from tests.cli_in_process import no_spark, run_cli, shared_session
from tests.helpers import file_bytes

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

RUNNER = [sys.executable, "-m", "runner"]
ROWS = [{"id": i, "city": c, "v": i} for i, c in enumerate(["a", "b", "c", "a"], start=1)]
SECRET = "s3cr3t-value-0042"


def _spec(source: dict, target_path: str | Path, **target) -> dict:
    return {
        "name": "sweep",
        "sources": [{"name": "src", **source}],
        "target": {
            "path": str(target_path),
            "operation": "upsert",
            "record_key": "id",
            "precombine_field": "v",
            "key_generator": {"type": "SIMPLE", "partition_fields": "city"},
            "index": {"buckets": 4},
            **target,
        },
    }


def _json_source(directory: Path, lines: list[str], schema: str | None = None) -> dict:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "a.json").write_text("".join(line + "\n" for line in lines))
    return {"format": "json", "path": str(directory), **({"schema": schema} if schema else {})}


@pytest.fixture(scope="module")
def work(tmp_path_factory, spark):
    """A committed table, its input, and the other files a user has beside it."""
    work = tmp_path_factory.mktemp("sweep")
    source = _json_source(
        work / "in", [json.dumps(r) for r in ROWS], "id long, city string, v long"
    )
    (work / "good.yaml").write_text(yaml.safe_dump(_spec(source, work / "table")))
    run_pipeline(load_spec(work / "good.yaml"), spark=spark)
    (work / "old_dataset").mkdir()
    (work / "old_dataset" / "data.csv").write_text("id,city\n1,a\n")
    write_deltalake(str(work / "foreign"), pd.DataFrame({"id": [1]}))
    (work / "cases").mkdir()
    return work


@pytest.fixture(autouse=True)
def in_process(monkeypatch, spark):
    """`runner` in this process runs on the shared session."""
    shared_session(monkeypatch, spark)


def _run(
    work: Path,
    name: str,
    spec: dict | str,
    *flags: str,
    env: dict | None = None,
    process: bool = False,
):
    """`runner FLAGS SPEC` in this process, or in a `runner` process of its own."""
    case = work / "cases" / name
    case.mkdir(exist_ok=True)
    text = spec if isinstance(spec, str) else yaml.safe_dump(spec, sort_keys=False)
    (case / "spec.yaml").write_text(text)
    if not process:
        return run_cli(*flags, str(case / "spec.yaml"), env=env)
    return subprocess.run(
        [*RUNNER, *flags, str(case / "spec.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def _error_lines(stderr: str) -> list[str]:
    """What the user reads: stderr without the JSON log lines."""
    return [line for line in stderr.splitlines() if not line.startswith("{")]


def _check(done, code: int, expected: str) -> str:
    lines = _error_lines(done.stderr)
    assert done.returncode == code, done.stderr[-3000:]
    assert lines, done.stderr[-3000:]
    first = lines[0]
    assert expected in first, lines
    assert not [line for line in lines if "\tat " in line or line.startswith("Traceback")], lines
    return first


CASES = {
    # name: (spec builder, exit code, what the first error line must say)
    "yaml_syntax": (lambda w: "name: [unclosed\n", 2, "not valid YAML"),
    "empty_spec": (lambda w: "", 2, "the spec is empty"),
    "missing_source": (
        lambda w: _spec({"format": "json", "path": str(w / "nowhere")}, w / "table"),
        2,
        "nowhere",
    ),
    "misspelt_source_path": (  # found before Spark starts, with the name beside it
        lambda w: _spec({"format": "json", "path": str(w / "inn")}, w / "table"),
        2,
        "error: source 'src': path {}/inn does not exist; did you mean {}/in?",
    ),
    "csv_read_without_header": (  # as import-hudi's spec of a CSV source without one
        lambda w: _spec(
            {
                **_csv_source(w / "cases" / "csv_read_without_header" / "in", "1,a,9\n"),
                "options": {},
            },
            w / "table",
        ),
        2,
        "not among the columns of source 'src': _c0, _c1, _c2; those are Spark's names for the "
        "columns of a CSV file read without its header: set the source's options.header: true",
    ),
    "corrupt_parquet": (
        lambda w: _spec(_corrupt_parquet(w / "cases" / "corrupt_parquet" / "in"), w / "table"),
        2,
        "is not a Parquet file",
    ),
    "corrupt_json": (
        lambda w: _spec(
            _json_source(
                w / "cases" / "corrupt_json" / "in",
                ['{"id": 9, "city": "a", "v": 9}', '{"id": 10, "city": "a"', "x"],
                "id long, city string, v long",
            ),
            w / "table",
        ),
        2,
        "2 record(s) are rejected",
    ),
    "unparseable_json": (
        lambda w: _spec(
            _json_source(w / "cases" / "unparseable_json" / "in", ['{"id": 9, "city": "a"', "x"]),
            w / "table",
        ),
        2,
        "no record parses as json",
    ),
    "corrupt_csv": (
        lambda w: _spec(_bad_csv(w / "cases" / "corrupt_csv" / "in"), w / "table"),
        2,
        "record(s) are rejected",
    ),
    "type_changed": (
        lambda w: _spec(
            _json_source(
                w / "cases" / "type_changed" / "in",
                ['{"id": 9, "city": "a", "v": "nine"}'],
                "id long, city string, v string",
            ),
            w / "table",
            precombine_string_order=True,  # text order is meant: the type change is refused
        ),
        2,
        "column v: the table stores long, the input has string",
    ),
    "non_delta_target": (
        lambda w: _spec(
            _json_source(w / "cases" / "non_delta_target" / "in", ["{}"]), w / "old_dataset"
        ),
        2,
        "is not empty and holds no Delta table (data.csv)",
    ),
    "foreign_delta_target": (
        lambda w: _spec(
            _json_source(w / "cases" / "foreign_delta_target" / "in", ["{}"]), w / "foreign"
        ),
        2,
        "not written by runner",
    ),
    "env_in_target_path_unset": (
        lambda w: _spec(
            _json_source(
                w / "cases" / "env_in_target_path_unset" / "in",
                ['{"id": 9, "city": "a", "v": 9}'],
                "id long, city string, v long",
            ),
            "${env:RUNNER_SWEEP_WH}/t",
        ),
        2,
        "target.path: environment variable RUNNER_SWEEP_WH is not set; export it",
    ),
    "literal_jdbc_password": (
        lambda w: _spec(
            {
                "format": "jdbc",
                "jdbc": {
                    "url": f"jdbc:postgresql://127.0.0.1:1/db?password={SECRET}",
                    "table": "t",
                },
            },
            w / "table",
        ),
        2,
        "sources[0].jdbc.url: the URL holds a password written out",
    ),
    "undeclared_column": (
        lambda w: _spec(
            _json_source(
                w / "cases" / "undeclared_column" / "in",
                ['{"id": 9, "city": "a", "V": 9}'],
                "id long, city string, V long",
            ),
            w / "table",
        ),
        2,
        "target.precombine_field: precombine field 'v' is not a column of source 'src' (did "
        "you mean 'V'? names differ only in case)",
    ),
    "url_as_partition_value": (
        lambda w: _spec(
            _json_source(
                w / "cases" / "url_as_partition_value" / "in",
                ['{"id": 9, "city": "https://example.com", "v": 1}'],
                "id long, city string, v long",
            ),
            w / "table",
        ),
        2,
        "record(s) cannot be keyed",
    ),
    "ambiguous_complex_key": (
        lambda w: _spec(
            _json_source(
                w / "cases" / "ambiguous_complex_key" / "in",
                ['{"id": "x6,city:a", "city": "a", "v": 1}'],
                "id string, city string, v long",
            ),
            w / "cases" / "ambiguous_complex_key" / "table",
            record_key=["id", "city"],
            key_generator={"type": "COMPLEX", "partition_fields": "city"},
        ),
        2,
        "record(s) cannot be keyed",
    ),
    "transform_writes_a_directory": (
        lambda w: {
            **_spec(_rows_source(w, "transform_writes_a_directory"), w / "table"),
            "transform": {"sql": f"{TO_DIRECTORY.format(w / 'old_dataset')} src"},
        },
        2,
        "is an INSERT OVERWRITE DIRECTORY statement, not a query",  # Spark's parser, in a run
    ),
    "transform_with_cte_writes_a_directory": (  # sqlglot cannot read it: Spark's parser refuses it
        lambda w: {
            **_spec(_rows_source(w, "transform_with_cte_writes_a_directory"), w / "table"),
            "transform": {
                "sql": f"WITH s AS (TABLE src) {TO_DIRECTORY.format(w / 'old_dataset')} s"
            },
        },
        2,
        "spec.yaml is an INSERT OVERWRITE DIRECTORY statement, not a query",
    ),
    "transform_creates_a_table": (
        lambda w: {
            **_spec(_rows_source(w, "transform_creates_a_table"), w / "table"),
            "transform": {"sql": "CREATE TABLE made USING parquet AS SELECT * FROM src"},
        },
        2,
        "is a CREATE TABLE statement, not a query",
    ),
    "string_precombine": (
        lambda w: _spec(
            _csv_source(w / "cases" / "string_precombine" / "in", "id,city,v\n1,a,99\n"),
            w / "table",
        ),
        2,
        "precombine_field 'v' is a string column, so records would be ordered as text",
    ),
    "transform_repeats_a_column": (
        lambda w: {
            **_spec(_rows_source(w, "transform_repeats_a_column"), w / "table"),
            "transform": {"sql": "SELECT id, * FROM src"},
        },
        2,
        "gives the same column name more than once: 'id' twice; alias them",
    ),
    "transform_drops_the_record_key": (
        lambda w: {
            **_spec(_rows_source(w, "transform_drops_the_record_key"), w / "table"),
            "transform": {"sql": "SELECT city, v FROM src"},
        },
        2,
        "the record key field 'id' is not among the transform's output columns: city, v",
    ),
    "column_case_changed": (
        lambda w: _spec(
            _json_source(
                w / "cases" / "column_case_changed" / "in", ['{"id": 9, "City": "a", "v": 9}']
            ),
            w / "table",
        ),
        2,
        "the partition field 'city' is not among the columns of source 'src': City, id, v; "
        "did you mean 'City'? names differ only in case",
    ),
    "rename_onto_the_partition_field": (  # validate refuses it: the table stores `city`
        lambda w: _spec(
            _json_source(
                w / "cases" / "rename_onto_the_partition_field" / "in",
                ['{"id": 9, "town": "a", "v": 9}'],
                "id long, town string, v long",
            ),
            w / "table",
            schema_evolution="full",
            rename={"city": "town"},
            key_generator={"type": "SIMPLE", "partition_fields": "town"},
        ),
        2,
        "target.rename.city: rename city -> town: town is the partition field, which the table "
        "keeps by name",
    ),
    "chained_delta_first_run_into_rows": (  # a pipeline new to the table: deletes missed
        lambda w: _spec(
            {"format": "delta", "path": str(w / "foreign"), "incremental": {"since": "last"}},
            w / "table",
        ),
        2,
        "holds rows already, and a first read of",
    ),
    "kafka_latest_first_run_into_rows": (  # a pipeline new to the table: records skipped
        lambda w: _spec(
            {
                "format": "kafka",
                "schema": "id long, city string, v long",
                "incremental": {"since": "last"},
                "kafka": {
                    "bootstrap_servers": "127.0.0.1:9",  # refused before a broker is asked
                    "topics": ["events"],
                    "starting_offsets": "latest",
                },
            },
            w / "table",
        ),
        2,
        "holds rows already, and starting_offsets: latest would skip every record",
    ),
    "escaping_partition": (
        lambda w: _spec(
            _json_source(
                w / "cases" / "escaping_partition" / "in",
                ['{"id": 9, "city": "..", "v": 1}'],
                "id long, city string, v long",
            ),
            w / "table",
        ),
        2,
        "record(s) cannot be keyed",
    ),
}


def _corrupt_parquet(directory: Path) -> dict:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "x.parquet").write_bytes(b"PAR1 but not really")
    return {"format": "parquet", "path": str(directory), "schema": "id long, city string, v long"}


TO_DIRECTORY = "INSERT OVERWRITE DIRECTORY '{}' USING parquet SELECT * FROM"


def _rows_source(work: Path, case: str) -> dict:
    lines = [json.dumps(r) for r in ROWS]
    return _json_source(work / "cases" / case / "in", lines, "id long, city string, v long")


def _csv_source(directory: Path, text: str) -> dict:
    """A csv source with a header and no schema: Spark reads every column as a string."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "a.csv").write_text(text)
    return {"format": "csv", "path": str(directory), "options": {"header": True}}


def _bad_csv(directory: Path) -> dict:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "a.csv").write_text("9,a,9\n10,b,ten\n")
    return {"format": "csv", "path": str(directory), "schema": "id long, city string, v long"}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_named_and_changes_nothing(work, name):
    build, code, expected = CASES[name]
    before = (
        file_bytes(work / "table"),
        file_bytes(work / "old_dataset"),
        file_bytes(work / "foreign"),
    )

    done = _run(work, name, build(work))

    _check(done, code, expected.replace("{}", str(work)))
    after = (
        file_bytes(work / "table"),
        file_bytes(work / "old_dataset"),
        file_bytes(work / "foreign"),
    )
    assert after == before


def test_a_misspelt_source_path_is_refused_before_spark_starts(work, monkeypatch):
    no_spark(monkeypatch)
    done = _run(work, "misspelt_source_path", CASES["misspelt_source_path"][0](work))
    assert done.returncode == 2 and f"did you mean {work}/in?" in done.stderr


@pytest.mark.parametrize("name", ["yaml_syntax", "corrupt_parquet"])
def test_a_process_prints_the_same_line_and_exit_code(work, name):
    """What the cases above show in this process is what a `runner` process shows: one
    case that stops before Spark and one whose Spark job fails in the JVM end, in a process
    of their own, with the same first line and exit code, and no stack trace from the JVM."""
    build, code, expected = CASES[name]
    before = file_bytes(work / "table")
    process = _run(work, name, build(work), process=True)
    in_process = _run(work, name, build(work))
    assert _check(process, code, expected) == _check(in_process, code, expected)
    assert file_bytes(work / "table") == before


def test_a_transform_statement_leaves_the_working_directory_alone(work, tmp_path):
    """Neither the statement's directory nor the working directory (where Spark would put
    spark-warehouse/) changes; the second statement passes sqlglot and meets Spark's parser."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "data.csv").write_text("id,city\n1,a\n")
    before = file_bytes(mine)
    spec = _spec(_rows_source(work, "working_directory"), work / "table")
    for i, sql in enumerate(
        [
            "CREATE TABLE made USING parquet AS SELECT * FROM src",
            f"WITH s AS (TABLE src) {TO_DIRECTORY.format(mine)} s",
        ]
    ):
        (tmp_path / f"spec{i}.yaml").write_text(yaml.safe_dump({**spec, "transform": {"sql": sql}}))
        done = subprocess.run(
            [*RUNNER, "run", f"spec{i}.yaml"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        _check(done, 2, "statement, not a query")
    assert file_bytes(mine) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "spec0.yaml", "spec1.yaml"]


def test_malformed_records_are_named_with_file_and_line(work):
    source = _json_source(work / "cases" / "lines" / "in", ['{"id": 9, "city": "a", "v": 9}', "{"])
    done = _run(
        work, "lines", _spec({**source, "schema": "id long, city string, v long"}, work / "table")
    )
    _check(done, 2, "1 record(s) are rejected")
    assert f"{work}/cases/lines/in/a.json:2: does not parse" in done.stderr


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@pytest.fixture
def read_only(work):
    """The table directory remounted read-only (root ignores file modes, not a ro mount)."""
    table = str(work / "table")
    if not (_mount("--bind", table, table) and _mount("-o", "remount,ro,bind", table)):
        subprocess.run(["umount", table], capture_output=True)
        pytest.skip("cannot make a read-only bind mount here (needs root and CAP_SYS_ADMIN)")
    yield work
    subprocess.run(["umount", table], check=True)


def test_a_read_only_target_fails_in_one_line(read_only):
    work = read_only
    before = file_bytes(work / "table")
    source = _json_source(
        work / "cases" / "read_only" / "in",
        ['{"id": 7, "city": "b", "v": 7}'],
        "id long, city string, v long",
    )
    done = _run(work, "read_only", _spec(source, work / "table"), process=True)
    _check(done, 1, "Read-only file system")
    assert file_bytes(work / "table") == before


def test_a_full_file_system_fails_in_one_line_and_keeps_the_table(work, spark, tmp_path):
    disk = tmp_path / "small"
    disk.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)):
        pytest.skip("cannot mount a small tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        source = _json_source(
            tmp_path / "in", [json.dumps(r) for r in ROWS], "id long, city string, v long"
        )
        (tmp_path / "small.yaml").write_text(yaml.safe_dump(_spec(source, disk / "table")))
        run_pipeline(load_spec(tmp_path / "small.yaml"), spark=spark)
        before = file_bytes(disk)
        big = [
            json.dumps({"id": 100 + i, "city": "a", "v": i, "pad": os.urandom(3000).hex()})
            for i in range(2000)
        ]
        wide = _json_source(tmp_path / "big", big, "id long, city string, v long, pad string")
        done = _run(work, "full", _spec(wide, disk / "table"))
        _check(done, 1, "No space left on device")
        _assert_table_kept_and_failure_recorded(disk, before)
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_debug_tracebacks_are_scrubbed_of_secrets(work):
    spec = _spec({"format": "json", "path": "${env:RUNNER_SWEEP_DIR}/missing"}, work / "table")
    done = _run(work, "secret", spec, "--debug", env={"RUNNER_SWEEP_DIR": f"/tmp/{SECRET}"})
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" in done.stderr  # --debug shows it
    assert SECRET not in done.stderr and "${env:RUNNER_SWEEP_DIR}" in done.stderr


def test_a_reference_in_the_target_path_is_resolved_or_refused(work):
    """`${env:NAME}` in target.path is the variable's value, never a directory of that name
    beside the spec; unset, the run stops before Spark, naming it. The value, resolved, is
    shown as the reference in the summary, like any resolved value."""
    source = _json_source(
        work / "cases" / "env_path" / "in",
        ['{"id": 9, "city": "a", "v": 9}'],
        "id long, city string, v long",
    )
    spec = _spec(source, "${env:RUNNER_SWEEP_WH}/t")
    unset = _run(work, "env_path", spec)
    _check(unset, 2, "target.path: environment variable RUNNER_SWEEP_WH is not set")

    warehouse = work / "cases" / "env_path" / f"wh-{SECRET}"
    done = _run(work, "env_path", spec, env={"RUNNER_SWEEP_WH": str(warehouse)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (warehouse / "t" / "_delta_log").is_dir()
    assert not list((work / "cases").rglob("${env:*"))  # no directory named after the reference
    assert SECRET not in done.stdout + done.stderr
    assert "${env:RUNNER_SWEEP_WH}/t" in done.stdout  # the summary names the table


@pytest.mark.parametrize(
    ("jdbc", "field"),
    [
        ({"url": f"jdbc:postgresql://127.0.0.1:1/db?user=u&password={SECRET}"}, "jdbc.url"),
        ({"url": f"jdbc:mysql://u:{SECRET}@127.0.0.1:1/db"}, "jdbc.url"),
        ({"url": "jdbc:postgresql://127.0.0.1:1/db", "password": SECRET}, "jdbc.password"),
    ],
)
@pytest.mark.parametrize("command", [["run"], ["validate"], ["--debug", "run"]])
def test_a_password_written_in_the_spec_is_refused_and_never_printed(work, jdbc, field, command):
    spec = _spec({"format": "jdbc", "jdbc": {**jdbc, "table": "t"}}, work / "table")
    case = work / "cases" / "jdbc_password"
    case.mkdir(exist_ok=True)
    (case / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    done = run_cli(*command, str(case / "spec.yaml"))
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"sources[0].{field}: " in done.stdout + done.stderr
    assert "${env:NAME}" in done.stdout + done.stderr  # what to write instead
    assert SECRET not in done.stdout + done.stderr


def _assert_table_kept_and_failure_recorded(disk: Path, before: dict[str, bytes]) -> None:
    """Nothing under the disk changed but the run history beside the table, whose last
    record is the failure (written once the failed run has removed its partial files)."""
    history = "_runner_history/"
    after = file_bytes(disk)
    assert {k: v for k, v in after.items() if not k.startswith(history)} == {
        k: v for k, v in before.items() if not k.startswith(history)
    }
    newest = read_history(str(disk / "_runner_history" / "table"))[0]
    assert newest["outcome"] == "failed", newest
    assert "No space left on device" in newest["error_message"]


@pytest.mark.parametrize("command", ["expand", "compact"])
def test_table_services_on_a_full_file_system_fail_in_one_line(work, spark, tmp_path, command):
    """An expansion or a compaction that runs out of space ends with one line, exit 1,
    and the table as it was (each rewrites about the whole table, which holds more than
    half the disk; the update gives every bucket a delta file to compact)."""
    disk = tmp_path / "small"
    disk.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)):
        pytest.skip("cannot mount a small tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        rows = [
            json.dumps({"id": i, "city": "a", "v": 1, "pad": os.urandom(1500).hex()})
            for i in range(1100)
        ]
        source = _json_source(tmp_path / "in", rows, "id long, city string, v long, pad string")
        spec = _spec(source, disk / "table", table_type="MERGE_ON_READ")
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
        run_pipeline(load_spec(tmp_path / "spec.yaml"), spark=spark)
        update = [json.dumps({"id": i, "city": "a", "v": 2, "pad": "x"}) for i in range(40)]
        (tmp_path / "in" / "a.json").write_text("".join(line + "\n" for line in update))
        run_pipeline(load_spec(tmp_path / "spec.yaml"), spark=spark)
        before = file_bytes(disk)
        flags = ["--buckets", "8"] if command == "expand" else []
        done = run_cli(command, str(tmp_path / "spec.yaml"), *flags)
        _check(done, 1, "No space left on device")
        _assert_table_kept_and_failure_recorded(disk, before)
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def _closed_port() -> int:
    with socket.socket() as sock:  # a port nothing listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# name: (host:port given the server, the password's value given the server, table, what the
# first error line says after "source 'src' (jdbc URL): "). The password goes in the URL's
# userinfo, as a reference: the driver gets it as its password, and nothing shows its value.
JDBC_FAILURES = {
    "connection_refused": (
        lambda pg: f"127.0.0.1:{_closed_port()}",
        lambda pg: pg.password,
        "orders",
        "PSQLException: Connection to 127.0.0.1:",
    ),
    "unknown_host": (
        lambda pg: "no-such-host.invalid:5432",
        lambda pg: pg.password,
        "orders",
        "(cause: UnknownHostException: no-such-host.invalid)",
    ),
    "wrong_password": (
        lambda pg: f"{pg.host}:{pg.port}",
        lambda pg: SECRET,
        "orders",
        'PSQLException: FATAL: password authentication failed for user "runner"',
    ),
    "no_such_table": (
        lambda pg: f"{pg.host}:{pg.port}",
        lambda pg: pg.password,
        "no_such_table",
        'PSQLException: ERROR: relation "no_such_table" does not exist',
    ),
}


@pytest.mark.parametrize("name", list(JDBC_FAILURES))
def test_a_database_failure_says_what_the_database_said(work, postgres, name):
    """Not `An error occurred while calling o52.load.`: the database's own words, in the
    output and in the run history, the URL as written (its password a reference) and the
    password's value nowhere."""
    address, password, table, said = JDBC_FAILURES[name]
    url = f"jdbc:postgresql://{postgres.user}:${{env:SWEEP_PG_PW}}@{address(postgres)}/db"
    url = url.replace("/db", f"/{postgres.database}")
    target = work / "cases" / f"jdbc_{name}" / "table"
    spec = _spec({"format": "jdbc", "jdbc": {"url": url, "table": table}}, target)

    done = _run(work, f"jdbc_{name}", spec, env={"SWEEP_PG_PW": password(postgres)})

    first = _check(done, 2, f"source 'src' (jdbc {url}): ")
    assert said in first, first
    newest = read_history(str(target.parent / "_runner_history" / "table"))[0]
    assert newest["outcome"] == "failed" and said in newest["error_message"], newest
    assert SECRET not in done.stdout + done.stderr + json.dumps(newest, default=str)
    assert not target.exists()
