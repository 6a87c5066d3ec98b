"""Spark's S3 connector: Hadoop's `hadoop-aws` and the AWS SDK bundle it was built with.

pyspark ships no S3 file system, so Spark reads `s3://` (file sources, Delta sources, a
table's files for bucket expansion) only with these jars on its classpath. They are found,
first match wins:
- on Spark's classpath already: the image links them into pyspark's `jars/`;
- in the jar cache (runner/jvm/maven.py), where `runner fetch-jars` puts them.

The SDK bundle carries unshaded copies of libraries pyspark has too (netty, slf4j, Apache
HttpClient...). Next to Spark's own jars on the classpath they would replace some of
Spark's classes (Spark's logging goes silent), so the fetched bundle is rewritten without
the packages pyspark's jars already hold.

Settings come from the same environment as a table's (runner/storage/location.py, passed in as
its settings mapping) and go into Hadoop's configuration, which Spark sends to the
executors with each scan: the executors need no credentials of their own.
"""

from __future__ import annotations

import shutil
import zipfile
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from runner.errors import EnvironmentProblem
from runner.jvm.maven import cache_root, complete, copy_into, ensure_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# hadoop-aws must match Spark's Hadoop exactly; the SDK is the one hadoop-aws was built with
# (hadoop-project's pom, aws-java-sdk-v2.version), and so is Amazon's Analytics Accelerator
# Library, which S3A loads as it opens a file system since Hadoop 3.4.2
# (amazon-s3-analyticsaccelerator-s3.version).
SDK_FOR_HADOOP = {"3.5.0": "2.35.4"}
ACCELERATOR_FOR_HADOOP = {"3.5.0": "1.3.1"}
S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"
FETCH_COMMAND = "runner fetch-jars"


def spark_jar_dir() -> Path:
    """pyspark's `jars/`, the classpath of every Spark process it starts (no JVM needed)."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


@cache
def hadoop_version() -> str:
    """The Hadoop version pyspark was built with, from its hadoop-client-api jar."""
    for jar in sorted(spark_jar_dir().glob("hadoop-client-api-*.jar")):
        return jar.name[len("hadoop-client-api-") : -len(".jar")]
    raise EnvironmentProblem(f"no hadoop-client-api jar in {spark_jar_dir()}: a broken pyspark?")


def coordinates() -> tuple[str, str, str]:
    hadoop = hadoop_version()
    sdk = SDK_FOR_HADOOP.get(hadoop)
    if sdk is None:
        raise EnvironmentProblem(
            f"pyspark's Hadoop is {hadoop}, and the runner knows the AWS SDK for Hadoop "
            f"{', '.join(SDK_FOR_HADOOP)} only: put hadoop-aws-{hadoop}.jar and the AWS SDK "
            "bundle and analyticsaccelerator-s3 its pom names into pyspark's jars/ directory"
        )
    return (
        f"org.apache.hadoop:hadoop-aws:{hadoop}",
        f"software.amazon.awssdk:bundle:{sdk}",
        "software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:"
        + ACCELERATOR_FOR_HADOOP[hadoop],
    )


def describe() -> str:
    aws, sdk, _ = coordinates()
    return f"hadoop-aws {aws.rsplit(':', 1)[1]} with the AWS SDK bundle {sdk.rsplit(':', 1)[1]}"


def cache_dir() -> Path:
    return cache_root() / f"hadoop-aws-{hadoop_version()}"


def on_spark_classpath() -> bool:
    return any(spark_jar_dir().glob("hadoop-aws-*.jar"))


def connector_jars() -> list[str] | None:
    """Jars to add to spark.jars: [] when Spark has the connector already, None when it
    is nowhere (see missing())."""
    if on_spark_classpath():
        return []
    return complete(cache_dir(), coordinates())


def missing(needed_by: str) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"{needed_by}: Spark reads S3 through Hadoop's S3 connector ({describe()}), which "
        f"is neither among pyspark's jars nor in {cache_dir()}. Run `{FETCH_COMMAND}` once "
        "(it copies them from Maven Central, about 650 MB, and needs `mvn`); for the image, "
        "`runner fetch-jars --into docker/jars` before `docker build`"
    )


def jars_to_add(needed_by: str, under_spark_submit: bool) -> list[str]:
    """The connector's jars for a session about to start; under spark-submit the classpath
    is set already ([]: enable() checks it)."""
    if under_spark_submit:
        return []
    jars = connector_jars()
    if jars is None:
        raise missing(needed_by)
    return jars


def enable(spark: SparkSession, settings: Mapping[str, str], needed_by: str) -> None:
    """Point the session's Hadoop configuration at S3 with `settings`; refuses when the
    connector is not on its classpath (a session started without it)."""
    jvm = spark.sparkContext._jvm
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in hadoop_conf(settings).items():
        hadoop.set(key, value)
    try:
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass("s3a", hadoop)  # type: ignore[union-attr]
    except Exception as exc:  # Py4JJavaError: ClassNotFoundException, UnsupportedFileSystem
        raise missing(needed_by) from exc


def fetch(into: Path | None = None) -> list[str]:
    """Copy the connector into the cache (when not there yet) and, with `into`, from there
    into that directory too (docker/jars/ for an image build); the paths in the last."""
    jars = ensure_jars(cache_dir().name, coordinates(), prepare=_drop_spark_packages)
    return copy_into(jars, into) if into else jars


def _spark_packages() -> set[str]:
    """The packages (directories of class files) pyspark's own jars hold."""
    packages: set[str] = set()
    for jar in spark_jar_dir().glob("*.jar"):
        with zipfile.ZipFile(jar) as z:
            packages.update(n.rsplit("/", 1)[0] for n in z.namelist() if n.endswith(".class"))
    return packages


def _drop_spark_packages(staging: Path) -> None:
    """Rewrite the SDK bundle without the packages pyspark's jars have."""
    bundle = next(staging.glob("bundle-*.jar"))
    spark = _spark_packages()
    slim = bundle.with_suffix(".slim")
    with (
        zipfile.ZipFile(bundle) as src,
        zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as out,
    ):
        for info in src.infolist():
            if info.filename.endswith(".class") and info.filename.rsplit("/", 1)[0] in spark:
                continue
            with src.open(info) as data, out.open(info, "w") as copy:
                shutil.copyfileobj(data, copy, 1 << 20)
    slim.replace(bundle)


def hadoop_conf(settings: Mapping[str, str]) -> dict[str, str]:
    """Hadoop settings for S3A from a table location's object store settings (the names
    delta-rs takes: AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL...). `s3://` maps to S3A as well,
    so a URI reads the same in Spark, pyarrow and delta-rs."""
    conf = {"fs.s3.impl": S3A, "fs.s3a.impl": S3A}
    if settings.get("AWS_ACCESS_KEY_ID"):
        conf["fs.s3a.access.key"] = settings["AWS_ACCESS_KEY_ID"]
        conf["fs.s3a.secret.key"] = settings.get("AWS_SECRET_ACCESS_KEY", "")
        if settings.get("AWS_SESSION_TOKEN"):
            conf["fs.s3a.session.token"] = settings["AWS_SESSION_TOKEN"]
            conf["fs.s3a.aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
            )
    # else: S3A's default chain (environment, web identity, instance or pod role)
    if settings.get("AWS_REGION"):
        conf["fs.s3a.endpoint.region"] = settings["AWS_REGION"]
    endpoint = settings.get("AWS_ENDPOINT_URL")
    if endpoint:
        # an S3-compatible store (MinIO, a local test server): addressed by path, not by
        # a bucket host name it cannot resolve
        conf["fs.s3a.endpoint"] = endpoint
        conf["fs.s3a.path.style.access"] = "true"
        conf["fs.s3a.connection.ssl.enabled"] = str(endpoint.startswith("https://")).lower()
    return conf
