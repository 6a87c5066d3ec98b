"""`runner keys`: where records would go, through the same key columns as `runner run`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from runner.errors import UserError
from runner.ops.keys import BUCKET, KEY_ERROR, PARTITION_PATH, RECORD_KEY, add_key_columns
from runner.spec.model import Target

ORDER = "__runner_line"


def preview_keys(
    spark: SparkSession,
    target: Target,
    records: Path,
    schema: str | None = None,
    buckets: int | None = None,
) -> Iterator[dict]:
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
    keyed = add_key_columns(numbered, target, buckets).orderBy(ORDER)
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


def render(results: Iterator[dict]) -> Iterator[str]:
    for result in results:
        yield json.dumps(result, ensure_ascii=False)
