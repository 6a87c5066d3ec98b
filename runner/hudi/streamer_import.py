"""`runner import-hudi`: a HoodieStreamer job (properties file and command line) as a spec.

Each property and flag is either mapped to a spec field, or listed as not imported with the
reason; a setting whose meaning the runner cannot keep (an operation, source or merge
payload it does not have) stops the import instead of being approximated. Key generator
properties go into `key_generator.properties` unchanged, where the spec loader reads them
with Hudi's meaning (runner/hudi/properties.py), so their checks live in one place.

The properties file is read as Hudi's DFSPropertiesConfiguration reads it: `#` starts a
comment line, `include=FILE` reads FILE (relative to the including file) in place, the
separator is the first `=` (else the first space), whitespace runs collapse to one space,
later definitions win. `hoodie.streamer.*` wins over its old `hoodie.deltastreamer.*` name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import UserError
from runner.hudi import properties as hudi_props
from runner.hudi.merge_names import ORDERING_PROPS, Lookup, merge_mode, ordering_field

SOURCES = "org.apache.hudi.utilities.sources."
SOURCE_FORMATS = {
    f"{SOURCES}JsonDFSSource": "json",
    f"{SOURCES}ParquetDFSSource": "parquet",
    f"{SOURCES}CsvDFSSource": "csv",
    f"{SOURCES}ORCDFSSource": "orc",
}
DEFAULT_SOURCE = f"{SOURCES}JsonDFSSource"
SQL_TRANSFORMER = "org.apache.hudi.utilities.transform.SqlQueryBasedTransformer"
OPERATIONS = {"UPSERT": "upsert", "INSERT": "insert", "BULK_INSERT": "bulk_insert"}
HUDI_DEFAULT_BUCKETS = 256  # hoodie.bucket.index.num.buckets
SOURCE_NAME = "src"

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


@dataclass
class Imported:
    spec: dict[str, Any]
    mapped: list[tuple[str, str]] = field(default_factory=list)  # (setting, spec field)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (setting, why)

    def to_yaml(self, origin: str) -> str:
        import yaml

        lines = [f"# Imported by `runner import-hudi` from {origin}."]
        if self.mapped:
            lines.append("# Mapped:")
            lines += [f"#   {what} -> {to}" for what, to in self.mapped]
        if self.skipped:
            lines.append("# Not imported:")
            lines += [f"#   {what}: {why}" for what, why in self.skipped]
        body = yaml.safe_dump(self.spec, sort_keys=False, width=100)
        return "\n".join(lines) + "\n" + body


_SKIP_REASONS = (
    (
        re.compile(r"^hoodie\.(upsert|insert|bulkinsert|delete)\.shuffle\.parallelism$"),
        "Spark decides: spark.conf spark.sql.shuffle.partitions; the writers follow buckets",
    ),
    (
        re.compile(r"^hoodie\.(datasource\.hive_sync|meta\.sync|meta_sync)\."),
        "no catalog sync: the Delta table is read by path (or registered by its reader)",
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
)


def import_streamer(
    props: Mapping[str, str], flags: Mapping[str, str], transformers: Sequence[str]
) -> Imported:
    """The spec of a HoodieStreamer job; `props` already holds --hoodie-conf and --set."""
    job = _Job(props, flags)
    name = _table_name(job)
    spec: dict[str, Any] = {"name": name, "description": f"Imported HoodieStreamer job {name}"}
    spec["sources"] = [_source(job)]
    if transformers:
        sql_prop, sql = _transform_sql(transformers, job.streamer)
        spec["transform"] = {"sql": sql}
        job.out.mapped.append(
            (sql_prop, f"transform.sql (<SRC> is the source's view, {SOURCE_NAME})")
        )
    spec["target"] = _target(job)
    _command_line_notes(flags, job.out)
    for key in sorted(props):
        if key not in job.used:
            job.out.skipped.append((key, _why_skipped(key)))
    job.out.spec = spec
    return job.out


class _Job:
    """A HoodieStreamer job being read: its properties and flags, the properties read so
    far (the others are listed as not imported), and the notes of the import."""

    def __init__(self, props: Mapping[str, str], flags: Mapping[str, str]):
        self.props = props
        self.flags = flags
        self.used: set[str] = set()
        self.out = Imported({})

    def prop(self, *names: str) -> tuple[str, str] | None:
        """The first of `names` set to a value; all of them count as read (empty: unset)."""
        found = None
        for name in names:
            if name in self.props:
                self.used.add(name)
                if found is None and self.props[name].strip():
                    found = (name, self.props[name].strip())
                elif found is not None:
                    self.out.skipped.append((name, f"{found[0]} is set too, and wins"))
        return found

    def streamer(self, suffix: str) -> tuple[str, str] | None:
        """hoodie.streamer.SUFFIX, else its old name hoodie.deltastreamer.SUFFIX."""
        return self.prop(f"hoodie.streamer.{suffix}", f"hoodie.deltastreamer.{suffix}")

    def setting(self, flag_names: Sequence[str], *names: str) -> tuple[str, str] | None:
        """The first of `flag_names` given, else the first property of `names`: on
        HoodieStreamer's command line a flag wins over the properties."""
        found = self.prop(*names)
        for flag in flag_names:
            if flag in self.flags:
                if found:
                    self.out.skipped.append(
                        (found[0], f"{flag} wins (a flag overrides properties)")
                    )
                return flag, self.flags[flag]
        return found


def _table_name(job: _Job) -> str:
    # HoodieStreamer sets hoodie.table.name from --target-table
    name_from = job.setting(["--target-table"], *TABLE_NAME_PROPS)
    if name_from is None:
        raise UserError("no table name: give --target-table (or hoodie.table.name)")
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name_from[1]).lstrip(".-") or "imported"
    job.out.mapped.append((name_from[0], "name"))
    return name


def _source(job: _Job) -> dict[str, Any]:
    """sources[0]: a DFS source's files, read incrementally as the source does."""
    source_class = job.flags.get("--source-class", DEFAULT_SOURCE)
    fmt = SOURCE_FORMATS.get(source_class)
    if fmt is None:
        known = ", ".join(c.rsplit(".", 1)[1] for c in SOURCE_FORMATS)
        raise UserError(
            f"--source-class {source_class}: the runner imports the DFS sources ({known}); "
            "write the spec's sources by hand for this one (jdbc, delta and files are there)"
        )
    root = job.streamer("source.dfs.root")
    if root is None:
        raise UserError(
            "no source path: the DFS sources read hoodie.streamer.source.dfs.root "
            "(or hoodie.deltastreamer.source.dfs.root); set it with --set"
        )
    source: dict[str, Any] = {
        "name": SOURCE_NAME,
        "format": fmt,
        "path": root[1],
        "incremental": "new_files",
    }
    job.out.mapped.append((f"--source-class {source_class.rsplit('.', 1)[1]}", "sources[0].format"))
    # Hudi's DFS sources read the files newer than their checkpoint: new_files
    job.out.mapped.append((root[0], "sources[0].path, incremental: new_files"))
    schema_file = job.streamer("schemaprovider.source.schema.file")
    typed = bool(schema_file) or "--schemaprovider-class" in job.flags
    if fmt == "csv":
        options = _csv_options(job, typed)
        if options:
            source["options"] = options
    if typed:
        job.out.skipped.append(
            (
                schema_file[0] if schema_file else "--schemaprovider-class",
                "Spark infers the source schema; give sources[0].schema (Spark DDL) to fix it",
            )
        )
    return source


def _csv_options(job: _Job, typed: bool) -> dict[str, str]:
    """CsvDFSSource's hoodie.streamer.csv.* properties as Spark's csv options."""
    options = {}
    for key in sorted(job.props):
        for prefix in ("hoodie.deltastreamer.csv.", "hoodie.streamer.csv."):
            if key.startswith(prefix):
                job.used.add(key)
                option = key[len(prefix) :]
                if option == "inferSchema":
                    job.out.skipped.append((key, "CsvDFSSource sets inferSchema itself"))
                    continue
                options[option] = job.props[key]
                job.out.mapped.append((key, f"sources[0].options.{option}"))
    if not typed:
        # CsvDFSSource infers the column types without a schema provider; Spark's csv
        # reader alone reads every column as a string (a string ordering field then)
        options["inferSchema"] = "true"
        job.out.mapped.append(
            ("CsvDFSSource without a schema provider", "sources[0].options.inferSchema")
        )
    return options


def _target(job: _Job) -> dict[str, Any]:
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
    target["operation"] = OPERATIONS[op]
    job.out.mapped.append((f"--op {op}", "target.operation"))
    job.prop("hoodie.datasource.write.operation")  # HoodieStreamer reads --op, not this
    _merge_settings(job, target)
    key_props = {k: job.props[k] for k in job.props if _keygen_property(k)}
    job.used.update(key_props)
    if hudi_props.RECORD_KEY not in key_props:
        raise UserError(
            f"no record key: set {hudi_props.RECORD_KEY} (the runner does not generate keys)"
        )
    target["key_generator"] = {"properties": key_props}
    job.out.mapped += [(k, "target.key_generator.properties") for k in key_props]
    target["index"] = _index(job.prop, job.out)
    retained = job.prop("hoodie.cleaner.commits.retained")
    if retained:
        target["cleaning"] = {"retain_commits": int(retained[1])}
        job.out.mapped.append((retained[0], "target.cleaning.retain_commits"))
    return target


def _merge_settings(job: _Job, target: dict[str, Any]) -> None:
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
    hash_field = prop(hudi_props.HASH_FIELD)
    if hash_field:
        index["hash_fields"] = [f.strip() for f in hash_field[1].split(",") if f.strip()]
        out.mapped.append((hash_field[0], "target.index.hash_fields"))
    return index


def _command_line_notes(flags: Mapping[str, str], out: Imported) -> None:
    if flags.get("--continuous") == "true":
        every = flags.get("--min-sync-interval-seconds", "0")
        out.skipped.append(
            (
                "--continuous",
                f"a way to run it: `runner run SPEC --continuous --min-interval {every}s`",
            )
        )
    if "--checkpoint" in flags:
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
        ("--enable-hive-sync", "no catalog sync: the Delta table is read by path"),
        ("--enable-sync", "no catalog sync: the Delta table is read by path"),
        ("--spark-master", "spark.master in the spec (default local[*]) or spark-submit's"),
        ("--spark-app-name", "the Spark application is named after the spec"),
    ):
        if flag in flags:
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
