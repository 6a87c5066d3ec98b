"""Hudi's merge settings as the runner's: payload class, record merge mode, partial update
mode and ordering field become `merge_mode` and `precombine_field`.

Read by `runner import-hudi` (with HoodieStreamer's flags) and from a spec's
`target.properties` (Hudi's names, verbatim), so that both map them the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from runner.errors import UserError

# setting(flag_names, *property_names) -> (the name found, its value), or None
Lookup = Callable[..., "tuple[str, str] | None"]


class Notes(Protocol):
    """Where a mapping says what it read: (setting, spec field) and (setting, why not)."""

    mapped: list[tuple[str, str]]
    skipped: list[tuple[str, str]]


PAYLOADS = "org.apache.hudi.common.model."
PAYLOAD_MERGE_MODES = {
    f"{PAYLOADS}OverwriteWithLatestAvroPayload": "commit_time",
    f"{PAYLOADS}DefaultHoodieRecordPayload": "event_time",
    f"{PAYLOADS}EventTimeAvroPayload": "event_time",
    f"{PAYLOADS}PartialUpdateAvroPayload": "partial_update",
    f"{PAYLOADS}OverwriteNonDefaultsWithLatestAvroPayload": "overwrite_non_defaults",
}
# Hudi 1.1's merge mode with hoodie.write.partial.update.mode IGNORE_DEFAULTS (nulls keep the
# other record's values): what its two partial-update payloads became.
IGNORE_DEFAULTS_MODES = {"event_time": "partial_update", "commit_time": "overwrite_non_defaults"}
MERGE_MODES = {"COMMIT_TIME_ORDERING": "commit_time", "EVENT_TIME_ORDERING": "event_time"}

# Ordering (precombine) field properties, most specific first (after the command line).
ORDERING_PROPS = (
    "hoodie.table.ordering.fields",
    "hoodie.datasource.write.precombine.field",
    "hoodie.table.precombine.field",
    "hoodie.payload.ordering.field",
)
MERGE_MODE_PROPS = (
    "hoodie.datasource.write.payload.class",
    "hoodie.write.record.merge.mode",
    "hoodie.record.merge.mode",
    "hoodie.write.partial.update.mode",
    "hoodie.table.partial.update.mode",
)


def ordering_field(found: tuple[str, str]) -> str:
    """The one ordering field a setting (name, value) gives; Hudi 1.x allows several."""
    fields = [f.strip() for f in found[1].split(",") if f.strip()]
    if len(fields) > 1:
        raise UserError(
            f"{found[0]} {found[1]}: the runner orders records by one field; combine them "
            "into one column in a transform, e.g. a struct or a timestamp"
        )
    return fields[0]


def merge_mode(setting: Lookup, out: Notes, has_ordering: bool) -> str:
    """The runner's merge_mode for Hudi's merge settings (a merge mode wins over a payload
    class, as in Hudi 1.x); what was read is noted in `out`."""
    mode = setting(
        ["--merge-mode", "--record-merge-mode"],
        "hoodie.write.record.merge.mode",
        "hoodie.record.merge.mode",
    )
    payload = setting(["--payload-class"], "hoodie.datasource.write.payload.class")
    if mode:
        if mode[1].upper() not in MERGE_MODES:
            raise UserError(
                f"{mode[0]} {mode[1]}: only {', '.join(MERGE_MODES)} have equivalents; a "
                "merge of your own is a Python class in the runner (merge_mode custom, "
                "docs/merging.md): write one with your merger's logic and set it in the spec"
            )
        out.mapped.append((mode[0], "target.merge_mode"))
        if payload:
            out.skipped.append((payload[0], f"{mode[0]} is set too, and decides"))
        return _partial_update(setting, out, MERGE_MODES[mode[1].upper()])
    if payload:
        cls = payload[1] if "." in payload[1] else PAYLOADS + payload[1]
        if cls not in PAYLOAD_MERGE_MODES:
            known = ", ".join(name.removeprefix(PAYLOADS) for name in PAYLOAD_MERGE_MODES)
            raise UserError(
                f"{payload[0]} {payload[1]}: the runner merges as {known}; for another "
                "payload, write its logic as a runner merger class (merge_mode custom, "
                "docs/merging.md) and set it in the spec"
            )
        out.mapped.append((payload[0], f"target.merge_mode {PAYLOAD_MERGE_MODES[cls]}"))
        return PAYLOAD_MERGE_MODES[cls]
    # Hudi 1.x: EVENT_TIME_ORDERING when an ordering field is set, else COMMIT_TIME_ORDERING
    inferred = "event_time" if has_ordering else "commit_time"
    why = f"(no merge mode: Hudi's default with {'an' if has_ordering else 'no'} ordering field)"
    out.mapped.append((why, f"target.merge_mode {inferred}"))
    return _partial_update(setting, out, inferred)


def _partial_update(setting: Lookup, out: Notes, merge_mode: str) -> str:
    """Hudi 1.1's partial update mode on top of a merge mode."""
    partial = setting([], "hoodie.write.partial.update.mode", "hoodie.table.partial.update.mode")
    if not partial or partial[1].upper() == "NONE":
        return merge_mode
    if partial[1].upper() != "IGNORE_DEFAULTS":
        raise UserError(
            f"{partial[0]} {partial[1]}: the runner's partial updates keep the other record's "
            "value where a field is null (IGNORE_DEFAULTS); its columns have no other defaults"
        )
    merged = IGNORE_DEFAULTS_MODES[merge_mode]
    out.mapped.append((partial[0], f"target.merge_mode {merged}"))
    return merged


@dataclass
class _Read:
    mapped: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class PropertySettings:
    """What a spec's target.properties set: merge_mode and precombine_field (None: not
    set there), and each property that cannot be used, with why."""

    merge_mode: str | None = None
    precombine_field: str | None = None
    problems: tuple[tuple[str, str], ...] = ()


def from_properties(properties: Mapping[str, Any]) -> PropertySettings:
    """target.properties (Hudi's merge property names) as the runner's settings."""
    props = {name: str(value) for name, value in properties.items()}
    problems = [
        (
            name,
            "not a merge property the runner reads (it reads "
            f"{', '.join((*MERGE_MODE_PROPS, *ORDERING_PROPS))}); key generator properties "
            "go in key_generator.properties; `runner import-hudi` maps a whole HoodieStreamer "
            "configuration",
        )
        for name in props
        if name not in (*MERGE_MODE_PROPS, *ORDERING_PROPS)
    ]

    def setting(flag_names: object, *names: str) -> tuple[str, str] | None:
        return next(((name, props[name]) for name in names if name in props), None)

    ordering = setting((), *ORDERING_PROPS)
    precombine_field = None
    if ordering:
        try:
            precombine_field = ordering_field(ordering)
        except UserError as exc:
            problems.append((ordering[0], str(exc)))
    mode = None
    if any(name in props for name in MERGE_MODE_PROPS):
        try:
            mode = merge_mode(setting, _Read(), has_ordering=ordering is not None)
        except UserError as exc:
            first = next(name for name in MERGE_MODE_PROPS if name in props)
            problems.append((first, str(exc)))
    return PropertySettings(mode, precombine_field, tuple(problems))
