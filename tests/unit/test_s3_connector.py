"""Spark's S3 connector: which jars, and the S3A settings derived from a table's settings."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from runner.errors import EnvironmentProblem
from runner.jvm import s3_connector


def test_the_versions_follow_pysparks_hadoop():
    hadoop = s3_connector.hadoop_version()
    aws, sdk, accelerator = s3_connector.coordinates()
    assert aws == f"org.apache.hadoop:hadoop-aws:{hadoop}"
    assert sdk == f"software.amazon.awssdk:bundle:{s3_connector.SDK_FOR_HADOOP[hadoop]}"
    version = s3_connector.ACCELERATOR_FOR_HADOOP[hadoop]
    assert (
        accelerator == f"software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:{version}"
    )


def test_keys_endpoint_and_region_become_s3a_settings():
    conf = s3_connector.hadoop_conf(
        {
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
            "AWS_SESSION_TOKEN": "t",
            "AWS_REGION": "eu-west-1",
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        }
    )
    assert conf["fs.s3.impl"] == conf["fs.s3a.impl"] == s3_connector.S3A  # s3:// reads as s3a://
    assert (conf["fs.s3a.access.key"], conf["fs.s3a.secret.key"]) == ("k", "s")
    assert conf["fs.s3a.session.token"] == "t"
    assert conf["fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")
    assert conf["fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["fs.s3a.path.style.access"] == "true"
    assert conf["fs.s3a.connection.ssl.enabled"] == "false"


def test_without_keys_s3a_keeps_its_default_credential_chain():
    conf = s3_connector.hadoop_conf({"AWS_REGION": "us-east-1"})
    assert not any("key" in k or "provider" in k or k == "fs.s3a.endpoint" for k in conf)


def test_a_missing_connector_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_JAR_CACHE", str(tmp_path))
    monkeypatch.setattr(s3_connector, "on_spark_classpath", lambda: False)
    assert s3_connector.connector_jars() is None
    with pytest.raises(EnvironmentProblem, match=r"source 'x'.*`runner fetch-jars`"):
        s3_connector.jars_to_add("source 'x'", under_spark_submit=False)
    assert s3_connector.jars_to_add("source 'x'", under_spark_submit=True) == []


def test_the_bundle_loses_only_packages_pyspark_has(tmp_path, monkeypatch):
    """Classes of a package pyspark's jars hold go (they would shadow Spark's); the SDK's
    own classes and other files stay."""
    spark_jars = tmp_path / "spark"
    spark_jars.mkdir()
    with zipfile.ZipFile(spark_jars / "slf4j-api.jar", "w") as z:
        z.writestr("org/slf4j/Logger.class", b"spark's")
    staging = tmp_path / "staging"
    staging.mkdir()
    with zipfile.ZipFile(staging / "bundle-2.24.6.jar", "w") as z:
        z.writestr("org/slf4j/Logger.class", b"old")
        z.writestr("org/slf4j/helpers/Util.class", b"old, a package pyspark lacks")
        z.writestr("software/amazon/awssdk/S3.class", b"sdk")
        z.writestr("META-INF/services/x", b"service")
    monkeypatch.setattr(s3_connector, "spark_jar_dir", lambda: spark_jars)
    s3_connector._drop_spark_packages(staging)
    with zipfile.ZipFile(staging / "bundle-2.24.6.jar") as z:
        assert sorted(z.namelist()) == [
            "META-INF/services/x",
            "org/slf4j/helpers/Util.class",
            "software/amazon/awssdk/S3.class",
        ]
        assert z.read("software/amazon/awssdk/S3.class") == b"sdk"


def test_fetch_into_copies_the_cached_jars_for_an_image_build(tmp_path, monkeypatch):
    """`runner fetch-jars --into docker/jars`: the jars already in the cache are copied
    (Maven is not run for them)."""
    monkeypatch.setenv("RUNNER_JAR_CACHE", str(tmp_path / "cache"))
    cached = s3_connector.cache_dir()
    cached.mkdir(parents=True)
    for coordinate in s3_connector.coordinates():
        name = f"{coordinate.split(':')[1]}-{coordinate.split(':')[2]}.jar"
        with zipfile.ZipFile(cached / name, "w") as z:
            z.writestr("x.class", name.encode())
    monkeypatch.setattr("shutil.which", lambda _: None)  # no mvn: it must not be needed
    copied = s3_connector.fetch(tmp_path / "docker" / "jars")
    assert sorted(p.rsplit("/", 1)[1] for p in copied) == [
        "analyticsaccelerator-s3-1.3.1.jar",
        "bundle-2.35.4.jar",
        "hadoop-aws-3.5.0.jar",
    ]
    for path in copied:
        assert Path(path).read_bytes() == (cached / Path(path).name).read_bytes()


def test_fetch_jars_check_names_each_connector_and_how_to_fetch_it(tmp_path, monkeypatch):
    """`runner fetch-jars --check --connector ...`: what is cached is listed, what is not is
    named with the command that fetches it (no JVM, nothing fetched)."""
    from click.testing import CliRunner

    from runner.cli import cli
    from runner.jvm import spark_connectors

    monkeypatch.setenv("RUNNER_JAR_CACHE", str(tmp_path))
    avro = spark_connectors.avro()
    avro.cache_dir.mkdir(parents=True)
    for coordinate in avro.coordinates:
        with zipfile.ZipFile(
            avro.cache_dir / f"{coordinate.split(':')[1]}-{coordinate.split(':')[2]}.jar", "w"
        ) as z:
            z.writestr("x.class", b"x")
    result = CliRunner().invoke(
        cli, ["fetch-jars", "--check", "--connector", "kafka", "--connector", "avro"]
    )
    assert result.exit_code != 0
    assert "Spark's Avro connector (spark-avro_2.13:4.2.0): " + str(avro.cache_dir) in result.stdout
    problem = str(result.exception)  # the CLI prints it as its one error line
    assert problem.startswith("Spark's Kafka connector")
    assert problem.endswith("not fetched yet; run `runner fetch-jars --connector kafka`")
    assert not (tmp_path / spark_connectors.kafka().cache_dir.name).exists()
