"""The one Spark application a set of specs shares: which `spark:` settings may differ.

A Spark application's master, jars, memory and other static settings are fixed when it
starts, so specs whose static settings differ cannot share one: such a set is refused with
the settings that differ named (run those specs apart, or give them the same settings).
Spark SQL's runtime settings (`spark.sql.*`, but the static ones below) belong to a
session: each spec whose own differ from the set's gets them on a session of its own,
which ends with its run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from runner.errors import SpecProblem
from runner.pipeline.spec_set import Member, SpecSet, load_spec_set, problem_at
from runner.spec.model import SparkSettings

# spark.sql.* settings Spark fixes when its first session starts (StaticSQLConf)
STATIC_SQL = (
    "spark.sql.extensions",
    "spark.sql.warehouse.dir",
    "spark.sql.catalogImplementation",
    "spark.sql.catalog.",
    "spark.sql.hive.",
    "spark.sql.globalTempDatabase",
    "spark.sql.queryExecutionListeners",
    "spark.sql.streaming.streamingQueryListeners",
    "spark.sql.streaming.ui.",
    "spark.sql.ui.",
    "spark.sql.event.truncate.length",
    "spark.sql.codegen.cache.maxEntries",
    "spark.sql.sources.schemaStringLengthThreshold",
    "spark.sql.filesourceTableRelationCacheSize",
    "spark.sql.broadcastExchange.maxThreadThreshold",
    "spark.sql.subquery.maxThreadThreshold",
    "spark.sql.metadataCacheTTLSeconds",
    "spark.sql.cache.serializer",
    "spark.sql.defaultUrlStreamHandlerFactory.enabled",
    "spark.sql.legacy.sessionInitWithConfigDefaults",
)


def runtime_setting(key: str) -> bool:
    """A setting a session may change while the application runs."""
    return key.startswith("spark.sql.") and not any(
        key == s or (s.endswith(".") and key.startswith(s)) for s in STATIC_SQL
    )


@dataclass(frozen=True)
class SharedSpark:
    """The application's settings (the master, and every setting the specs agree on) and,
    by spec name, the runtime settings a spec's session sets over them."""

    settings: SparkSettings
    own: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def shared_spark(members: Sequence[Member]) -> tuple[SharedSpark | None, list[SpecProblem]]:
    """The application the specs share, or None with a problem per static setting a spec
    gives otherwise than the set's first spec."""
    first = members[0]
    keys = sorted({k for m in members for k in m.spec.spark.conf})
    agreed = {
        k: v
        for k in keys
        if len({m.spec.spark.conf.get(k) for m in members}) == 1
        for v in [first.spec.spark.conf[k]]
    }
    problems = []
    for member in members[1:]:
        for path in _differing(member, first, keys, agreed):
            problems.append(
                problem_at(
                    member.file,
                    path,
                    f"differs from {first.file}'s; the specs of a set share one Spark "
                    "application, whose master and settings other than spark.sql.* runtime "
                    "ones are fixed when it starts: give them the same value, or run these "
                    "specs apart",
                )
            )
    if problems:
        return None, problems
    own = {m.name: {k: v for k, v in m.spec.spark.conf.items() if k not in agreed} for m in members}
    master = first.spec.spark.master
    return SharedSpark(SparkSettings(master, agreed), {k: v for k, v in own.items() if v}), []


def _differing(
    member: Member, first: Member, keys: Sequence[str], agreed: Mapping[str, str]
) -> list[tuple[str, ...]]:
    """The static settings of `member` that are not `first`'s, as field paths."""
    mine, theirs = member.spec.spark, first.spec.spark
    paths: list[tuple[str, ...]] = []
    if mine.master != theirs.master:
        paths.append(("spark", "master"))
    for key in keys:
        if key in agreed or runtime_setting(key):
            continue
        if mine.conf.get(key) != theirs.conf.get(key):
            paths.append(("spark", "conf", key))
    return paths


def check_set(
    files: Sequence[str], parse_transform: bool = True, resolve_paths: bool = True
) -> tuple[SpecSet | None, list[SpecProblem]]:
    """The set of `files`, or None with every problem: each spec's, then the set's (names,
    tables, order), then the Spark settings they could not share."""
    specs, problems = load_spec_set(files, parse_transform, resolve_paths)
    if specs is None:
        return None, problems
    _, problems = shared_spark(specs.members)
    return (None if problems else specs), problems
