"""A HoodieStreamer job being imported: its properties and flags, what has been read of
them, and the import's notes (each setting's spec field, or why it was not imported).

Shared by the parts of `runner import-hudi` (runner/hudi/streamer_import.py and the source
mappings it calls), so that a property read by any of them is not listed as not imported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import UserError


@dataclass
class Imported:
    """The spec, and the notes written above it: what each setting became, what was not
    imported and why, and the environment variables that hold the secrets left out."""

    spec: dict[str, Any]
    mapped: list[tuple[str, str]] = field(default_factory=list)  # (setting, spec field)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (setting, why)
    env: list[tuple[str, str]] = field(default_factory=list)  # (variable, what it holds)

    def to_yaml(self, origin: str) -> str:
        import yaml

        lines = [f"# Imported by `runner import-hudi` from {origin}."]
        if self.env:
            lines.append("# Set these environment variables before a run (secrets, not copied):")
            lines += [f"#   {name}: {what}" for name, what in self.env]
        if self.mapped:
            lines.append("# Mapped:")
            lines += [f"#   {what} -> {to}" for what, to in self.mapped]
        if self.skipped:
            lines.append("# Not imported:")
            lines += [f"#   {what}: {why}" for what, why in self.skipped]
        body = yaml.safe_dump(self.spec, sort_keys=False, width=100)
        return "\n".join(lines) + "\n" + body


class Job:
    """A HoodieStreamer job being read: its properties and flags, the properties read so
    far (the others are listed as not imported), the notes of the import, and the directory
    relative files of its properties are read from."""

    def __init__(self, props: Mapping[str, str], flags: Mapping[str, str], base: Path):
        self.props = props
        self.flags = flags
        self.base = base
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

    def required_streamer(self, suffix: str, what: str, read_by: str) -> tuple[str, str]:
        """streamer(suffix), or a UserError saying that `read_by` read it and how to set it."""
        found = self.streamer(suffix)
        if found is None:
            raise UserError(
                f"no {what}: {read_by} read hoodie.streamer.{suffix} "
                f"(or hoodie.deltastreamer.{suffix}); set it with --set"
            )
        return found

    def setting(self, flag_names: Sequence[str], *names: str) -> tuple[str, str] | None:
        """The first of `flag_names` given, else the first property of `names`: on
        HoodieStreamer's command line a flag wins over the properties. A flag read counts
        as used too (the command line's notes leave it to the mapping that read it)."""
        found = self.prop(*names)
        for flag in flag_names:
            if flag in self.flags:
                self.used.add(flag)
                if found:
                    self.out.skipped.append(
                        (found[0], f"{flag} wins (a flag overrides properties)")
                    )
                return flag, self.flags[flag]
        return found

    def skip(self, found: tuple[str, str] | None, why: str) -> None:
        """Note a setting read (if set) as not imported, and why."""
        if found is not None:
            self.out.skipped.append((found[0], why))
