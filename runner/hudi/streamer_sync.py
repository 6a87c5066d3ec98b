"""HoodieStreamer's catalog sync as `target.catalog`: `--enable-sync` (or `--enable-hive-sync`,
`hoodie.datasource.meta.sync.enable`, `hoodie.datasource.hive_sync.enable`) with the sync
tools of `--sync-tool-classes` (`hoodie.meta.sync.client.tool.class`; Hudi's default is
HiveSyncTool), the names of `hoodie.datasource.hive_sync.database` and `.table` (Hudi's
HoodieSyncConfig: `default`, and the table's name), the Glue sync tool's
`hoodie.aws.glue.region` and `hoodie.aws.glue.endpoint` (Hudi's HoodieAWSConfig), and
HiveSyncTool's `hoodie.datasource.hive_sync.metastore.uris` (Hudi's HiveSyncConfig:
`thrift://localhost:9083`).

AWS Glue becomes target.catalog type glue, HiveSyncTool type hive: the runner registers
through the metastore's Thrift API whatever Hudi's sync mode (hms, jdbc, hiveql) was.
"""

from __future__ import annotations

import re
from typing import Any

from runner.errors import UserError
from runner.hudi.streamer_job import Job

GLUE_TOOL = "org.apache.hudi.aws.sync.AwsGlueCatalogSyncTool"
HIVE_TOOL = "org.apache.hudi.hive.HiveSyncTool"
SYNC_PROPERTY = re.compile(
    r"^hoodie\.(datasource\.hive_sync|datasource\.meta\.sync|meta\.sync|meta_sync)\."
)
_ENABLE = ("hoodie.datasource.meta.sync.enable", "hoodie.datasource.hive_sync.enable")
_NAME = re.compile(r"^[a-z0-9_]{1,255}$")
_URIS = "hoodie.datasource.hive_sync.metastore.uris"
_URI = re.compile(r"^thrift://[^\s/:]+:[0-9]{1,5}$")
_CREDENTIALS = {
    "hoodie.aws.access.key": "AWS_ACCESS_KEY_ID",
    "hoodie.aws.secret.key": "AWS_SECRET_ACCESS_KEY",
    "hoodie.aws.session.token": "AWS_SESSION_TOKEN",
}


def catalog_sync(job: Job, table_name: str) -> dict[str, Any] | None:
    """target.catalog from the job's sync settings; None when it syncs to no catalog the
    runner registers in. Every sync setting is noted, mapped or not."""
    tools, turned_on = _tools(job)
    catalog = None
    if GLUE_TOOL in tools:
        catalog = _glue(job, table_name)
        if HIVE_TOOL in tools:
            job.out.skipped.append((HIVE_TOOL, "one catalog per table: AWS Glue's is imported"))
    elif HIVE_TOOL in tools:
        catalog = _hive(job, table_name)
    for tool in sorted(tools - {GLUE_TOOL, HIVE_TOOL}):
        job.out.skipped.append(
            (tool, "no equivalent: target.catalog registers in AWS Glue or a Hive Metastore")
        )
    if catalog is not None:
        job.out.mapped.append((turned_on, "target.catalog (registered after each commit)"))
        why = (
            "the catalog entry is made from the Delta table (its columns, location and Delta "
            "parameters); Hudi's partition, format and sync-mode settings do not apply"
        )
    elif tools:
        job.out.skipped.append(
            (turned_on, "syncs to a catalog the runner does not register in yet (see the tool)")
        )
        why = "read by a sync tool that is not imported (see the tool)"
    else:
        why = "catalog sync is off (--enable-sync, hoodie.datasource.meta.sync.enable)"
    for key in sorted(job.props):
        if SYNC_PROPERTY.match(key) and key not in job.used:
            job.used.add(key)
            job.out.skipped.append((key, why))
    return catalog


def _tools(job: Job) -> tuple[set[str], str]:
    """The sync tools the job runs (none when sync is off), and what turned sync on."""
    flags = [f for f in ("--enable-sync", "--enable-hive-sync") if job.flags.get(f) == "true"]
    job.used.update(flags)
    enabled = job.prop(*_ENABLE)
    named = job.setting(["--sync-tool-classes"], "hoodie.meta.sync.client.tool.class")
    if not flags and not (enabled and enabled[1].lower() == "true"):
        job.skip(named, "catalog sync is off (--enable-sync, hoodie.datasource.meta.sync.enable)")
        return set(), ""
    tools = {t.strip() for t in named[1].split(",") if t.strip()} if named else {HIVE_TOOL}
    if "--enable-hive-sync" in flags:
        tools.add(HIVE_TOOL)  # HoodieStreamer adds HiveSyncTool for the old flag
    return tools, flags[0] if flags else enabled[0] if enabled else ""


def _names(job: Job, table_name: str) -> tuple[str, str]:
    """(database, table) as Hudi's sync names them: `default`, and the table's name."""
    found = []
    for suffix, default in (("database", "default"), ("table", table_name)):
        setting = job.prop(f"hoodie.datasource.hive_sync.{suffix}")
        key, value = setting or (f"(Hudi's default {suffix})", re.sub(r"\W", "_", default))
        name = value.lower()
        if not _NAME.match(name):
            raise UserError(
                f"{key}={value}: a catalog {suffix} name is lowercase letters, digits and _ "
                "(as Athena and the Hive Metastore keep it); set one with --set"
            )
        found.append((key, name))
        job.out.mapped.append((key, f"target.catalog.{suffix}"))
    return found[0][1], found[1][1]


def _glue(job: Job, table_name: str) -> dict[str, Any]:
    database, table = _names(job, table_name)
    catalog: dict[str, Any] = {"type": "glue", "database": database, "table": table}
    job.out.mapped.append((GLUE_TOOL, "target.catalog.type glue"))
    for key, field in (
        ("hoodie.aws.glue.region", "region"),
        ("hoodie.aws.glue.endpoint", "endpoint_url"),
    ):
        found = job.prop(key)
        if found:
            catalog[field] = found[1]
            job.out.mapped.append((key, f"target.catalog.{field}"))
    for key, variable in _CREDENTIALS.items():
        if job.prop(key):
            job.out.skipped.append((key, f"a secret: set {variable} (boto3 reads it)"))
            job.out.env.append((variable, f"what {key} held"))
    return catalog


def _hive(job: Job, table_name: str) -> dict[str, Any]:
    database, table = _names(job, table_name)
    job.out.mapped.append((HIVE_TOOL, "target.catalog.type hive"))
    found = job.prop(_URIS)
    key, uris = found or (f"(Hudi's default {_URIS})", "thrift://localhost:9083")
    uri, *others = (u.strip() for u in uris.split(","))
    if not _URI.match(uri):
        raise UserError(
            f"{key}={uris}: the runner registers through one metastore's Thrift URI, "
            "thrift://host:port; set one with --set"
        )
    job.out.mapped.append((key, "target.catalog.uri" + (" (the first URI)" if others else "")))
    return {"type": "hive", "uri": uri, "database": database, "table": table}
