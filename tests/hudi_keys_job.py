"""Hudi 1.1.1's keys for the records of tests/spark/test_keygen_hudi.py, run by the side
environment's Python (bench/hudi_env.py: pyspark 3.5 and Hudi's Spark bundle):

    <side venv>/bin/python -I tests/hudi_keys_job.py < plan.json

It imports only pyspark and the standard library. The plan (JSON): jar, and cases, each
{name, props, schema (a DDL string), lines (JSON records)}. One local SparkSession, in UTC
(its JVM too: java.sql.Timestamp prints in the JVM's zone), reads each case's lines with its
schema, as `runner keys` does, and asks Hudi's own key generator, made by
HoodieSparkKeyGeneratorFactory from the case's properties, for each record's key, both ways
Hudi writes one:
- "row": getRecordKey/getPartitionPath(InternalRow, schema), the row writer of bulk_insert;
- "avro": getKey(GenericRecord) of the record converted to Avro as Hudi's Spark writer
  converts it (AvroConversionUtils), the path of insert and upsert.
Each is [record key, partition path], or {"error": the innermost Java message}. Prints one
JSON object, {case name: [{"row": ..., "avro": ...} per line]}, as stdout's last line.
"""

from __future__ import annotations

import json
import sys


def start_session(jar: str):
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[1]").appName("hudi-keys")
    conf = {
        "spark.jars": jar,
        # UTC: java.sql.Timestamp prints in the JVM's zone. A short job: the quick JIT
        # tier alone and the serial collector cut its time (19 s to 14 s on two cores)
        "spark.driver.extraJavaOptions": (
            "-Duser.timezone=UTC -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
        ),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "1",
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def innermost(exc: Exception) -> dict[str, str]:
    """The message of the innermost cause of a Java exception, as {"error": ...}."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return {"error": f"{type(exc).__name__}: {exc}"}
    while java.getCause() is not None:
        java = java.getCause()
    return {"error": f"{java.getClass().getSimpleName()}: {java.getMessage()}"}


def parsed(spark, lines: list[str], schema: str):
    """The JSON lines read with the DDL schema by Spark's JSON parser, as `runner keys`
    reads them, within the JVM (no Python worker: from_json over a local relation)."""
    from pyspark.sql import functions as F

    text = spark.createDataFrame([(line,) for line in lines], "value string")
    record = F.from_json("value", schema, {"mode": "FAILFAST"})
    return text.select(record.alias("r")).select("r.*")


def keys_of(spark, case: dict) -> list[dict]:
    jvm = spark._jvm
    props = jvm.org.apache.hudi.common.config.TypedProperties()
    for key, value in case["props"].items():
        props.setProperty(key, value)
    factory = jvm.org.apache.hudi.keygen.factory.HoodieSparkKeyGeneratorFactory
    generator = factory.createKeyGenerator(props)
    frame = parsed(spark, case["lines"], case["schema"])
    schema = frame._jdf.schema()
    convert = jvm.org.apache.hudi.AvroConversionUtils
    avro_schema = convert.convertStructTypeToAvroSchema(schema, "record", "hudi_keys")
    to_avro = convert.createInternalRowToAvroConverter(schema, avro_schema, False)
    out = []
    # executeCollect copies each row (a plain collect of toRdd would reuse one buffer)
    for row in frame._jdf.queryExecution().executedPlan().executeCollect():
        result = {}
        try:
            key = generator.getRecordKey(row, schema).toString()
            result["row"] = [key, generator.getPartitionPath(row, schema).toString()]
        except Exception as exc:  # Hudi refuses this record on this path
            result["row"] = innermost(exc)
        try:
            hoodie_key = generator.getKey(to_avro.apply(row))
            result["avro"] = [hoodie_key.getRecordKey(), hoodie_key.getPartitionPath()]
        except Exception as exc:
            result["avro"] = innermost(exc)
        out.append(result)
    return out


def main() -> None:
    plan = json.load(sys.stdin)
    spark = start_session(plan["jar"])
    try:
        results = {}
        for case in plan["cases"]:
            try:
                results[case["name"]] = keys_of(spark, case)
            except Exception as exc:  # the generator itself refused the properties
                results[case["name"]] = innermost(exc)
    finally:
        spark.stop()
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
