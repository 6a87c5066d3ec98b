"""Topic-to-table routing: one spec whose kafka source reads several topics (a topic_pattern,
or topics) and whose target.path names `{topic}`, or `{schema}` and `{table}`, writes one
table per topic, each with its own key, checkpoint and history, as if each topic had a spec
of its own (`route`). `{schema}` and `{table}` are the last two parts of a topic named
`<prefix>.<schema>.<table>`, as Debezium names a table's topic (a MySQL database is its
schema). Which topics there are is asked of the brokers when a run starts, so a topic that
appears later gets its table on the next run (runner/commands/spec_set_run.py).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from runner.errors import UserError
from runner.spec.model import PipelineSpec

FIELDS = ("topic", "schema", "table")
_FIELD = re.compile(r"(?<!\$)\{([^{}]*)\}")  # not ${env:NAME}


def path_fields(path: str) -> list[str]:
    """The routing fields a target path names, in order."""
    return _FIELD.findall(path)


def is_routed(spec: PipelineSpec) -> bool:
    """A spec that writes a table per topic (not one of those tables)."""
    return spec.route_topic is None and bool(path_fields(spec.target.path))


def template_pattern(path: str) -> re.Pattern[str]:
    """The paths a target path template can give: each field the text of one path segment
    (a topic's name has no `/`), the rest as written."""
    parts = _FIELD.split(path)  # text, field, text, ...: the fields at odd positions
    return re.compile(
        "".join("[^/]+" if i % 2 else re.escape(part) for i, part in enumerate(parts))
    )


def could_meet(first: str, second: str) -> bool:
    """Whether two target path templates can give one path (each field the text of one
    path segment): a walk over both at once, character by character."""
    a, b = _characters(first), _characters(second)
    seen: set[tuple[int, int]] = set()
    todo = [(0, 0)]
    while todo:
        i, j = todo.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if i == len(a) and j == len(b):
            return True
        if i < len(a) and a[i] == _MORE:  # the field's text may end here
            todo.append((i + 1, j))
        if j < len(b) and b[j] == _MORE:
            todo.append((i, j + 1))
        if i < len(a) and j < len(b) and _one_character(a[i], b[j]):
            todo.append((i + (a[i] != _MORE), j + (b[j] != _MORE)))
    return False


# A field as characters: one, then any more (a literal character is a 1-character string)
_ONE, _MORE = "<one>", "<more>"


def _characters(path: str) -> list[str]:
    parts = _FIELD.split(path)  # text, field, text, ...: the fields at odd positions
    return [c for i, part in enumerate(parts) for c in ([_ONE, _MORE] if i % 2 else part)]


def _one_character(a: str, b: str) -> bool:
    """Both give one character that both can be (a field's is any but `/`); not when both
    are the rest of a field (that step leads nowhere new)."""
    if a == b == _MORE:
        return False
    field_a, field_b = len(a) > 1, len(b) > 1
    if field_a and field_b:
        return True
    if field_a or field_b:
        return (b if field_a else a) != "/"
    return a == b


def route(spec: PipelineSpec, topic: str) -> PipelineSpec:
    """The spec of one topic's table: the source reads that topic only, the target is the
    path with the topic's fields, the name `<name>.<topic>`."""
    parts = topic.split(".")
    values = {"topic": topic}
    if len(parts) >= 3:
        values |= {"schema": parts[-2], "table": parts[-1]}
    missing = [f for f in path_fields(spec.target.path) if f not in values]
    if missing:
        raise UserError(
            f"{spec.file}: target.path {spec.target.path} takes {{schema}} and {{table}} from "
            f"a topic named <prefix>.<schema>.<table>, as Debezium names them; topic "
            f"{topic!r} is not: route it by {{topic}}, or narrow kafka.topic_pattern"
        )
    source = spec.sources[0]
    assert source.kafka is not None, "the checks want one kafka source"
    kafka = replace(source.kafka, topics=(topic,), topic_pattern=None)
    return replace(
        spec,
        name=f"{spec.name}.{topic}",
        sources=(replace(source, kafka=kafka),),
        target=replace(spec.target, path=_FIELD.sub(lambda m: values[m[1]], spec.target.path)),
        route_topic=topic,
    )


def routing_problems(data: dict[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    """What a spec mapping's routing needs: known fields, one kafka source."""
    fields = path_fields(str(data["target"].get("path", "")))
    if not fields:
        return []
    at = ("target", "path")
    unknown = [f for f in fields if f not in FIELDS]
    if unknown:
        return [
            (
                at,
                f"{{{unknown[0]}}} is not a routing field: a target path routes each topic "
                "to a table of its own by {topic}, or {schema} and {table}",
            )
        ]
    sources = data.get("sources", [])
    if len(sources) != 1 or sources[0].get("format") != "kafka":
        return [
            (
                at,
                "names {" + fields[0] + "}, which routes each topic of a kafka source to a "
                "table of its own: give exactly one source, of format kafka",
            )
        ]
    return []
