"""The settings check against a table on disk (runner/delta/table_config.py), without Spark:
a table written before the runner rendered timestamp fields as Hudi does is refused where
its keys hold timestamp fields, and taken where they do not."""

from __future__ import annotations

import textwrap

import pyarrow as pa
import pytest

from runner.delta.snapshot import open_table
from runner.delta.table_config import TIMESTAMP_TEXT_KEY, check_table_settings, table_settings
from runner.delta.table_setup import TableFeaturesWanted, create_table
from runner.errors import TableMismatchError
from runner.spec.loader import load_spec
from runner.storage.location import locate
from runner.storage.meta_columns import META_FIELDS


def _target(tmp_path, record_key: str):
    spec = tmp_path / "p.yaml"
    spec.write_text(
        textwrap.dedent(f"""\
        name: t
        sources: [{{name: s, format: json, path: in}}]
        target:
          path: table
          operation: upsert
          record_key: [{record_key}]
          precombine_field: n
          key_generator: {{type: SIMPLE, partition_fields: [city]}}
          index: {{buckets: 4}}
        """)
    )
    return load_spec(spec)


def _table(tmp_path, target, earlier_runner: bool):
    settings = table_settings(target)
    if earlier_runner:
        del settings[TIMESTAMP_TEXT_KEY]
    columns = [("id", pa.int64()), ("at", pa.timestamp("us", "UTC")), ("city", pa.string())]
    schema = pa.schema([*META_FIELDS, *columns, ("n", pa.int64())])
    create_table(locate(target.path), "t", schema, settings, TableFeaturesWanted())
    snapshot = open_table(locate(target.path))
    assert snapshot is not None
    return snapshot


def test_an_earlier_runners_table_keyed_by_a_timestamp_is_refused(tmp_path):
    spec = _target(tmp_path, "at")
    snapshot = _table(tmp_path, spec.target, earlier_runner=True)
    with pytest.raises(TableMismatchError, match=r"timestamp field\(s\) at: .*earlier runner"):
        check_table_settings(spec.file, spec.target, snapshot)


def test_an_earlier_runners_table_without_timestamp_keys_is_taken(tmp_path):
    spec = _target(tmp_path, "id")
    check_table_settings(spec.file, spec.target, _table(tmp_path, spec.target, True))


def test_a_table_of_this_runner_keyed_by_a_timestamp_is_taken(tmp_path):
    spec = _target(tmp_path, "at")
    check_table_settings(spec.file, spec.target, _table(tmp_path, spec.target, False))
