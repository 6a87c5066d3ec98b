"""Table locations: local paths and S3 URIs, settings from an environment, nothing leaked."""

from __future__ import annotations

import pickle

import pyarrow.fs as pafs

from runner.spec.secrets import scrub
from runner.storage.location import is_local, locate

ENV = {
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "very-secret-key-value",
    "AWS_DEFAULT_REGION": "eu-west-1",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
    "HOME": "/root",
}


def test_local_paths_need_no_settings(tmp_path):
    for uri in (str(tmp_path / "t"), f"file://{tmp_path}/t/"):
        location = locate(uri, ENV)
        assert location.is_local and location.storage_options() is None
        fs, root = location.filesystem()
        assert isinstance(fs, pafs.LocalFileSystem) and root == str(tmp_path / "t")
    assert not is_local("s3://bucket/t") and not is_local("s3a://bucket/t")


def test_relative_local_path_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert locate("warehouse/t").filesystem()[1] == str(tmp_path / "warehouse" / "t")


def test_s3_settings_come_from_the_environment():
    location = locate("s3://bucket/path/t/", ENV)
    options = location.storage_options()
    assert options == {
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "very-secret-key-value",
        "AWS_REGION": "eu-west-1",  # AWS_DEFAULT_REGION when AWS_REGION is unset
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ALLOW_HTTP": "true",  # an http:// endpoint means plain HTTP
    }
    fs, root = location.filesystem()
    assert isinstance(fs, pafs.S3FileSystem) and root == "bucket/path/t"
    assert fs.region == "eu-west-1"


def test_explicit_settings_win_and_https_endpoints_stay_https():
    env = ENV | {
        "AWS_REGION": "us-east-2",
        "AWS_ENDPOINT_URL": "https://s3.example.com",
        "AWS_ENDPOINT_URL_S3": "https://storage.example.com",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
    }
    options = locate("s3a://bucket/t", env).storage_options()
    assert options is not None
    assert options["AWS_REGION"] == "us-east-2"
    assert options["AWS_ENDPOINT_URL"] == "https://storage.example.com"
    assert options["AWS_S3_ALLOW_UNSAFE_RENAME"] == "true"
    assert "AWS_ALLOW_HTTP" not in options


def test_credentials_travel_pickled_but_are_never_shown():
    location = locate("s3://bucket/t", ENV)
    assert pickle.loads(pickle.dumps(location)) == location  # shipped to executors in jobs
    assert "very-secret" not in repr(location)
    assert scrub("error: key very-secret-key-value refused") == (
        "error: key ${env:AWS_SECRET_ACCESS_KEY} refused"
    )


def test_rows_conformed_to_the_file_schema_keep_none_of_a_footer_s_entries():
    # rows read from a data file carry its footer's key-value entries (a key filter,
    # tombstones); conformed to the table's schema they carry the schema's, so a table read
    # out with `runner read` does not pass them on
    import pyarrow as pa

    from runner.storage.parquet_file import conform

    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    read = pa.table({"id": [1], "name": ["a"]}).replace_schema_metadata({"runner.key_filter": "x"})
    assert conform(read, schema).schema.metadata is None
    shuffled = read.select(["name", "id"])  # the other path: columns put in order
    assert conform(shuffled, schema).schema.metadata is None
    assert conform(shuffled, schema).column_names == ["id", "name"]
