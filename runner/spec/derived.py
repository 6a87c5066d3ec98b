"""Values read from the raw spec the same way by the checks and by the model builder.

The semantic checks run before the frozen model exists, so the defaults they need come from
the model's own fields (`model_default`), and the merge settings from one function that the
checks, the column checks and the builder share (`merge_settings`).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, cast

from runner.hudi.merge_names import PropertySettings
from runner.spec.model import MergeMode, Target

FILE_FORMATS = ("parquet", "csv", "json", "orc")
TEXT_FORMATS = ("csv", "json")


def model_default(model: type, name: str) -> Any:
    """A field's default in the model, for the checks that run before the model is built."""
    return next(f.default for f in fields(model) if f.name == name)


def merge_settings(
    target: dict[str, Any], from_props: PropertySettings
) -> tuple[MergeMode, str | None]:
    """merge_mode and precombine_field, set in the spec's fields or by Hudi's names in
    target.properties (`from_props`; the two must agree). A change feed's events are
    ordered by its cdc.sequence_by."""
    merge_mode = target.get("merge_mode") or from_props.merge_mode
    precombine_field = (
        target.get("precombine_field")
        or from_props.precombine_field
        or target.get("cdc", {}).get("sequence_by")
    )
    return cast(MergeMode, merge_mode or model_default(Target, "merge_mode")), precombine_field


def conf_str(value: Any) -> str:
    """A conf value as Spark and Hadoop read it: booleans lower case."""
    return str(value).lower() if isinstance(value, bool) else str(value)
