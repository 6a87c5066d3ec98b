"""A set of specs without a JVM: found in a directory, ordered by the tables they read, refused
where it cannot run as one (a circle, one table or one name twice, Spark settings that
cannot share an application), picked with --select, --exclude and --with-upstream; and
`runner run DIR` of specs that fail or have nothing new before Spark is needed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from runner.cli.main import cli, run_command
from runner.pipeline.shared_spark import check_set, shared_spark
from runner.pipeline.spec_set import find_spec_files, load_spec_set
from tests.unit.test_validate import _validate_without_jvm

TARGET = {
    "operation": "upsert",
    "record_key": "id",
    "precombine_field": "ts",
    "index": {"buckets": 2},
}


def _spec(directory: Path, file: str, name: str, reads: str | None = None, **extra) -> Path:
    """A spec in `directory` (under specs/) writing tables/NAME; it reads table READS (a
    delta source), else files of inbox/NAME. Paths relative to the spec's directory."""
    path = directory / f"{file}.yaml"
    root = next(p for p in path.parents if p.name == "specs").parent

    def under(*parts: str) -> str:
        return os.path.relpath(root.joinpath(*parts), path.parent)

    if reads is None:
        source = {"name": "s", "format": "json", "path": under("inbox", name)}
        source |= {"schema": "id long, ts long", "incremental": "new_files"}
    else:
        source = {"name": "s", "format": "delta", "path": under("tables", reads)}
        source |= {"incremental": {"since": "last", "deletes": "ignore"}}
    target = {"path": under("tables", name), **TARGET}
    spec = {"name": name, "sources": [source], "target": target}
    path.write_text(yaml.safe_dump({**spec, **extra}, sort_keys=False))
    return path


@pytest.fixture
def specs(tmp_path: Path) -> Path:
    """A chain bronze -> silver -> gold whose files sort the other way, two independent
    specs, and a YAML file that is no spec."""
    folder = tmp_path / "specs"
    (folder / "more").mkdir(parents=True)
    _spec(folder, "a_gold", "gold", reads="silver")
    _spec(folder, "b_silver", "silver", reads="bronze")
    _spec(folder, "more/c_bronze", "bronze")
    _spec(folder, "zeta", "zeta")
    _spec(folder, "alpha", "alpha")
    (folder / "values.yml").write_text("buckets: 2\n")
    return folder


def _exit_code(monkeypatch, *args: str) -> int:
    """`runner ARGS`'s exit code, through the CLI's error handling."""
    monkeypatch.setattr(sys, "argv", ["runner", *args])
    return run_command()


def _names(folder: Path) -> list[str]:
    found = find_spec_files([str(folder)])
    spec_set, problems = load_spec_set(found.files)
    assert not problems and spec_set is not None
    return [m.name for m in spec_set.members]


def test_upstreams_run_first_and_ties_go_by_name(specs):
    assert _names(specs) == ["alpha", "bronze", "silver", "gold", "zeta"]
    found = find_spec_files([str(specs)])
    assert found.not_specs == (str(specs / "values.yml"),)


def test_validate_of_a_directory_prints_the_order_and_the_files_left_out(specs):
    result = CliRunner().invoke(cli, ["validate", str(specs)])
    assert result.exit_code == 0, result.output
    assert f"{specs / 'a_gold.yaml'}: ok" in result.stdout
    assert "1 YAML file(s) without a target: left out" in result.stdout
    assert result.stdout.splitlines()[-1] == "run order: alpha, bronze, silver, gold, zeta"
    assert "run order: alpha" in _validate_without_jvm(specs)


def test_a_circle_is_refused_with_its_specs_named(specs, monkeypatch):
    _spec(specs, "more/c_bronze", "bronze", reads="gold")
    result = CliRunner().invoke(cli, ["validate", str(specs)])
    assert result.exit_code == 2
    bronze, silver, gold = (
        str(specs / "more" / "c_bronze.yaml"),
        str(specs / "b_silver.yaml"),
        str(specs / "a_gold.yaml"),
    )
    (line,) = [line for line in result.stdout.splitlines() if "in a circle" in line]
    assert line.startswith(f"{silver}:5:9: sources[0].path: the specs read each other's tables")
    assert f"in a circle: {bronze} -> {silver} -> {gold} -> {bronze};" in line
    assert _exit_code(monkeypatch, "run", str(specs)) == 2


def test_two_specs_of_one_table_or_one_name_are_refused(specs):
    _spec(specs, "again", "gold", reads="silver")
    twin = specs / "twin.yaml"
    twin.write_text((specs / "alpha.yaml").read_text().replace("name: alpha", "name: twin"))
    spec_set, problems = check_set(find_spec_files([str(specs)]).files)
    assert spec_set is None
    shown = [str(p) for p in problems]
    again, gold = specs / "again.yaml", specs / "a_gold.yaml"
    assert shown[0].startswith(f"{again}:1:7: name: {gold} has this name too; the specs of")
    assert shown[1].startswith(f"{again}:10:9: target.path: {gold} writes this table too;")
    assert shown[2].startswith(f"{twin}:9:9: target.path: {specs / 'alpha.yaml'} writes this")
    assert len(shown) == 3


def test_several_files_are_checked_apart_unless_as_a_set(specs):
    files = [str(specs / "alpha.yaml"), str(specs / "zeta.yaml")]
    (specs / "zeta.yaml").write_text((specs / "alpha.yaml").read_text().replace("alpha", "zeta", 1))
    assert CliRunner().invoke(cli, ["validate", *files]).exit_code == 0
    result = CliRunner().invoke(cli, ["validate", "--set", *files])
    assert result.exit_code == 2
    assert "target.path" in result.stdout and "writes this table too" in result.stdout


def test_static_spark_settings_that_differ_are_named(specs):
    conf = {"spark.sql.shuffle.partitions": "3", "spark.executor.memory": "2g"}
    _spec(specs, "zeta", "zeta", spark={"master": "local[1]", "conf": conf})
    _spec(specs, "alpha", "alpha", spark={"conf": {"spark.sql.extensions": "x.Y"}})
    result = CliRunner().invoke(cli, ["validate", str(specs)])
    assert result.exit_code == 2
    problems = [line for line in result.stdout.splitlines() if "differs from" in line]
    assert [p.split(": ")[1] for p in problems] == [
        "spark.conf.spark.sql.extensions",  # every spec without it differs from alpha
        "spark.conf.spark.sql.extensions",
        "spark.conf.spark.sql.extensions",
        "spark.master",
        "spark.conf.spark.executor.memory",
        "spark.conf.spark.sql.extensions",
    ]
    assert "give them the same value, or run these specs apart" in problems[0]


def test_runtime_sql_settings_go_to_their_spec_only(specs):
    both = {"spark.sql.session.timeZone": "UTC", "spark.executor.memory": "1g"}
    for file, name, reads in [
        ("a_gold", "gold", "silver"),
        ("b_silver", "silver", "bronze"),
        ("more/c_bronze", "bronze", None),
        ("alpha", "alpha", None),
    ]:
        _spec(specs, file, name, reads, spark={"conf": both})
    own = {"spark.sql.shuffle.partitions": "3"}
    _spec(specs, "zeta", "zeta", spark={"conf": {**both, **own}})
    spec_set, problems = check_set(find_spec_files([str(specs)]).files)
    assert not problems and spec_set is not None
    shared, _ = shared_spark(spec_set.members)
    assert shared is not None
    assert (shared.settings.master, dict(shared.settings.conf)) == ("local[*]", both)
    assert dict(shared.own) == {"zeta": own}


def test_select_exclude_and_with_upstream(specs):
    found = find_spec_files([str(specs)])
    spec_set, _ = load_spec_set(found.files)
    assert spec_set is not None

    def picked(select=(), exclude=(), with_upstream=False) -> list[str]:
        return [m.name for m in spec_set.pick(select, exclude, with_upstream).members]

    assert picked(["gold", "zeta"]) == ["gold", "zeta"]
    assert picked(["a_gold"], with_upstream=True) == ["bronze", "silver", "gold"]
    assert picked(["gold"], ["c_bronze"], with_upstream=True) == ["silver", "gold"]
    assert picked(exclude=["silver", "alpha"]) == ["bronze", "gold", "zeta"]
    result = CliRunner().invoke(cli, ["run", str(specs), "--select", "gold,nope"])
    assert result.exit_code == 2
    assert "nope: no spec of the set has this name or file name" in result.output


def test_options_of_one_spec_and_of_a_set_are_refused_where_they_do_not_go(specs):
    result = CliRunner().invoke(cli, ["run", str(specs), "--batch-id", "b1", "--dry-run"])
    assert result.exit_code == 2
    assert "--batch-id, --dry-run go with one spec, not a set" in result.output
    result = CliRunner().invoke(cli, ["run", str(specs / "alpha.yaml"), "--select", "alpha"])
    assert result.exit_code == 2
    assert "--select choose among a set" in result.output


def test_a_failed_spec_skips_its_downstreams_and_with_fail_fast_the_rest(specs, tmp_path):
    """bronze's input directory is missing (it fails before Spark); alpha and zeta have no
    new file (nothing new, no Spark either)."""
    (tmp_path / "inbox" / "alpha").mkdir(parents=True)
    (tmp_path / "inbox" / "zeta").mkdir()
    result = CliRunner().invoke(cli, ["run", str(specs)])
    assert result.exit_code == 1, result.output
    table = result.stdout.splitlines()[-7:]
    assert [line.split()[:3] for line in table[1:-1]] == [
        ["alpha", "nothing", "new"],
        ["bronze", "failed:", "source"],
        ["silver", "skipped:", "because"],
        ["gold", "skipped:", "because"],
        ["zeta", "nothing", "new"],
    ]
    assert "because bronze failed" in table[4]
    assert f"{specs / 'more' / 'c_bronze.yaml'}: failed: source path" in result.stderr
    result = CliRunner().invoke(cli, ["run", str(specs), "--fail-fast", "--exclude", "gold"])
    assert result.exit_code == 1
    assert "skipped: because bronze failed (--fail-fast)" in result.stdout.splitlines()[-2]
    assert result.stdout.splitlines()[-1].startswith(
        "4 spec(s): 1 nothing new, 1 failed, 2 skipped"
    )


def test_every_spec_s_problems_are_reported_and_nothing_runs(specs, tmp_path, monkeypatch):
    for file in ("alpha.yaml", "more/c_bronze.yaml"):
        path = specs / file
        path.write_text(path.read_text().replace("operation: upsert", "operation: merge"))
    result = CliRunner().invoke(cli, ["validate", str(specs)])
    assert result.exit_code == 2
    problems = [line for line in result.stdout.splitlines() if "target.operation" in line]
    assert [p.split(":")[0] for p in problems] == [
        str(specs / "alpha.yaml"),
        str(specs / "more" / "c_bronze.yaml"),
    ]
    assert "2 of 5 spec(s) invalid" in result.stderr
    assert _exit_code(monkeypatch, "run", str(specs)) == 2
    assert not (tmp_path / "tables").exists()
