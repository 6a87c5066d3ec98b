"""The CLI takes what users type: a mistyped command or spec file name is answered with the
name they meant, and every command on a table takes the table or its spec; in the test's
process (tests/cli_in_process.py), before any JVM."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from runner.commands.table_spec import spec_from_table
from runner.delta.snapshot import open_table
from runner.delta.table_config import table_settings
from runner.delta.table_setup import TableFeaturesWanted, create_table
from runner.storage.location import locate
from runner.storage.meta_columns import META_FIELDS
from tests.cli_in_process import no_spark, run_cli
from tests.helpers import keys_target

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def beside_a_spec(tmp_path, monkeypatch):
    """The shell in a directory holding orders.yaml (the quickstart spec)."""
    no_spark(monkeypatch)
    (tmp_path / "orders.yaml").write_text((ROOT / "pipelines" / "quickstart.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_mistyped_command_is_named_not_run_as_a_spec(beside_a_spec):
    done = run_cli("reed", "warehouse/trips")
    assert done.returncode == 2
    assert "No such command 'reed'" in done.stderr and "'read'" in done.stderr
    history = run_cli("histroy")
    assert history.returncode == 2 and "Did you mean 'history'?" in history.stderr


def test_a_mistyped_spec_file_name_is_answered_with_the_one_beside_it(beside_a_spec):
    for typed, meant in [
        ("orders.yml", "orders.yaml"),
        ("orders", "orders.yaml"),
        ("./order.yaml", "./orders.yaml"),
    ]:
        done = run_cli(typed)
        assert done.returncode == 2, typed
        assert done.stderr.strip() == (
            f"{typed}:1:1: cannot read the file: No such file or directory; did you mean {meant}?"
        )
    nothing_near = run_cli("zzz.yaml")
    assert nothing_near.returncode == 2 and "did you mean" not in nothing_near.stderr


def _table(directory: Path, key_generator: dict, record_key, **settings: str) -> str:
    """An empty runner table `t` of directory/k.yaml (the spec keys_target writes)."""
    target = keys_target(directory, key_generator, record_key)
    schema = pa.schema([*META_FIELDS, ("id", pa.string()), ("p", pa.string())])
    stored = {**table_settings(target), **settings}
    create_table(locate(target.path), "t", schema, stored, TableFeaturesWanted())
    return target.path


def test_a_command_on_a_table_takes_its_spec_and_one_on_a_spec_its_table(tmp_path, monkeypatch):
    no_spark(monkeypatch)
    table = _table(tmp_path, {"type": "SIMPLE", "partition_fields": "p"}, "id")
    spec = str(tmp_path / "k.yaml")
    for command, *flags in [
        ["inspect"],
        ["read"],
        ["read", "--key", "x"],
        ["clean", "--dry-run"],
        ["plan", "--buckets", "16"],
        ["compact", "--dry-run"],
    ]:
        by_spec, by_table = run_cli(command, spec, *flags), run_cli(command, table, *flags)
        assert by_spec.returncode == by_table.returncode == 0, (by_spec.stderr, by_table.stderr)
        assert by_spec.stdout == by_table.stdout, command
        if command in ("inspect", "read"):
            assert by_spec.stderr == by_table.stderr


@pytest.mark.parametrize(
    ("key_generator", "record_key"),
    [
        ({"type": "SIMPLE", "partition_fields": "p", "hive_style_partitioning": True}, "id"),
        ({"type": "COMPLEX", "partition_fields": "p", "url_encode": True}, ["id", "p"]),
        ({"type": "COMPLEX", "partition_fields": "p", "complex_encoding": "VALUE_ONLY"}, "id"),
        ({"type": "NON_PARTITIONED"}, "id"),
        ({"type": "GLOBAL_DELETE"}, "id"),
        ({"type": "CUSTOM", "partition_fields": ["p:SIMPLE", "ts:TIMESTAMP"],
          "timestamp": {"type": "DATE_STRING", "input_formats": ["yyyy-MM-dd'T'HH:mm:ssZ"],
                        "output_format": "yyyy/MM/dd", "input_timezone": "America/New_York"}},
         "id"),
        ({"type": "TIMESTAMP", "partition_fields": "ts",
          "timestamp": {"type": "EPOCHMILLISECONDS", "output_format": "yyyy-MM-dd"}}, "id"),
    ],
)  # fmt: skip
def test_a_tables_spec_gives_back_every_setting_it_stores(tmp_path, key_generator, record_key):
    table = _table(tmp_path, key_generator, record_key)
    stored = open_table(table).configuration
    made = spec_from_table(table).target
    assert (
        made.path == table
        and made.key_generator == keys_target(tmp_path, key_generator, record_key).key_generator
    )
    assert table_settings(made) == {k: stored[k] for k in table_settings(made)}


def test_a_table_that_cannot_say_its_own_settings_is_refused(tmp_path, monkeypatch):
    no_spark(monkeypatch)
    table = _table(
        tmp_path, {"partition_fields": "p"}, "id", **{"runner.keygen.class": "my.keys:Gen"}
    )
    done = run_cli("compact", table)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: {table}'s keys come from the key generator class my.keys:Gen: give the spec "
        "that writes it (its class is found beside it)"
    )
    monkeypatch.chdir(tmp_path)
    nowhere = run_cli("clean", "tt")
    assert nowhere.returncode == 2
    assert nowhere.stderr.strip() == (
        "error: tt is neither a spec file nor a Delta table; give the pipeline's spec or its "
        "target table; did you mean t?"
    )
