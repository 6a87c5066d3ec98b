"""`runner keys`: where records would go, through the same key columns as `runner run`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from runner.errors import UserError
from runner.hudi import properties as hudi_props
from runner.index.layout import BucketLayout
from runner.pipeline.key_columns import KEY_ERROR, add_key_columns
from runner.session import spark_session
from runner.spec import load_spec
from runner.spec.keygen_settings import field_list, resolve_key_generator
from runner.spec.model import IndexSpec, SparkSettings, Target
from runner.storage.meta_columns import BUCKET, PARTITION_PATH, RECORD_KEY

ORDER = "__runner_line"


def key_lines(
    spec: str | None,
    properties: tuple[str, ...],
    records: Path,
    schema: str | None,
    buckets: int | None,
) -> Iterator[str]:
    """`runner keys`: one JSON line per record, for a spec file or for Hudi properties
    (-p; give one of the two). `buckets` previews another bucket count; with properties
    and no count anywhere, the bucket is null."""
    if spec:
        pipeline = load_spec(spec)
        target, settings, name = pipeline.target, pipeline.spark, pipeline.name
        shown: int | None = buckets or target.index.buckets
    else:
        target, shown = target_from_properties(parse_properties(properties), buckets)
        settings, name = SparkSettings(), "properties"
    spark = spark_session(settings, f"{name}-keys")
    results = preview_keys(spark, target, records, schema, shown)
    return render(
        r if "error" in r or shown is not None else {**r, "bucket": None} for r in results
    )


def preview_keys(
    spark: SparkSession,
    target: Target,
    records: Path,
    schema: str | None = None,
    buckets: int | None = None,
) -> Iterator[dict[str, Any]]:
    """One dict per JSON-lines record, in input order: its key, partition path and bucket,
    or the reason it cannot be keyed."""
    lines = [line for line in records.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        return
    reader = spark.read.option("mode", "FAILFAST")
    try:
        if schema:
            reader = reader.schema(schema)
        # one partition: monotonically_increasing_id is then the line number
        parsed = reader.json(spark.sparkContext.parallelize(lines, 1))
    except (AnalysisException, ParseException) as exc:
        raise UserError(f"--schema {schema!r}: {str(exc).splitlines()[0]}") from exc
    numbered = parsed.withColumn(ORDER, F.monotonically_increasing_id())
    layout = BucketLayout(buckets) if buckets else None
    keyed = add_key_columns(numbered, target, layout).orderBy(ORDER)
    try:
        rows = keyed.select(ORDER, RECORD_KEY, PARTITION_PATH, BUCKET, KEY_ERROR).collect()
    except Exception as exc:  # a malformed line in FAILFAST mode
        raise UserError(f"{records}: not valid JSON lines: {str(exc).splitlines()[0]}") from exc
    for row in rows:
        if row[KEY_ERROR] is not None:
            yield {"error": row[KEY_ERROR]}
        else:
            yield {
                "record_key": row[RECORD_KEY],
                "partition_path": row[PARTITION_PATH],
                "bucket": row[BUCKET],
            }


def render(results: Iterable[dict[str, Any]]) -> Iterator[str]:
    for result in results:
        yield json.dumps(result, ensure_ascii=False)


def parse_properties(pairs: tuple[str, ...]) -> dict[str, str]:
    """`-p KEY=VALUE` options as a mapping; a later KEY wins, as on Hudi's command line."""
    props: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"-p {pair!r}: expected KEY=VALUE, e.g. {hudi_props.RECORD_KEY}=id")
        props[key.strip()] = value.strip()
    return props


def target_from_properties(
    props: Mapping[str, str], buckets: int | None = None
) -> tuple[Target, int | None]:
    """The Target that Hudi properties describe, and its bucket count (None when neither
    `buckets` nor hoodie.bucket.index.num.buckets gives one)."""
    keygen_props = {k: v for k, v in props.items() if k not in hudi_props.INDEX_PROPERTIES}
    problems: list[str] = []

    def report(path: tuple[str | int, ...], message: str) -> None:
        at = f"-p {path[-1]}" if path[:2] == ("key_generator", "properties") else "-p"
        problems.append(f"{at}: {message}")

    keygen = resolve_key_generator({"key_generator": {"properties": keygen_props}}, report)
    count = buckets
    raw = props.get(hudi_props.NUM_BUCKETS)
    if count is None and raw is not None:
        if not raw.isdigit() or int(raw) < 1:
            problems.append(
                f"-p {hudi_props.NUM_BUCKETS}: expected a positive integer, got {raw!r}"
            )
        else:
            count = int(raw)
    hash_fields = field_list(props.get(hudi_props.HASH_FIELD))
    if keygen is not None:
        for name in hash_fields:
            if name not in keygen.record_key:
                problems.append(
                    f"-p {hudi_props.HASH_FIELD}: '{name}' is not a record key field "
                    f"{list(keygen.record_key)} (Hudi: the hash field must be a subset of it)"
                )
    if problems or keygen is None:
        raise UserError("\n".join(problems))
    index = IndexSpec(buckets=count or 1, hash_fields=hash_fields or keygen.record_key)
    return Target(path="", operation="upsert", key_generator=keygen, index=index), count
