"""Each key generator setting from the structured form or from Hudi's properties.

target.key_generator may give a setting as a spec key, as a Hudi property under
key_generator.properties, or both; `SettingPicker.pick` returns the value and where it was
written, and reports a setting given both ways with different values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from runner.hudi import properties as hudi_props

Path_ = tuple[str | int, ...]
Report = Callable[[Path_, str], None]

KG: Path_ = ("key_generator",)
PROPS: Path_ = (*KG, "properties")
TS: Path_ = (*KG, "timestamp")


def _show(path: Path_) -> str:
    return ".".join(str(p) for p in path)


class SettingPicker:
    """Picks each setting from the structured form or the properties, checking they agree."""

    def __init__(self, target: Mapping[str, Any], report: Report):
        self.report = report
        keygen = target.get("key_generator") or {}
        self.structured: dict[str, tuple[Any, Path_]] = {}
        if "record_key" in target:
            self.structured["record_key"] = (target["record_key"], ("record_key",))
        for key in (
            "partition_fields",
            "hive_style_partitioning",
            "url_encode",
            "complex_encoding",
            "consistent_logical_timestamp",
        ):
            if key in keygen:
                self.structured[key] = (keygen[key], (*KG, key))
        if "type" in keygen and "class" in keygen:
            report((*KG, "class"), "give either class (your own generator) or type, not both")
        if "class" in keygen:
            self.structured["kind"] = (("class", keygen["class"]), (*KG, "class"))
        elif "type" in keygen:
            self.structured["kind"] = (("type", keygen["type"]), (*KG, "type"))
        for key, value in (keygen.get("timestamp") or {}).items():
            self.structured[f"timestamp.{key}"] = (value, (*TS, key))
        self.has_timestamp = "timestamp" in keygen
        self.props, problems = hudi_props.from_properties(keygen.get("properties") or {})
        for prop, message in problems:
            report((*PROPS, prop), message)

    def has_timestamp_settings(self) -> bool:
        return self.has_timestamp or any(k.startswith("timestamp.") for k in self.props)

    def pick(
        self, key: str, normalize: Callable[[Any], Any] = lambda v: v
    ) -> tuple[Any, Path_ | None]:
        """The value for `key` and where to report about it; (None, None) when unset."""
        mine = self.structured.get(key)
        theirs = self.props.get(key)
        if mine and theirs:
            try:
                same = normalize(mine[0]) == normalize(theirs.value)
            except ValueError:
                same = False
            if not same:
                self.report(
                    (*PROPS, theirs.prop),
                    f"{theirs.value!r} contradicts {_show(mine[1])}: {mine[0]!r}; "
                    "give each setting once, in either form",
                )
        if mine:
            return mine[0], mine[1]
        if theirs:
            return theirs.value, (*PROPS, theirs.prop)
        return None, None
