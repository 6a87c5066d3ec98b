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
from runner.pipeline.spec_set import Member, find_spec_files, load_spec_set, upstreams_of
from runner.spec.routing import could_meet, route
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


def _routed(directory: Path, file: str, name: str, template: str) -> Path:
    """A spec in `directory` routing the topics db.* to the tables of `template`."""
    source = {"name": "events", "format": "kafka", "schema": "id long, ts long"}
    source |= {"kafka": {"bootstrap_servers": "broker:9092", "topic_pattern": "db\\..*"}}
    spec = {"name": name, "sources": [source], "target": {"path": template, **TARGET}}
    path = directory / f"{file}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_a_table_a_routed_spec_could_write_is_read_after_it(specs):
    _routed(specs, "z_cdc", "cdc", "../tables/cdc/{schema}/{table}")
    _spec(specs, "a_report", "report", reads="cdc/inventory/customers")
    _spec(specs, "b_other", "other", reads="cdc/inventory")  # a segment short: not cdc's
    spec_set, problems = load_spec_set(find_spec_files([str(specs)]).files)
    assert not problems and spec_set is not None
    assert (spec_set.upstreams["report"], spec_set.upstreams["other"]) == (("cdc",), ())
    names = [m.name for m in spec_set.members]
    assert names.index("cdc") < names.index("report")
    assert spec_set.pick(["report"], [], with_upstream=True).upstreams == {
        "cdc": (),
        "report": ("cdc",),
    }
    # in a run, the routed spec is a spec per topic: the report reads one topic's table
    cdc = next(m for m in spec_set.members if m.name == "cdc")
    topics = [Member(route(cdc.spec, f"db.inventory.{t}"), cdc.file) for t in ("a", "customers")]
    run = upstreams_of([*topics, *(m for m in spec_set.members if m.name != "cdc")])
    assert run["report"] == ("cdc.db.inventory.customers",)


def test_specs_that_could_write_one_table_through_a_template_are_refused(specs):
    _routed(specs, "m_cdc", "cdc", "../tables/cdc/{schema}/{table}")
    _routed(specs, "n_raw", "raw", "../tables/cdc/{topic}/raw")  # cdc/<topic>/raw is cdc's too
    for file, name, table in (
        ("o_fixed", "fixed", "cdc/inventory/customers"),
        ("l_early", "early", "logs/app"),
    ):
        spec = _spec(specs, file, name)
        spec.write_text(spec.read_text().replace(f"tables/{name}", f"tables/{table}"))
    _routed(specs, "p_logs", "logs", "../tables/logs/{topic}")  # could write logs/app
    _routed(specs, "q_apart", "apart", "../tables/cdc_{topic}")  # no table of any other
    spec_set, problems = check_set(find_spec_files([str(specs)]).files)
    assert spec_set is None
    tables = specs.parent / "tables"
    early, cdc = specs / "l_early.yaml", specs / "m_cdc.yaml"
    assert [str(p) for p in problems] == [
        f"{specs / 'n_raw.yaml'}:10:9: target.path: {cdc} routes topics to "
        f"{tables}/cdc/{{schema}}/{{table}}, and a topic of each could be routed to one "
        "table; each spec of a set writes tables of its own: give the templates different "
        "fixed parts (a directory of each)",
        f"{specs / 'o_fixed.yaml'}:9:9: target.path: {cdc} routes topics to "
        f"{tables}/cdc/{{schema}}/{{table}}, which could route a topic to this table; each "
        "spec of a set writes tables of its own: write this table outside the template's "
        "directory",
        f"{specs / 'p_logs.yaml'}:10:9: target.path: a topic could be routed to "
        f"{tables}/logs/app, the table {early} writes; each spec of a set writes tables of "
        "its own: give the template a fixed part that table's path has not (a directory of "
        "its own)",
    ]


@pytest.mark.parametrize(
    ("first", "second", "meet"),
    [
        ("w/{schema}/{table}", "w/{topic}/raw", True),
        ("w/{schema}/{table}", "w/{topic}", False),  # a field is one segment's text
        ("w/a_{topic}", "w/{table}_b", True),  # w/a_b, w/a_x_b
        ("w/a{topic}", "w/b{table}", False),
        ("w/{topic}x", "w/{topic}", True),
        ("w/{topic}", "w/{topic}x/y", False),
        ("s3://b/{topic}", "s3://b/{table}", True),
    ],
)
def test_two_templates_meet_when_one_path_fits_both(first, second, meet):
    assert could_meet(first, second) is meet
    assert could_meet(second, first) is meet
