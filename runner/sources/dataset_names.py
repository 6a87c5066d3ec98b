"""OpenLineage dataset names of paths (https://openlineage.io/docs/spec/naming): `file`
and an absolute path for a local file or table, `s3://bucket` and the key for an object
store. A URI's `user:password@` is dropped; each source kind names its own datasets
(runner/sources/kinds/), a path source and the target with `path_dataset`."""

from __future__ import annotations

from urllib.parse import unquote, urlparse

Dataset = tuple[str, str]  # (namespace, name)

# An object store names a dataset by its object key (no leading slash); HDFS and local file
# systems by the absolute path (the naming spec; openlineage-python's naming helpers).
_ROOTED_SCHEMES = ("hdfs",)
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}


def path_dataset(path: str) -> Dataset:
    """A file, directory, glob or table path: `file` and the path when local, else the URI's
    scheme and authority, and the path under it."""
    if "://" not in path:
        return "file", path
    parsed = urlparse(path)
    scheme = parsed.scheme.lower()
    if scheme == "file":
        return "file", unquote(parsed.path)
    scheme = _SCHEME_ALIASES.get(scheme, scheme)
    name = parsed.path if scheme in _ROOTED_SCHEMES else parsed.path.lstrip("/")
    return f"{scheme}://{without_credentials(parsed.netloc)}", name or "/"


def without_credentials(authority: str) -> str:
    """An authority without `user:password@` (an Azure `container@account` stays)."""
    userinfo, at, host = authority.rpartition("@")
    return host if at and ":" in userinfo else authority
