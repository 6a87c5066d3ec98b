"""A set of specs run as one: found in files and directories, loaded, ordered by the tables
they read.

A spec with a `delta` source whose path is another spec's `target.path` runs after it
(paths compared as resolved: absolute local paths, URLs without a trailing slash), or is a
path the target template of a spec routing topics to tables could give (runner/spec/
routing.py: `warehouse/{schema}/{table}` gives any `warehouse/<segment>/<segment>`). Two
specs writing one table (or that could: a template and a path or another template it could
give), two specs of one name, and specs that read each other's tables in a circle are
refused, each problem placed in its file as `runner validate` places any other. The order
is topological, ties broken by name, so it is the same on every run.
No JVM: `runner validate DIR` checks a set without Spark.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from runner.errors import SpecProblem
from runner.sources.kinds import kind_of
from runner.spec.loader import check_spec_file
from runner.spec.located import Path_, dotted, locate
from runner.spec.model import PipelineSpec
from runner.spec.routing import could_meet, is_routed, template_pattern

SPEC_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class Found:
    """The spec files given, directories searched: `files` in the order found, and the
    YAML files under a directory that are no spec (no `target:`), left out."""

    files: tuple[str, ...]
    not_specs: tuple[str, ...] = ()


def find_spec_files(paths: Sequence[str]) -> Found:
    """The files of `paths`: a file as given, a directory's `*.yaml`/`*.yml` files (at any
    depth, sorted) whose mapping has a `target:`."""
    files: list[str] = []
    not_specs: list[str] = []
    for given in paths:
        if not Path(given).is_dir():
            files.append(given)
            continue
        for path in sorted(p for p in Path(given).rglob("*") if p.suffix in SPEC_SUFFIXES):
            (files if _has_target(path) else not_specs).append(str(path))
    return Found(tuple(dict.fromkeys(files)), tuple(not_specs))


def _has_target(path: Path) -> bool:
    """The file is a YAML mapping with a `target:` (one that does not parse is a spec to
    report, when it looks like one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return True  # reported by the loader, with the reason
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return "target:" in text
    return isinstance(data, dict) and "target" in data


@dataclass(frozen=True)
class Member:
    """One spec of a set, with the file it was given as (shown in every message)."""

    spec: PipelineSpec
    file: str

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def stem(self) -> str:
        return Path(self.file).stem


@dataclass(frozen=True)
class SpecSet:
    """The specs in the order they run, and the ones each reads the table of."""

    members: tuple[Member, ...]
    upstreams: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # by spec name

    def pick(self, select: Sequence[str], exclude: Sequence[str], with_upstream: bool) -> SpecSet:
        """The specs `select` names (every one when empty), with their upstreams when
        asked, without those `exclude` names; in the set's order. A name is a spec's
        `name:` or its file's stem; one that names no spec raises ValueError."""
        chosen = self._named(select) if select else {m.name for m in self.members}
        if with_upstream:
            chosen |= {u for name in chosen for u in self.all_upstreams(name)}
        chosen -= self._named(exclude)
        members = tuple(m for m in self.members if m.name in chosen)
        upstreams = {m.name: self.upstreams.get(m.name, ()) for m in members}
        return SpecSet(members, upstreams)

    def all_upstreams(self, name: str) -> set[str]:
        """The specs whose tables `name` reads, directly or through others."""
        found: set[str] = set()
        todo = list(self.upstreams.get(name, ()))
        while todo:
            upstream = todo.pop()
            if upstream not in found:
                found.add(upstream)
                todo += self.upstreams.get(upstream, ())
        return found

    def _named(self, names: Iterable[str]) -> set[str]:
        chosen: set[str] = set()
        unknown = []
        for name in names:
            hits = {m.name for m in self.members if name in (m.name, m.stem)}
            chosen |= hits
            if not hits:
                unknown.append(name)
        if unknown:
            known = ", ".join(m.name for m in self.members)
            raise ValueError(
                f"{', '.join(unknown)}: no spec of the set has this name or file name "
                f"(the set: {known})"
            )
        return chosen


def load_spec_set(
    files: Sequence[str], parse_transform: bool = True, resolve_paths: bool = True
) -> tuple[SpecSet | None, list[SpecProblem]]:
    """Every spec of `files` loaded and the set ordered; None with every problem found
    (each spec's own, then the set's) when any spec or the set is invalid."""
    members: list[Member] = []
    problems: list[SpecProblem] = []
    for file in files:
        spec, found = check_spec_file(file, resolve_paths, parse_transform)
        problems += found
        if spec is not None:
            members.append(Member(spec, file))
    if problems:
        return None, problems
    problems = _names_problems(members) + _targets_problems(members)
    if problems:
        return None, problems
    upstreams = upstreams_of(members)
    order, cycle = _order(members, upstreams)
    if cycle:
        return None, [_cycle_problem(cycle, {m.name: m for m in members})]
    by_name = {m.name: m for m in members}
    return SpecSet(tuple(by_name[n] for n in order), upstreams), []


def place(path: str) -> str:
    """A table's path as compared between specs: an absolute local path, a URL as written
    without a trailing slash."""
    if "://" in path:
        return path.rstrip("/")
    return os.path.normpath(os.path.abspath(path))


def _mark(file: str, path: Path_) -> tuple[int, int]:
    doc, _ = locate(Path(file).read_text(encoding="utf-8"), file)
    return doc.mark(path) if doc is not None else (1, 1)


def problem_at(file: str, path: Path_, message: str) -> SpecProblem:
    """A problem of the set, placed at `path` in `file`."""
    line, col = _mark(file, path)
    return SpecProblem(file, line, col, dotted(path), message)


def _names_problems(members: Sequence[Member]) -> list[SpecProblem]:
    first: dict[str, Member] = {}
    problems = []
    for member in members:
        other = first.setdefault(member.name, member)
        if other is not member:
            problems.append(
                problem_at(
                    member.file,
                    ("name",),
                    f"{other.file} has this name too; the specs of a set need names of their "
                    "own (their history, metrics and --select tell them apart by name)",
                )
            )
    return problems


def _targets_problems(members: Sequence[Member]) -> list[SpecProblem]:
    """Two specs that write one table, or could: a spec that routes topics to tables
    (runner/spec/routing.py) could write any table its template gives."""
    first: dict[str, Member] = {}
    routed: list[Member] = []
    problems = []
    for index, member in enumerate(members):
        other = first.setdefault(place(member.spec.target.path), member)
        if other is not member:
            message = (
                f"{other.file} writes this table too; each spec of a set writes a table "
                "of its own: run specs that write one table with separate `runner run`s"
            )
        else:
            earlier = members[:index] if is_routed(member.spec) else routed
            message = next(filter(None, (_could_share(member, o) for o in earlier)), "")
        if message:
            problems.append(problem_at(member.file, ("target", "path"), message))
        if is_routed(member.spec):
            routed.append(member)
    return problems


def _could_share(member: Member, other: Member) -> str:
    """Why `member` and `other`, one of them or both routing topics to tables, could write
    one table ('' when they cannot)."""
    mine, theirs = place(member.spec.target.path), place(other.spec.target.path)
    if is_routed(member.spec) and is_routed(other.spec):
        if not could_meet(mine, theirs):
            return ""
        return (
            f"{other.file} routes topics to {theirs}, and a topic of each could be routed "
            "to one table; each spec of a set writes tables of its own: give the templates "
            "different fixed parts (a directory of each)"
        )
    if is_routed(member.spec):
        if not template_pattern(mine).fullmatch(theirs):
            return ""
        return (
            f"a topic could be routed to {theirs}, the table {other.file} writes; each spec "
            "of a set writes tables of its own: give the template a fixed part that table's "
            "path has not (a directory of its own)"
        )
    if not template_pattern(theirs).fullmatch(mine):
        return ""
    return (
        f"{other.file} routes topics to {theirs}, which could route a topic to this table; "
        "each spec of a set writes tables of its own: write this table outside the template's "
        "directory"
    )


def upstreams_of(members: Sequence[Member]) -> dict[str, tuple[str, ...]]:
    """For each spec, the specs whose target one of its delta sources reads (by name): a
    table a routing spec's template could give (`warehouse/{schema}/{table}`: any
    `warehouse/<segment>/<segment>`) is that spec's."""
    writers = {place(m.spec.target.path): m.name for m in members if not is_routed(m.spec)}
    templates = [
        (template_pattern(place(m.spec.target.path)), m.name) for m in members if is_routed(m.spec)
    ]
    found = {}
    for member in members:
        names = set()
        for path in _tables_read(member):
            if path in writers:
                names.add(writers[path])
            names |= {name for pattern, name in templates if pattern.fullmatch(path)}
        found[member.name] = tuple(sorted(names - {member.name}))
    return found


def _writes(member: Member, path: str) -> bool:
    """`member` writes the table at `path` (a place), or routes a topic to it."""
    target = place(member.spec.target.path)
    if is_routed(member.spec):
        return template_pattern(target).fullmatch(path) is not None
    return target == path


def _tables_read(member: Member) -> list[str]:
    """The tables the spec's sources read, as `place` gives them."""
    return [p for p in _places_read(member) if p]


def _places_read(member: Member) -> list[str]:
    """Per source, the table it reads ('' when it reads no table)."""
    read = (kind_of(s).table_read(s) for s in member.spec.sources)
    return [place(path) if path is not None else "" for path in read]


def _order(
    members: Sequence[Member], upstreams: Mapping[str, tuple[str, ...]]
) -> tuple[list[str], list[str]]:
    """The run order (upstreams first, ties by name), or a cycle of names when there is
    one (its first name again at its end)."""
    waiting = {m.name: len(upstreams[m.name]) for m in members}
    downstreams: dict[str, list[str]] = {name: [] for name in waiting}
    for name, ups in upstreams.items():
        for up in ups:
            downstreams[up].append(name)
    ready = [name for name, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        name = heapq.heappop(ready)
        order.append(name)
        for down in downstreams[name]:
            waiting[down] -= 1
            if waiting[down] == 0:
                heapq.heappush(ready, down)
    if len(order) == len(waiting):
        return order, []
    return order, _cycle({n for n in waiting if n not in order}, upstreams)


def _cycle(left: set[str], upstreams: Mapping[str, tuple[str, ...]]) -> list[str]:
    """A cycle among `left` (the specs no order could place): walk upstream from the first
    by name until a spec comes round again; the cycle in run direction, from its first
    spec by name."""
    path = [min(left)]
    while True:
        step = min(u for u in upstreams[path[-1]] if u in left)
        if step in path:
            loop = list(reversed(path[path.index(step) :]))
            first = loop.index(min(loop))  # from the first by name, for a stable message
            loop = loop[first:] + loop[:first]
            return [*loop, loop[0]]
        path.append(step)


def _cycle_problem(cycle: list[str], members: Mapping[str, Member]) -> SpecProblem:
    shown = " -> ".join(members[name].file for name in cycle)
    first, second = members[cycle[0]], members[cycle[1]]
    index = next(i for i, path in enumerate(_places_read(second)) if _writes(first, path))
    return problem_at(
        second.file,
        ("sources", index, "path"),
        f"the specs read each other's tables in a circle: {shown}; a set runs each spec "
        "after the ones it reads, so one of them must read something else",
    )
