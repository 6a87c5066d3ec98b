"""Where a table's files live and how to reach them: a local (or mounted) directory, or S3.

Every read, write, listing and removal of a table's files goes through a `TableLocation`:
a pyarrow file system and root for the parquet files, delta-rs storage options for the log.
The settings of an object store come from the driver's environment, with the standard names
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL,
AWS_ALLOW_HTTP, and delta-rs' own AWS_S3_LOCKING_PROVIDER, AWS_S3_ALLOW_UNSAFE_RENAME...).

The driver resolves them once and ships them inside the jobs it hands to the executors:
Spark's Python workers get their environment when the session starts, so a variable set
later (or set only where the driver runs) would not reach them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from runner.errors import EnvironmentProblem
from runner.spec.secrets import resolve

S3_SCHEMES = ("s3", "s3a")
# Read from the environment for an S3 table; the names delta-rs' storage options take.
S3_SETTINGS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ALLOW_HTTP",
    "AWS_S3_LOCKING_PROVIDER",
    "DELTA_DYNAMO_TABLE_NAME",
    "AWS_S3_ALLOW_UNSAFE_RENAME",
)
# Kept out of logs and error messages (see runner.spec.secrets.scrub).
_SECRET_SETTINGS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def scheme(uri: str) -> str:
    """The URI's scheme, "" for a plain path."""
    return urlparse(uri).scheme.lower() if "://" in uri else ""


def is_local(uri: str) -> bool:
    """A path on a local or mounted file system (plain path or file: URI)."""
    return scheme(uri) in ("", "file")


def local_path(uri: str) -> str | None:
    """The local path of a file: URI or plain path; None for an object store URI."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    if "://" not in uri:
        return uri
    return None


@dataclass(frozen=True)
class TableLocation:
    """A table's URI and the object store settings to reach it; picklable, for executors."""

    uri: str
    settings: Mapping[str, str] = field(default_factory=dict, repr=False)  # holds credentials
    # a dry run's: new files go to this directory of the same store, never under the table
    scratch: str | None = None

    @property
    def is_local(self) -> bool:
        return is_local(self.uri)

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """A pyarrow file system and the table's root in it (no trailing slash)."""
        fs, root = self._filesystem()
        if self.scratch is None:
            return fs, root
        from runner.storage.dry_run import RedirectedWrites

        return pafs.PyFileSystem(RedirectedWrites(fs, root, self.scratch)), root

    def _filesystem(self) -> tuple[pafs.FileSystem, str]:
        kind = scheme(self.uri)
        if kind == "":
            return pafs.LocalFileSystem(), os.path.abspath(self.uri).rstrip("/") or "/"
        if kind == "file":
            return pafs.LocalFileSystem(), urlparse(self.uri).path.rstrip("/") or "/"
        if kind in S3_SCHEMES:
            parsed = urlparse(self.uri)
            return self._s3(), f"{parsed.netloc}{parsed.path}".rstrip("/")
        # another store pyarrow knows (gs://, abfs://): its own environment settings apply
        fs, root = pafs.FileSystem.from_uri(self.uri)
        return fs, root.rstrip("/")

    def dry_run(self, instant: str) -> TableLocation:
        """This table as a dry run sees it: its files read where they are, new ones
        written to a scratch directory beside it (runner/storage/dry_run.py)."""
        from runner.storage.dry_run import scratch_root

        return replace(self, scratch=scratch_root(self._filesystem()[1], instant))

    def remove_scratch(self) -> None:
        """Remove a dry run's scratch directory and what it holds."""
        if self.scratch is not None:
            fs, _ = self._filesystem()
            if fs.get_file_info(self.scratch).type != pafs.FileType.NotFound:
                fs.delete_dir(self.scratch)
            parent = self.scratch.rsplit("/", 1)[0]  # the last dry run's leaves none behind
            exists = fs.get_file_info(parent).type != pafs.FileType.NotFound
            if exists and not fs.get_file_info(pafs.FileSelector(parent, allow_not_found=True)):
                fs.delete_dir(parent)

    def storage_options(self) -> dict[str, str] | None:
        """delta-rs storage options (None: delta-rs' defaults and its own reading of the
        environment)."""
        return dict(self.settings) or None

    def s3_client(self) -> Any:
        """A boto3 S3 client with the same settings (for what pyarrow cannot do: the
        conditional put that publishes a log entry, runner/delta/log_entry.py)."""
        import boto3

        s = self.settings
        options = {
            "region_name": s.get("AWS_REGION"),
            "endpoint_url": s.get("AWS_ENDPOINT_URL"),
            "aws_access_key_id": s.get("AWS_ACCESS_KEY_ID"),
            "aws_secret_access_key": s.get("AWS_SECRET_ACCESS_KEY"),
            "aws_session_token": s.get("AWS_SESSION_TOKEN"),
        }
        return boto3.client("s3", **{k: v for k, v in options.items() if v})

    def _s3(self) -> pafs.S3FileSystem:
        s = self.settings
        options: dict[str, Any] = {"region": s.get("AWS_REGION")}
        if s.get("AWS_ACCESS_KEY_ID"):
            options.update(
                access_key=s["AWS_ACCESS_KEY_ID"],
                secret_key=s.get("AWS_SECRET_ACCESS_KEY"),
                session_token=s.get("AWS_SESSION_TOKEN"),
            )
        endpoint = s.get("AWS_ENDPOINT_URL")
        if endpoint:
            parsed = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
            options.update(scheme=parsed.scheme, endpoint_override=parsed.netloc + parsed.path)
        return pafs.S3FileSystem(**{k: v for k, v in options.items() if v is not None})


def locate(uri: str, environ: Mapping[str, str] | None = None) -> TableLocation:
    """The table at `uri` with its object store settings from the environment."""
    if scheme(uri) not in S3_SCHEMES:
        return TableLocation(uri)
    env = os.environ if environ is None else environ
    settings = {name: env[name] for name in S3_SETTINGS if env.get(name)}
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        settings["AWS_REGION"] = region
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        settings["AWS_ENDPOINT_URL"] = endpoint
        # an http:// endpoint (MinIO, a local test server) says plain HTTP is meant
        if endpoint.startswith("http://"):
            settings.setdefault("AWS_ALLOW_HTTP", "true")
    for name in _SECRET_SETTINGS:
        if name in settings:
            resolve(f"${{env:{name}}}", env)  # registers the value for scrubbing
    return TableLocation(uri, settings)


# What a file system says when it cannot take a write, in any layer's error text (a Python
# worker's OSError inside a Spark failure, delta-rs' IO error, the driver's own).
_CANNOT_WRITE = re.compile(
    r"No space left on device|Read-only file system|Permission denied|Disk quota exceeded"
)


@contextmanager
def writing(uri: str) -> Iterator[None]:
    """Turn a failure of the storage under `uri` to take a write into one clear line,
    whichever layer hit it (exit 1: the run failed, the table is as it was)."""
    try:
        yield
    except EnvironmentProblem:
        raise
    except Exception as exc:
        found = _CANNOT_WRITE.search(str(exc))
        if found is None:
            raise
        raise EnvironmentProblem(
            f"cannot write under {uri}: {found[0]}; nothing was committed, the table is as "
            "it was: free space or fix the permissions, then run again"
        ) from exc


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """A pyarrow file system and root for the table at `uri`, settings from the environment."""
    return locate(uri).filesystem()


def storage_options(uri: str) -> dict[str, str] | None:
    """delta-rs storage options for the table at `uri`, from the environment."""
    return locate(uri).storage_options()
