"""The spec model and the JSON Schema say the same: every default, every vocabulary.

The model (runner/spec/model.py) holds each default once; the schema repeats it for
editors and docs/spec.md. These tests fail when one changes without the other.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any, get_args

import pytest

from runner.spec import model as m
from runner.spec.timebased import DEFAULT_FORMATS_DELIMITER

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "schemas" / "pipeline.schema.json").read_text()
)


def _default(cls: type, name: str) -> Any:
    return next(f.default for f in fields(cls) if f.name == name)


K8S = m.KubernetesSpec()
MODEL_DEFAULTS: dict[str, Any] = {
    "properties/spark/properties/master": _default(m.SparkSettings, "master"),
    "$defs/source/properties/on_bad_file": _default(m.Source, "on_bad_file"),
    "$defs/source/properties/on_bad_record": _default(m.Source, "on_bad_record"),
    "$defs/target/properties/table_type": _default(m.Target, "table_type"),
    "$defs/target/properties/operation": _default(m.Target, "operation"),
    "$defs/target/properties/merge_mode": _default(m.Target, "merge_mode"),
    "$defs/target/properties/precombine_string_order": _default(
        m.Target, "precombine_string_order"
    ),
    "$defs/target/properties/filter_dupes": _default(m.Target, "filter_dupes"),
    "$defs/target/properties/bulk_insert_sort": _default(m.Target, "bulk_insert_sort"),
    "$defs/target/properties/change_data_feed": _default(m.Target, "change_data_feed"),
    "$defs/target/properties/skip_unchanged": _default(m.Target, "skip_unchanged"),
    "$defs/target/properties/schema_evolution": _default(m.Target, "schema_evolution"),
    "$defs/target/properties/on_schema_mismatch": _default(m.Target, "on_schema_mismatch"),
    "$defs/target/properties/commit_retries": _default(m.Target, "commit_retries"),
    "$defs/key_generator/properties/hive_style_partitioning": _default(
        m.KeyGenSpec, "hive_style_partitioning"
    ),
    "$defs/key_generator/properties/url_encode": _default(m.KeyGenSpec, "url_encode"),
    "$defs/key_generator/properties/complex_encoding": _default(m.KeyGenSpec, "complex_encoding"),
    "$defs/key_generator/properties/consistent_logical_timestamp": _default(
        m.KeyGenSpec, "consistent_logical_timestamp"
    ),
    "$defs/index/properties/type": _default(m.IndexSpec, "type"),
    "$defs/index/properties/file_group_bytes": _default(m.IndexSpec, "file_group_bytes"),
    "$defs/timestamp/properties/scalar_time_unit": _default(m.TimestampSpec, "scalar_time_unit"),
    "$defs/timestamp/properties/input_formats_delimiter_regex": DEFAULT_FORMATS_DELIMITER,
    "$defs/expansion/properties/policy": _default(m.ExpansionSpec, "policy"),
    "$defs/expansion/properties/factor": _default(m.ExpansionSpec, "factor"),
    "$defs/cleaning/properties/retain_commits": _default(m.CleaningSpec, "retain_commits"),
    "$defs/cleaning/properties/min_age_hours": _default(m.CleaningSpec, "min_age_hours"),
    "$defs/cleaning/properties/after_commit": _default(m.CleaningSpec, "after_commit"),
    "$defs/compaction/properties/max_delta_files": _default(m.CompactionSpec, "max_delta_files"),
    "$defs/compaction/properties/max_deleted_fraction": _default(
        m.CompactionSpec, "max_deleted_fraction"
    ),
    "$defs/compaction/properties/after_commit": _default(m.CompactionSpec, "after_commit"),
    "$defs/driver_merge/properties/max_rows": _default(m.DriverMergeSpec, "max_rows"),
    "$defs/driver_merge/properties/max_stored_mib": _default(m.DriverMergeSpec, "max_stored_mib"),
    "$defs/expectation/properties/action": _default(m.Expectation, "action"),
    "$defs/quarantine/properties/max_fraction": _default(m.QuarantineSpec, "max_fraction"),
    "$defs/jdbc/properties/fetch_size": _default(m.JdbcSpec, "fetch_size"),
    "$defs/jdbc/properties/num_partitions": _default(m.JdbcSpec, "num_partitions"),
    "$defs/kafka/properties/value_format": _default(m.KafkaSpec, "value_format"),
    "$defs/kafka/properties/starting_offsets": _default(m.KafkaSpec, "starting_offsets"),
    "$defs/kafka/properties/on_data_loss": _default(m.KafkaSpec, "on_data_loss"),
    "$defs/kafka/properties/debezium/properties/on_truncate": _default(
        m.DebeziumSpec, "on_truncate"
    ),
    "$defs/cdc/properties/delete_values": list(_default(m.CdcSpec, "delete_values")),
    "$defs/cdc/properties/ignore_null_updates": _default(m.CdcSpec, "ignore_null_updates"),
    "$defs/cdc/properties/tombstone_hours": _default(m.CdcSpec, "tombstone_hours"),
    "$defs/scd/properties/start_column": _default(m.ScdSpec, "start_column"),
    "$defs/scd/properties/end_column": _default(m.ScdSpec, "end_column"),
    "$defs/scd/properties/current_column": _default(m.ScdSpec, "current_column"),
    "$defs/kubernetes/properties/namespace": K8S.namespace,
    "$defs/kubernetes/properties/service_account": K8S.service_account,
    "$defs/kubernetes/properties/secret": K8S.secret,
    "$defs/kubernetes/properties/driver/properties/cores": K8S.driver.cores,
    "$defs/kubernetes/properties/driver/properties/memory": K8S.driver.memory,
    "$defs/kubernetes/properties/executor/properties/cores": K8S.executor.cores,
    "$defs/kubernetes/properties/executor/properties/memory": K8S.executor.memory,
    "$defs/kubernetes/properties/executor/properties/instances": K8S.executor.instances,
    "$defs/kubernetes/properties/restart_policy": K8S.restart_policy,
    "$defs/kubernetes/properties/retries": K8S.retries,
    "$defs/kubernetes/properties/retry_interval_seconds": K8S.retry_interval_seconds,
    "$defs/history/properties/enabled": _default(m.HistorySpec, "enabled"),
    "$defs/metrics/properties/job": _default(m.MetricsSpec, "job"),
    "$defs/lineage/properties/enabled": _default(m.LineageSpec, "enabled"),
    "$defs/lineage/properties/namespace": _default(m.LineageSpec, "namespace"),
}

VOCABULARIES = {
    "$defs/catalog/properties/type": m.CatalogType,
    "$defs/target/properties/operation": m.Operation,
    "$defs/target/properties/table_type": m.TableType,
    "$defs/target/properties/merge_mode": m.MergeMode,
    "$defs/source/properties/on_bad_file": m.OnBadFile,
    "$defs/source/properties/on_bad_record": m.OnBadRecord,
    "$defs/expectation/properties/action": m.RowAction,
    "$defs/expansion/properties/policy": m.ExpansionPolicy,
    "$defs/kubernetes/properties/restart_policy": m.RestartPolicy,
    "$defs/key_generator/properties/complex_encoding": m.ComplexEncoding,
    "$defs/kafka/properties/value_format": m.ValueFormat,
    "$defs/kafka/properties/on_data_loss": m.OnDataLoss,
}


def _schema_at(path: str) -> dict[str, Any]:
    node: Any = SCHEMA
    for part in path.split("/"):
        node = node[part]
    return node


def _schema_defaults(node: Any, path: tuple[str, ...] = ()) -> dict[str, Any]:
    found = {}
    if isinstance(node, dict):
        if "default" in node:
            found["/".join(path)] = node["default"]
        for key, value in node.items():
            found |= _schema_defaults(value, (*path, key))
    return found


def test_every_schema_default_is_the_models():
    assert _schema_defaults(SCHEMA) == MODEL_DEFAULTS


@pytest.mark.parametrize("path", sorted(VOCABULARIES))
def test_every_closed_vocabulary_is_the_schemas_enum(path):
    assert list(get_args(VOCABULARIES[path])) == _schema_at(path)["enum"]


def test_every_described_key_generator_has_its_class_and_schema_name():
    from runner.hudi.keygen_types import HUDI_CLASSES, HUDI_TYPES, KEY_GENERATORS
    from runner.keygen import GENERATOR_CLASSES

    assert set(GENERATOR_CLASSES) == set(KEY_GENERATORS)
    assert _schema_at("$defs/key_generator/properties/type")["enum"] == list(KEY_GENERATORS)
    assert set(HUDI_CLASSES.values()) == set(HUDI_TYPES.values()) == set(KEY_GENERATORS)
