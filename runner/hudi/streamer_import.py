"""`runner import-hudi`: a HoodieStreamer job (properties file and command line) as a spec.

Each property and flag is either mapped to a spec field, or listed as not imported with the
reason; a setting whose meaning the runner cannot keep (an operation, source or merge
payload it does not have) stops the import instead of being approximated. Key generator
properties go into `key_generator.properties` unchanged, where the spec loader reads them
with Hudi's meaning (runner/hudi/properties.py), so their checks live in one place. The
source is mapped by runner/hudi/streamer_sources.py (DFS sources, the schema file) and
runner/hudi/streamer_kafka.py (Kafka sources); runner/hudi/streamer_job.py holds the job
being read and the notes.

The properties file is read as Hudi's DFSPropertiesConfiguration reads it: `#` starts a
comment line, `include=FILE` reads FILE (relative to the including file) in place, the
separator is the first `=` (else the first space), whitespace runs collapse to one space,
later definitions win. `hoodie.streamer.*` wins over its old `hoodie.deltastreamer.*` name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runner.errors import UserError
from runner.hudi import properties as hudi_props
from runner.hudi.merge_names import ORDERING_PROPS, Lookup, merge_mode, ordering_field
from runner.hudi.streamer_debezium import check_transform_sql, debezium_merge, fed_by_debezium
from runner.hudi.streamer_job import Imported, Job
from runner.hudi.streamer_kafka import KAFKA_SOURCES, kafka_source
from runner.hudi.streamer_sources import DEFAULT_SOURCE, SOURCE_FORMATS, SOURCE_NAME, dfs_source
from runner.hudi.streamer_sync import catalog_sync

SQL_TRANSFORMER = "org.apache.hudi.utilities.transform.SqlQueryBasedTransformer"
OPERATIONS = {"UPSERT": "upsert", "INSERT": "insert", "BULK_INSERT": "bulk_insert"}
HUDI_DEFAULT_BUCKETS = 256  # hoodie.bucket.index.num.buckets

TABLE_NAME_PROPS = ("hoodie.table.name", "hoodie.datasource.write.table.name")

# HoodieStreamer flags: those that take a value, and switches.
VALUE_FLAGS = {
    "--target-base-path",
    "--target-table",
    "--table-type",
    "--base-file-format",
    "--props",
    "--hoodie-conf",
    "--source-class",
    "--source-ordering-field",
    "--source-ordering-fields",
    "--payload-class",
    "--merge-mode",
    "--record-merge-mode",
    "--op",
    "--transformer-class",
    "--source-limit",
    "--min-sync-interval-seconds",
    "--checkpoint",
    "--schemaprovider-class",
    "--spark-master",
    "--spark-app-name",
    "--sync-tool-classes",
}
SWITCHES = {"--filter-dupes", "--continuous", "--enable-hive-sync", "--enable-sync"}


def read_properties(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, str]:
    """A properties file as Hudi's DFSPropertiesConfiguration reads it."""
    path = path.resolve()
    if path in seen:
        raise UserError(f"{path}: include loop ({' -> '.join(str(p) for p in (*seen, path))})")
    try:
        text = path.read_text()
    except OSError as exc:
        raise UserError(f"cannot read properties file {path}: {exc.strerror}") from exc
    props: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        line = re.sub(r"\s+", " ", line)
        if "=" not in line and " " not in line.strip():
            continue
        sep = "=" if "=" in line else " "
        key, value = (part.strip() for part in line.split(sep, 1))
        if key == "include":
            props.update(read_properties(path.parent / value, (*seen, path)))
        elif key:
            props[key] = value
    return props


def parse_streamer_args(args: Sequence[str]) -> tuple[dict[str, str], list[str], list[str]]:
    """HoodieStreamer's command line: (flag -> last value, "true" for a switch), and the
    --hoodie-conf and --transformer-class values in order (both repeatable)."""
    flags: dict[str, str] = {}
    confs: list[str] = []
    transformers: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name, _, inline = arg.partition("=")
        if not name.startswith("--"):
            raise UserError(f"unexpected argument {arg!r}: give HoodieStreamer's flags")
        takes_value = name in VALUE_FLAGS or (
            name not in SWITCHES and i + 1 < len(args) and not args[i + 1].startswith("--")
        )
        if name in SWITCHES or not takes_value:
            value, i = "true", i + 1
        elif inline:
            value, i = inline, i + 1
        elif i + 1 < len(args):
            value, i = args[i + 1], i + 2
        else:
            raise UserError(f"{name} needs a value")
        if name == "--hoodie-conf":
            confs.append(value)
        elif name == "--transformer-class":
            transformers += [t.strip() for t in value.split(",") if t.strip()]
        flags[name] = value
    return flags, confs, transformers


_SKIP_REASONS = (
    (
        re.compile(r"^hoodie\.(upsert|insert|bulkinsert|delete)\.shuffle\.parallelism$"),
        "Spark decides: spark.conf spark.sql.shuffle.partitions; the writers follow buckets",
    ),
    (
        re.compile(r"^hoodie\.(compact|compaction)\."),
        "merge-on-read compaction is per bucket here: target.compaction (max_delta_files, "
        "max_deleted_fraction)",
    ),
    (
        re.compile(r"^hoodie\.(cleaner|clean)\.(?!commits\.retained$)"),
        "cleaning keeps commits by count and age: target.cleaning",
    ),
    (
        re.compile(r"^hoodie\.(parquet|logfile|metadata|embed\.timeline|write\.concurrency)"),
        "the runner sets its own file, metadata and concurrency settings (Delta log, "
        "optimistic commits)",
    ),
    (
        re.compile(r"^hoodie\.(deltastreamer|streamer)\.schemaprovider\.target\."),
        "the target's columns are what the source and transform give; nothing casts them to "
        "a declared target schema",
    ),
)


def import_streamer(
    props: Mapping[str, str],
    flags: Mapping[str, str],
    transformers: Sequence[str],
    base: Path | None = None,
) -> Imported:
    """The spec of a HoodieStreamer job; `props` already holds --hoodie-conf and --set.
    A relative schema file is read from `base`, the properties file's directory (default:
    the working directory)."""
    job = Job(props, flags, base or Path.cwd())
    name = _table_name(job)
    spec: dict[str, Any] = {"name": name, "description": f"Imported HoodieStreamer job {name}"}
    spec["sources"] = [_source(job)]
    if transformers:
        sql_prop, sql = _transform_sql(transformers, job.streamer)
        if fed_by_debezium(job):
            check_transform_sql(sql)
        spec["transform"] = {"sql": sql}
        job.out.mapped.append(
            (sql_prop, f"transform.sql (<SRC> is the source's view, {SOURCE_NAME})")
        )
    spec["target"] = _target(job)
    catalog = catalog_sync(job, name)
    if catalog:
        spec["target"]["catalog"] = catalog
    _command_line_notes(job)
    for key in sorted(props):
        if key not in job.used:
            job.out.skipped.append((key, _why_skipped(key)))
    job.out.spec = spec
    return job.out


def _table_name(job: Job) -> str:
    # HoodieStreamer sets hoodie.table.name from --target-table
    name_from = job.setting(["--target-table"], *TABLE_NAME_PROPS)
    if name_from is None:
        raise UserError("no table name: give --target-table (or hoodie.table.name)")
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name_from[1]).lstrip(".-") or "imported"
    job.out.mapped.append((name_from[0], "name"))
    return name


def _source(job: Job) -> dict[str, Any]:
    """sources[0], by HoodieStreamer's --source-class."""
    source_class = job.flags.get("--source-class", DEFAULT_SOURCE)
    if source_class in KAFKA_SOURCES:
        return kafka_source(job, source_class)
    if source_class not in SOURCE_FORMATS:
        known = ", ".join(c.rsplit(".", 1)[1] for c in (*SOURCE_FORMATS, *KAFKA_SOURCES))
        raise UserError(
            f"--source-class {source_class}: the runner imports the DFS and Kafka sources "
            f"({known}); write the spec's sources by hand for this one (jdbc, delta and "
            "files are there)"
        )
    return dfs_source(job, source_class)


def _target(job: Job) -> dict[str, Any]:
    """The target: table, operation, merge settings, key generator, index, cleaning."""
    target: dict[str, Any] = {}
    if "--target-base-path" not in job.flags:
        raise UserError("no table path: give --target-base-path")
    target["path"] = job.flags["--target-base-path"]
    job.out.mapped.append(("--target-base-path", "target.path"))
    table_type = job.setting(["--table-type"], "hoodie.datasource.write.table.type")
    if table_type:
        kind = table_type[1].upper()
        if kind not in ("COPY_ON_WRITE", "MERGE_ON_READ"):
            raise UserError(f"{table_type[0]} {kind}: use COPY_ON_WRITE or MERGE_ON_READ")
        target["table_type"] = kind
        job.out.mapped.append((table_type[0], "target.table_type"))
    op = job.flags.get("--op", "UPSERT").upper()
    if op not in OPERATIONS:
        raise UserError(
            f"--op {op} has no equivalent: the runner's operations are "
            f"{', '.join(OPERATIONS)} (and delete, for a batch of keys)"
        )
    if fed_by_debezium(job) and op != "UPSERT":
        raise UserError(
            f"--op {op}: a Debezium source's events are applied as a change feed, with "
            "UPSERT (deletes included); leave --op out"
        )
    target["operation"] = OPERATIONS[op]
    job.out.mapped.append((f"--op {op}", "target.operation"))
    job.prop("hoodie.datasource.write.operation")  # HoodieStreamer reads --op, not this
    _bulk_insert_sort(job, target)
    if fed_by_debezium(job):
        debezium_merge(job)
    else:
        _merge_settings(job, target)
    _key_generator(job, target)
    target["index"] = _index(job.prop, job.out)
    retained = job.prop("hoodie.cleaner.commits.retained")
    if retained:
        target["cleaning"] = {"retain_commits": int(retained[1])}
        job.out.mapped.append((retained[0], "target.cleaning.retain_commits"))
    return target


def _key_generator(job: Job, target: dict[str, Any]) -> None:
    """target.key_generator.properties: Hudi's key generator properties, as they are. A
    Debezium source's may leave the record key to the message key's fields."""
    key_props = {k: job.props[k] for k in job.props if _keygen_property(k)}
    job.used.update(key_props)
    if fed_by_debezium(job) and not key_props.get(hudi_props.RECORD_KEY, "").strip():
        key_props.pop(hudi_props.RECORD_KEY, None)
    if hudi_props.RECORD_KEY not in key_props:
        if not fed_by_debezium(job):
            raise UserError(
                f"no record key: set {hudi_props.RECORD_KEY} (the runner does not generate keys)"
            )
        job.out.mapped.append(
            (
                f"{hudi_props.RECORD_KEY} unset",
                "the record key is the Debezium message key's fields (the table's primary key), "
                "as value_format debezium implies",
            )
        )
    if key_props:
        target["key_generator"] = {"properties": key_props}
    job.out.mapped += [(k, "target.key_generator.properties") for k in key_props]


def _merge_settings(job: Job, target: dict[str, Any]) -> None:
    """precombine_field, merge_mode (runner/hudi/merge_names.py) and filter_dupes."""
    ordering = job.setting(["--source-ordering-fields", "--source-ordering-field"], *ORDERING_PROPS)
    if ordering:
        target["precombine_field"] = ordering_field(ordering)
        job.out.mapped.append(
            (
                ordering[0],
                "target.precombine_field (a string column is refused by a run until its type "
                "is declared, or target.precombine_string_order: true says text order is meant)",
            )
        )
    target["merge_mode"] = merge_mode(job.setting, job.out, has_ordering=bool(ordering))
    if job.flags.get("--filter-dupes") == "true":
        if target["operation"] == "upsert":
            raise UserError(
                "--filter-dupes with --op UPSERT: HoodieStreamer refuses it too (updates "
                "would be missed); use --op INSERT"
            )
        target["filter_dupes"] = True
        job.out.mapped.append(("--filter-dupes", "target.filter_dupes"))


# hoodie.bulkinsert.sort.mode: in a bucketed table, a global sort and a sort within each
# Spark partition both leave each bucket's rows sorted by key; the repartitioning modes
# sort nothing within a bucket.
BULK_INSERT_SORTS = {
    "NONE": "none",
    "GLOBAL_SORT": "by_key",
    "PARTITION_SORT": "by_key",
    "PARTITION_PATH_REPARTITION": "none",
    "PARTITION_PATH_REPARTITION_AND_SORT": "by_key",
}


def _bulk_insert_sort(job: Job, target: dict[str, Any]) -> None:
    """target.bulk_insert_sort from hoodie.bulkinsert.sort.mode (bulk_insert reads it)."""
    mode = job.prop("hoodie.bulkinsert.sort.mode")
    if mode is None:
        return
    if target["operation"] != "bulk_insert":
        job.out.skipped.append((mode[0], "read by bulk_insert only"))
        return
    sort = BULK_INSERT_SORTS.get(mode[1].upper())
    if sort is None:
        raise UserError(
            f"{mode[0]}={mode[1]}: use one of {', '.join(BULK_INSERT_SORTS)} (a custom "
            "partitioner has no equivalent)"
        )
    target["bulk_insert_sort"] = sort
    job.out.mapped.append((mode[0], "target.bulk_insert_sort"))


def _keygen_property(key: str) -> bool:
    return key in hudi_props.KNOWN or key.startswith(
        (hudi_props.TIMEBASED_PREFIX, hudi_props.TIMEBASED_OLD_PREFIX)
    )


def _transform_sql(transformers: Sequence[str], streamer: Lookup) -> tuple[str, str]:
    if len(transformers) > 1:
        raise UserError(
            f"--transformer-class lists {len(transformers)} transformers; the runner has one "
            "SQL transform: fold them into one query"
        )
    ident, _, cls = transformers[0].rpartition(":")
    if cls != SQL_TRANSFORMER:
        raise UserError(
            f"--transformer-class {cls}: only SqlQueryBasedTransformer has an equivalent "
            "(transform.sql); rewrite this one as SQL"
        )
    found = streamer(f"transformer.sql{'.' + ident if ident else ''}")
    if found is None:
        raise UserError(
            "SqlQueryBasedTransformer without hoodie.streamer.transformer.sql: set the query"
        )
    return found[0], str(found[1]).replace("<SRC>", SOURCE_NAME)


def _index(prop: Lookup, out: Imported) -> dict[str, Any]:
    index: dict[str, Any] = {}
    kind = prop("hoodie.index.type")
    engine = prop("hoodie.index.bucket.engine")
    if kind and kind[1].upper() == "BUCKET":
        # the bucket of a key is Spark's Murmur3 here, not Hudi's hashCode: ids differ
        out.mapped.append((kind[0], "target.index (BUCKET_HASH_INDEX, Spark's Murmur3 hash)"))
    else:
        out.skipped.append(
            (
                kind[0] if kind else "hoodie.index.type",
                f"{kind[1] if kind else 'unset'}: runner tables are always bucket-indexed "
                "(target.index); their bucket hash is Spark's Murmur3, not Hudi's (docs/design.md)",
            )
        )
    if engine and engine[1].upper() == "SIMPLE":
        out.mapped.append((engine[0], "target.index (one file group per bucket)"))
    elif engine:
        out.skipped.append(
            (
                engine[0],
                f"{engine[1]}: buckets grow by `runner expand` (multiple_rehash splits "
                "bucket i into i, i+N, ...), not by consistent hashing",
            )
        )
    buckets = prop(hudi_props.NUM_BUCKETS)
    index["buckets"] = int(buckets[1]) if buckets else HUDI_DEFAULT_BUCKETS
    out.mapped.append(
        (
            buckets[0] if buckets else f"(Hudi's default {HUDI_DEFAULT_BUCKETS})",
            "target.index.buckets",
        )
    )
    file_size = prop("hoodie.parquet.max.file.size")
    if file_size:
        if not file_size[1].isdigit() or int(file_size[1]) < 1024:
            raise UserError(
                f"{file_size[0]}={file_size[1]}: a size in bytes of at least 1024 is expected"
            )
        index["file_group_bytes"] = int(file_size[1])
        out.mapped.append(
            (file_size[0], "target.index.file_group_bytes (the target size of a bucket's files)")
        )
    hash_field = prop(hudi_props.HASH_FIELD)
    if hash_field:
        index["hash_fields"] = [f.strip() for f in hash_field[1].split(",") if f.strip()]
        out.mapped.append((hash_field[0], "target.index.hash_fields"))
    return index


def _command_line_notes(job: Job) -> None:
    """The flags no mapping read: a way to run the spec, or why they have no equivalent."""
    flags, out = job.flags, job.out
    if flags.get("--continuous") == "true":
        every = flags.get("--min-sync-interval-seconds", "0")
        out.skipped.append(
            (
                "--continuous",
                f"a way to run it: `runner run SPEC --continuous --min-interval {every}s`",
            )
        )
    if "--checkpoint" in flags and "--checkpoint" not in job.used:  # a Kafka source's: read
        out.skipped.append(
            (
                "--checkpoint",
                "a way to run it: `runner run SPEC --checkpoint ISO-TIME` "
                "(new files modified after that time)",
            )
        )
    fmt = flags.get("--base-file-format", "PARQUET").upper()
    if fmt != "PARQUET":
        raise UserError(f"--base-file-format {fmt}: runner tables are Delta (parquet files)")
    for flag, why in (
        ("--source-limit", "no byte limit per run: each run reads every new file"),
        ("--spark-master", "spark.master in the spec (default local[*]) or spark-submit's"),
        ("--spark-app-name", "the Spark application is named after the spec"),
    ):
        if flag in flags and flag not in job.used:
            out.skipped.append((flag, why))
    for flag in sorted(set(flags) - VALUE_FLAGS - SWITCHES):
        out.skipped.append((flag, "not a HoodieStreamer flag the runner knows"))


def _why_skipped(key: str) -> str:
    for pattern, why in _SKIP_REASONS:
        if pattern.match(key):
            return why
    if key.startswith(("hoodie.streamer.", "hoodie.deltastreamer.")):
        return "a HoodieStreamer setting the runner has no equivalent for"
    return "no equivalent in the runner"
