"""Spark's Kafka and Avro connectors: jars pyspark does not ship, from Maven Central.

A `kafka` source reads through Spark's own Kafka connector (spark-sql-kafka-0-10, with
kafka-clients, the token provider and commons-pool2); Avro values decode with spark-avro's
`from_avro`. The kafka kind asks for them (runner/sources/kinds/kafka.py). They are found,
first match wins:
- on Spark's classpath already: the image links docker/jars/ into pyspark's `jars/`
  (`runner fetch-jars --into docker/jars` before `docker build`);
- in the jar cache (runner/jvm/maven.py), where `runner fetch-jars` puts them, or where the
  first run that needs them copies them (a few MB, with `mvn`).

The other jars kafka-clients depends on (lz4, snappy, zstd, slf4j) ship with pyspark, so
only these are added: two copies of a library on one classpath replace each other's classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from runner.errors import EnvironmentProblem
from runner.jvm.maven import cache_root, complete, copy_into, ensure_jars
from runner.jvm.s3_connector import spark_jar_dir

# The connector versions for each pyspark version the runner installs with (pyproject.toml),
# and the kafka-clients and commons-pool2 its Kafka connector was built with (spark-parent's
# pom).
_VERSIONS = {
    "4.2.0": {
        "kafka": "4.2.0",
        "kafka-clients": "3.9.2",
        "commons-pool2": "2.13.1",
        "avro": "4.2.0",
    },
}
FETCH_COMMAND = "runner fetch-jars"


@dataclass(frozen=True)
class Connector:
    name: str  # what `runner fetch-jars --connector` calls it
    title: str  # for messages
    coordinates: tuple[str, ...]
    marker: str  # the prefix of its main jar's file name, to find it on Spark's classpath

    @property
    def cache_dir(self) -> Path:
        version = self.coordinates[0].rsplit(":", 1)[1]
        return cache_root() / f"{self.name}-{version}"

    def describe(self) -> str:
        return f"{self.title} ({', '.join(c.split(':', 1)[1] for c in self.coordinates)})"

    def on_spark_classpath(self) -> bool:
        return any(spark_jar_dir().glob(f"{self.marker}*.jar"))

    def cached_jars(self) -> list[str] | None:
        return complete(self.cache_dir, self.coordinates)

    def jars(self, needed_by: str, under_spark_submit: bool) -> list[str]:
        """The jars to add to a session about to start ([] when Spark has them, or under
        spark-submit, whose classpath is set), fetched into the cache on first use."""
        if under_spark_submit or self.on_spark_classpath():
            return []
        found = self.cached_jars()
        if found is not None:
            return found
        try:
            return ensure_jars(self.cache_dir.name, self.coordinates)
        except EnvironmentProblem as exc:
            raise EnvironmentProblem(
                f"{needed_by} needs {self.describe()}, which is neither among pyspark's jars "
                f"nor in {self.cache_dir}, and fetching it failed: {exc}. Run "
                f"`{FETCH_COMMAND}` where Maven Central is reachable (for an image: "
                f"`{FETCH_COMMAND} --into docker/jars` before `docker build`)"
            ) from exc


@cache
def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def _versions() -> dict[str, str]:
    found = _VERSIONS.get(spark_version())
    if found is None:
        raise EnvironmentProblem(
            f"pyspark is {spark_version()}, and the runner knows the Kafka and Avro connectors "
            f"of Spark {', '.join(_VERSIONS)} only: put spark-sql-kafka-0-10_2.13 (with "
            "kafka-clients, spark-token-provider-kafka-0-10_2.13 and commons-pool2) and "
            "spark-avro_2.13 of your Spark version into pyspark's jars/ directory"
        )
    return found


def kafka() -> Connector:
    v = _versions()
    return Connector(
        name="spark-kafka",
        title="Spark's Kafka connector",
        coordinates=(
            f"org.apache.spark:spark-sql-kafka-0-10_2.13:{v['kafka']}",
            f"org.apache.spark:spark-token-provider-kafka-0-10_2.13:{v['kafka']}",
            f"org.apache.kafka:kafka-clients:{v['kafka-clients']}",
            f"org.apache.commons:commons-pool2:{v['commons-pool2']}",
        ),
        marker="spark-sql-kafka-0-10_",
    )


def avro() -> Connector:
    return Connector(
        name="spark-avro",
        title="Spark's Avro connector",
        coordinates=(f"org.apache.spark:spark-avro_2.13:{_versions()['avro']}",),
        marker="spark-avro_",
    )


def fetch(connector: Connector, into: Path | None = None) -> list[str]:
    """The connector's jars in the cache (fetched when missing), and copied into `into`."""
    jars = ensure_jars(connector.cache_dir.name, connector.coordinates)
    return copy_into(jars, into) if into else jars
