"""The validated spec mapping as the frozen model (runner/spec/model.py), defaults filled in.

Runs only after every check passed: the key generator resolves without a problem here, and
relative paths become absolute against the spec file's directory.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from runner.hudi.merge_names import from_properties
from runner.spec.derived import conf_str, merge_settings
from runner.spec.keygen_settings import field_list, resolve_key_generator
from runner.spec.located import Path_, dotted
from runner.spec.model import (
    CatalogSpec,
    CdcSpec,
    CleaningSpec,
    CompactionSpec,
    DebeziumSpec,
    DriverMergeSpec,
    ExpansionSpec,
    Expectation,
    HistorySpec,
    Incremental,
    IndexSpec,
    JdbcSpec,
    KafkaSpec,
    KubernetesSpec,
    LineageSpec,
    MergerSpec,
    MetricsSpec,
    PipelineSpec,
    QuarantineSpec,
    ScdSpec,
    SharedVolume,
    Source,
    SparkSettings,
    Target,
)
from runner.spec.paths import absolute


def build(data: dict[str, Any], file: Path) -> PipelineSpec:
    """The model of a spec mapping that passed every check; `file` is the spec's absolute
    path, whose directory relative paths are resolved against."""
    base = file.parent
    spark = data.get("spark", {})
    return PipelineSpec(
        name=data["name"],
        description=data.get("description"),
        file=str(file),
        spark=SparkSettings(
            conf={k: conf_str(v) for k, v in spark.get("conf", {}).items()},
            **_given(spark, "master"),
        ),
        sources=tuple(_source(s, base) for s in data["sources"]),
        transform_sql=data.get("transform", {}).get("sql"),
        expectations=tuple(Expectation(**e) for e in data.get("expectations", [])),
        target=_target(data["target"], base),
        kubernetes=_kubernetes(data.get("kubernetes", {})),
        history=_history(data.get("history", {}), base),
        metrics=_metrics(data.get("metrics", {}), base),
        lineage=LineageSpec(**data.get("lineage", {})),
    )


def _history(block: dict[str, Any], base: Path) -> HistorySpec:
    path = block.get("path")
    return HistorySpec(
        **_given(block, "enabled"), path=absolute(path, base) if path is not None else None
    )


def _metrics(block: dict[str, Any], base: Path) -> MetricsSpec:
    textfile = block.get("textfile")
    return MetricsSpec(
        **_given(block, "pushgateway", "job", "port"),
        textfile=absolute(textfile, base) if textfile is not None else None,
    )


def _source(s: dict[str, Any], base: Path) -> Source:
    return Source(
        name=s["name"],
        format=s["format"],
        path=absolute(s["path"], base) if "path" in s else "",
        schema=s.get("schema"),
        options={k: conf_str(v) for k, v in s.get("options", {}).items()},
        incremental=_incremental(s.get("incremental")),
        jdbc=_jdbc(s.get("jdbc"), base),
        kafka=_kafka(s.get("kafka"), base),
        **_given(s, "on_bad_file", "on_bad_record"),
    )


def _target(target: dict[str, Any], base: Path) -> Target:
    keygen = resolve_key_generator(target, _unreachable)
    assert keygen is not None, "the semantic checks passed"
    if keygen.class_path:
        keygen = replace(keygen, search_path=str(base))
    index = target["index"]
    merge_mode, precombine_field = merge_settings(
        target, from_properties(target.get("properties", {}))
    )
    return Target(
        path=absolute(target["path"], base),
        precombine_field=precombine_field,
        **_given(target, "precombine_string_order"),
        merge_mode=merge_mode,
        merger=_merger(target.get("merger"), base),
        delete_marker=target.get("delete_marker"),
        cdc=_cdc(target.get("cdc")),
        scd=ScdSpec(**target.get("scd", {})),
        cleaning=CleaningSpec(**target.get("cleaning", {})),
        compaction=CompactionSpec(**target.get("compaction", {})),
        driver_merge=DriverMergeSpec(**target.get("driver_merge", {})),
        **_given(target, "operation", "table_type", "filter_dupes", "commit_retries"),
        **_given(target, "change_data_feed", "skip_unchanged", "bulk_insert_sort"),
        **_given(target, "schema_evolution", "on_schema_mismatch"),
        rename=dict(target.get("rename", {})),
        drop=tuple(target.get("drop", ())),
        quarantine=_quarantine(target.get("quarantine"), base),
        catalog=CatalogSpec(**target["catalog"]) if "catalog" in target else None,
        key_generator=keygen,
        index=IndexSpec(
            **_given(index, "type", "file_group_bytes"),
            buckets=index["buckets"],
            hash_fields=field_list(index.get("hash_fields")) or keygen.record_key,
            expansion=ExpansionSpec(**index.get("expansion", {})),
        ),
    )


def _kubernetes(block: dict[str, Any]) -> KubernetesSpec:
    defaults = KubernetesSpec()
    plain = (
        *("namespace", "service_account", "secret", "restart_policy", "retries"),
        "retry_interval_seconds",
    )
    return KubernetesSpec(
        **{key: block[key] for key in plain if key in block},
        driver=replace(defaults.driver, **block.get("driver", {})),
        executor=replace(defaults.executor, **block.get("executor", {})),
        volume=SharedVolume(**block["volume"]) if "volume" in block else None,
        spark_conf={k: conf_str(v) for k, v in block.get("spark_conf", {}).items()},
    )


def _incremental(value: Any) -> Incremental | None:
    if value is None:
        return None
    if value == "new_files":
        return Incremental("new_files")
    if "since" in value:
        return Incremental("since_last", deletes=value.get("deletes", "propagate"))
    return Incremental("column", column=value["column"])


def _jdbc(value: dict[str, Any] | None, base: Path) -> JdbcSpec | None:
    if value is None:
        return None
    jar = value.get("jar")
    return JdbcSpec(**{**value, "jar": absolute(jar, base) if jar else None})


_KAFKA_CONVERTED = ("topics", "starting_offsets", "avro_schema", "options", "debezium")


def _kafka(value: dict[str, Any] | None, base: Path) -> KafkaSpec | None:
    if value is None:
        return None
    starting = value.get("starting_offsets", "earliest")
    if isinstance(starting, dict):  # YAML's keys are strings: partitions are numbers
        starting = {t: {int(p): int(o) for p, o in parts.items()} for t, parts in starting.items()}
    schema_file = value.get("avro_schema")
    return KafkaSpec(
        **{k: v for k, v in value.items() if k not in _KAFKA_CONVERTED},
        debezium=DebeziumSpec(**value.get("debezium", {})),
        topics=tuple(value.get("topics", ())),
        starting_offsets=starting,
        avro_schema=absolute(schema_file, base) if schema_file else None,
        options={k: conf_str(v) for k, v in value.get("options", {}).items()},
    )


def _cdc(data: dict[str, Any] | None) -> CdcSpec | None:
    if data is None:
        return None
    values = data.get("delete_values")
    return CdcSpec(**{**data, **({"delete_values": tuple(values)} if values else {})})


def _merger(data: dict[str, Any] | None, base: Path) -> MergerSpec | None:
    if data is None:
        return None
    properties = {k: conf_str(v) for k, v in data.get("properties", {}).items()}
    return MergerSpec(data["class"], properties, search_path=str(base))


def _quarantine(data: dict[str, Any] | None, base: Path) -> QuarantineSpec | None:
    if data is None:
        return None
    return QuarantineSpec(path=absolute(data["path"], base), **_given(data, "max_fraction"))


def _given(block: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The keys the spec sets; the model's defaults (runner.spec.model) fill in the rest."""
    return {key: block[key] for key in keys if key in block}


def _unreachable(path: Path_, message: str) -> None:
    raise AssertionError(f"{dotted(path)}: {message} (missed by the semantic checks)")
