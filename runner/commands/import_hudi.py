"""`runner import-hudi`: a HoodieStreamer job's command line as a validated spec text.

The mapping itself is runner/hudi/streamer_import.py; this module gathers the properties
(the file, --hoodie-conf, --set, later ones winning), and validates the spec where it will
be written, since relative paths in a spec are read from its directory. A spec that does
not validate is never written.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runner.errors import InvalidSpecError, UserError
from runner.hudi.streamer_import import import_streamer, parse_streamer_args, read_properties
from runner.spec import load_spec


@dataclass(frozen=True)
class ImportedSpec:
    """The spec text, and how many settings were mapped and not imported."""

    text: str
    mapped: int
    skipped: int


def import_hudi(
    streamer_args: Sequence[str], overrides: Sequence[str], out: str | None
) -> ImportedSpec:
    """The spec of a HoodieStreamer job ([PROPS] then its flags), validated, and written to
    `out` when given; `overrides` are --set KEY=VALUE pairs, over every other property."""
    args = list(streamer_args)
    props = args.pop(0) if args and not args[0].startswith("-") else None
    flags, confs, transformers = parse_streamer_args(args)
    files = [p for p in (props, flags.get("--props")) if p]
    if len(files) > 1:
        raise UserError(f"two properties files ({files[0]}, --props {files[1]}): give one")
    values: dict[str, str] = {}
    if files:
        values.update(read_properties(Path(files[0].removeprefix("file://"))))
    for pair in (*confs, *overrides):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"{pair!r} is not KEY=VALUE")
        values[key.strip()] = value.strip()
    # a relative schema file is where the properties file is
    base = Path(files[0].removeprefix("file://")).parent if files else None
    imported = import_streamer(values, flags, transformers, base=base)
    text = imported.to_yaml(files[0] if files else "the command line")
    _validate_and_write(text, out)
    return ImportedSpec(text, len(imported.mapped), len(imported.skipped))


def _validate_and_write(text: str, out: str | None) -> None:
    """Validate the spec as a file beside `out` (or in the working directory), then move
    it to `out`; nothing is left behind otherwise."""
    directory = Path(out).resolve().parent if out else Path.cwd()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=directory, delete=False) as f:
        f.write(text)
    try:
        load_spec(f.name, resolve_paths=False)  # checked, not run: paths need no values
        if out:
            os.replace(f.name, out)
    except InvalidSpecError as exc:
        # the file is not kept, so its line numbers would point nowhere: the fields say it
        problems = re.sub(rf"^{re.escape(f.name)}:\d+:\d+: ", "  ", str(exc), flags=re.M)
        raise UserError(f"the imported spec does not validate:\n{problems}") from exc
    finally:
        if os.path.exists(f.name):
            os.unlink(f.name)
