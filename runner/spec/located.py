"""A spec's YAML with the position of every value and every mapping key.

Every check of the loader reports FILE:LINE:COL: dotted.path: message; this module turns a
field path into its line and column (`Located.mark`) and collects the problems (`Problems`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from runner.errors import SpecProblem

Path_ = tuple[str | int, ...]
Mark = tuple[int, int]


def dotted(path: Path_) -> str:
    """('target', 'index', 'hash_fields', 1) -> 'target.index.hash_fields[1]'."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


@dataclass
class Located:
    """The parsed document with the YAML position of every value and every mapping key."""

    data: Any
    value_marks: dict[Path_, Mark]
    key_marks: dict[Path_, Mark]
    lines: tuple[str, ...] = ()  # the file's text

    def mark(self, path: Path_, key: bool = False) -> Mark:
        marks = self.key_marks if key else self.value_marks
        while path not in marks and path:
            path = path[:-1]
        return marks.get(path, (1, 1))

    def mark_within(self, path: Path_, offset: int) -> Mark:
        """Where character `offset` of the string at `path` is in the file, when the YAML
        holds the string as it is (a literal block `|`, or a scalar on one line); else
        where the value starts."""
        line, col = self.mark(path)
        text = self.lines[line - 1] if line <= len(self.lines) else ""
        value = value_at(self.data, path)
        if not isinstance(value, str) or offset < 0 or offset > len(value):
            return line, col
        row = value.count("\n", 0, offset)
        column = offset - (value.rfind("\n", 0, offset) + 1)
        if text[col - 1 : col].startswith("|"):  # the block's lines, indented alike
            content = self.lines[line : line + value.rstrip("\n").count("\n") + 1]
            indent = min((len(c) - len(c.lstrip(" ")) for c in content if c.strip()), default=0)
            return line + 1 + row, indent + column + 1
        if "\n" not in value:  # plain, or quoted without escapes before it
            start = text.find(value, col - 1)
            if start in (col - 1, col):
                return line, start + column + 1
        return line, col


@dataclass
class Problems:
    """The problems of one spec file, each placed where its field is written."""

    doc: Located
    file: str
    found: list[SpecProblem] = field(default_factory=list)

    def __call__(self, path: Path_, message: str, offset: int | None = None) -> None:
        """A problem at `path` (at character `offset` of its string, where given)."""
        line, col = self.doc.mark(path) if offset is None else self.doc.mark_within(path, offset)
        self.found.append(SpecProblem(self.file, line, col, dotted(path), message))


def locate(text: str, file: str) -> tuple[Located | None, list[SpecProblem]]:
    """The document and its marks, or None with the problem when it is no YAML at all; a
    duplicate key (YAML keeps the last one silently) is a problem too."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        reason = getattr(exc, "problem", None) or str(exc)
        return None, [SpecProblem(file, line, col, "", f"not valid YAML: {reason}")]
    if node is None:
        return None, [SpecProblem(file, 1, 1, "", "the spec is empty")]
    walk = _Walk(file)
    walk.node(node, ())
    data = yaml.safe_load(text)
    return Located(data, walk.values, walk.keys, tuple(text.splitlines())), walk.problems


@dataclass
class _Walk:
    """Records the marks of a composed YAML tree, node by node."""

    file: str
    values: dict[Path_, Mark] = field(default_factory=dict)
    keys: dict[Path_, Mark] = field(default_factory=dict)
    problems: list[SpecProblem] = field(default_factory=list)

    def node(self, n: yaml.Node, path: Path_) -> None:
        self.values[path] = (n.start_mark.line + 1, n.start_mark.column + 1)
        if isinstance(n, yaml.MappingNode):
            self.mapping(n, path)
        elif isinstance(n, yaml.SequenceNode):
            for i, item in enumerate(n.value):
                self.node(item, (*path, i))

    def mapping(self, n: yaml.MappingNode, path: Path_) -> None:
        seen: set[str] = set()
        for k, v in n.value:
            name = str(k.value)
            kpath = (*path, name)
            if name in seen:
                self.problems.append(
                    SpecProblem(
                        self.file,
                        k.start_mark.line + 1,
                        k.start_mark.column + 1,
                        dotted(kpath),
                        "duplicate key: YAML keeps only the last one; remove one of them",
                    )
                )
            seen.add(name)
            self.keys[kpath] = (k.start_mark.line + 1, k.start_mark.column + 1)
            self.node(v, kpath)


def strings_with_paths(value: Any, path: Path_) -> Iterator[tuple[Path_, str]]:
    """Every string under `value`, with its field path."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_with_paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from strings_with_paths(item, (*path, i))


def value_at(data: Any, path: Path_) -> Any:
    """The value at a field path, None where the path leads nowhere."""
    for part in path:
        if isinstance(data, dict) and isinstance(part, str):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return None
    return data
