"""The values of a SparkApplication the CRD types as plain strings, read as the operator and
Spark read them: the schedule (robfig/cron v3's ParseStandard, which the spark-operator's
ScheduledSparkApplication controller calls), pod memory in Spark's size notation (Spark's
JavaUtils.byteStringAs) and CPU and memory limits as Kubernetes quantities. The API server
takes any string there; the operator or the pod then fails, minutes later, in its status."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# field: (lowest, highest, names), as robfig/cron v3 bounds them
_CRON_FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 6, _DAYS),
)
_DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_GO_DURATION = re.compile(r"^[-+]?(0|((\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h))+)$")
_CRON_HELP = (
    "write 5 fields (minute hour day-of-month month day-of-week, e.g. '*/5 * * * *' or "
    "'0 3 * * MON-FRI') or one of @hourly, @daily, @weekly, @monthly, @yearly, '@every 5m'"
)
_SPARK_SIZE = re.compile(r"^[0-9]+(b|k|kb|m|mb|g|gb|t|tb|p|pb)?$")
_QUANTITY = re.compile(
    r"^[+-]?(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)
SPARK_SIZE_FIELDS = ("memory", "memoryOverhead")
QUANTITY_FIELDS = ("coreLimit", "coreRequest", "memoryLimit")


def cron_problem(schedule: str) -> str | None:
    """Why the spark-operator would refuse `schedule`, with the fix; None if it reads it."""
    reason = _cron_reason(schedule)
    if reason is None:
        return None
    return f"{schedule!r} is not a cron schedule the spark-operator reads ({reason}): {_CRON_HELP}"


def _cron_reason(schedule: str) -> str | None:
    text = schedule.strip()
    if text.startswith(("TZ=", "CRON_TZ=")):
        text = text.partition(" ")[2].strip()
    if text.startswith("@every "):
        duration = text.removeprefix("@every ").strip()
        return None if _GO_DURATION.match(duration) else f"{duration!r} is not a duration"
    if text.startswith("@"):
        return None if text in _DESCRIPTORS else f"unknown descriptor {text!r}"
    fields = text.split()
    if len(fields) != len(_CRON_FIELDS):
        return f"{len(fields)} field(s), not 5"
    for value, (name, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        for part in value.split(","):
            reason = _range_reason(part, low, high, names)
            if reason:
                return f"{name} {value!r}: {reason}"
    return None


def _range_reason(part: str, low: int, high: int, names: tuple[str, ...]) -> str | None:
    """A cron range (`*`, `?`, `N`, `N-M`, each with an optional `/STEP`), as robfig reads it."""
    span, _, step = part.partition("/")
    if step and not (step.isdigit() and int(step) > 0):
        return f"step {step!r} is not a positive number"
    if span in ("*", "?"):
        return None
    ends = span.split("-")
    if len(ends) > 2:
        return f"{span!r} has too many hyphens"
    values = []
    for end in ends:
        if end.lower() in names:
            values.append(names.index(end.lower()) + low)  # jan is 1, sun is 0
        elif end.isdigit():
            values.append(int(end))
        else:
            return f"{end!r} is not a number" + (" or a name" if names else "")
    if values[0] < low or values[-1] > high:
        return f"{span!r} is outside {low}-{high}"
    if values[0] > values[-1]:
        return f"{span!r} begins after it ends"
    return None


def spark_size_problem(size: str) -> str | None:
    """Why Spark would not read `size` as pod memory; None if it does."""
    if _SPARK_SIZE.match(size.strip().lower()):
        return None
    return (
        f"{size!r} is not a size Spark reads: a whole number and a unit (b, k, m, g, t, p, or "
        "kb, mb, gb, ...) with no space, e.g. '2g' or '512m'"
    )


def quantity_problem(quantity: str) -> str | None:
    """Why Kubernetes would refuse `quantity`; None if it is a quantity."""
    if _QUANTITY.match(quantity):
        return None
    return (
        f"{quantity!r} is not a Kubernetes quantity: a number and an optional suffix with no "
        "space, e.g. '1500m' (CPU), '2Gi' or '2G' (memory)"
    )


def value_problems(kind: str, doc: dict[str, Any]) -> Iterator[tuple[tuple[Any, ...], str]]:
    """(field path, problem) of each string value of a SparkApplication or a
    ScheduledSparkApplication that its reader would refuse."""
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return
    app: Any = spec
    where: tuple[str, ...] = ("spec",)
    if kind == "ScheduledSparkApplication":
        schedule = spec.get("schedule")
        if isinstance(schedule, str) and (problem := cron_problem(schedule)):
            yield (*where, "schedule"), problem
        app, where = spec.get("template"), ("spec", "template")
    if not isinstance(app, dict):
        return
    for pod in ("driver", "executor"):
        settings = app.get(pod)
        if not isinstance(settings, dict):
            continue
        for name, check in [
            *((n, spark_size_problem) for n in SPARK_SIZE_FIELDS),
            *((n, quantity_problem) for n in QUANTITY_FIELDS),
        ]:
            value = settings.get(name)
            if isinstance(value, str) and (problem := check(value)):
                yield (*where, pod, name), problem
