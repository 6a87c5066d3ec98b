"""`runner keys`: where records would go, through the same key columns as `runner run`.

With a spec whose table exists, the buckets follow the table's layout (its counts, grown
by `runner expand`, and its buckets split alone), as the spec's next run would write them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import structlog
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from runner.delta.snapshot import open_table
from runner.errors import UserError
from runner.hudi import properties as hudi_props
from runner.index.layout import BUCKETS, BucketLayout
from runner.jvm.session import spark_session
from runner.pipeline.key_columns import KEY_ERROR, add_key_columns
from runner.pipeline.open_key import keyed_spec
from runner.spec import load_spec
from runner.spec.keygen_settings import field_list, resolve_key_generator
from runner.spec.model import IndexSpec, SparkSettings, Target
from runner.spec.secrets import scrub
from runner.storage.meta_columns import BUCKET, PARTITION_PATH, RECORD_KEY

ORDER = "__runner_line"

log = structlog.get_logger(__name__)


def key_lines(
    spec: str | None,
    properties: tuple[str, ...],
    records: Path,
    schema: str | None,
    buckets: int | None,
) -> Iterator[str]:
    """`runner keys`: one JSON line per record, for a spec file or for Hudi properties
    (-p; give one of the two). `buckets` previews another bucket count; else a spec's
    buckets are its table's layout (the spec's count before the first run); with
    properties and no count anywhere, the bucket is null."""
    layout: BucketLayout | None
    if spec:
        pipeline = keyed_spec(load_spec(spec))
        target, settings, name = pipeline.target, pipeline.spark, pipeline.name
        layout = BucketLayout(buckets) if buckets else table_layout(target)
    else:
        target, count = target_from_properties(parse_properties(properties), buckets)
        settings, name = SparkSettings(), "properties"
        layout = BucketLayout(count) if count else None
    spark = spark_session(settings, f"{name}-keys")
    results = preview_keys(spark, target, records, schema, layout)
    return render(
        r if "error" in r or layout is not None else {**r, "bucket": None} for r in results
    )


def table_layout(target: Target) -> BucketLayout:
    """The bucket layout of the spec's table, or the spec's count when there is no runner
    table there yet (or it cannot be read: a warning says so)."""
    try:
        snapshot = open_table(target.path)
    except Exception as exc:  # whatever the store says: the preview still runs
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        log.warning("keys_table_unread", table=target.path, error=scrub(first))
        snapshot = None
    if snapshot is None or BUCKETS not in snapshot.configuration:
        return BucketLayout(target.index.buckets)
    return BucketLayout.from_configuration(snapshot.configuration)


def preview_keys(
    spark: SparkSession,
    target: Target,
    records: Path,
    schema: str | None = None,
    layout: BucketLayout | None = None,
) -> Iterator[dict[str, Any]]:
    """One dict per JSON-lines record, in input order: its key, partition path and bucket
    (by `layout`; default: the spec's count), or the reason it cannot be keyed."""
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
    # numbered once keyed, so that a field missing from the records is not looked up among
    # columns that list ORDER; keying adds columns only: the one partition keeps line order
    keyed = add_key_columns(parsed, target, layout)
    keyed = keyed.withColumn(ORDER, F.monotonically_increasing_id()).orderBy(ORDER)
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
