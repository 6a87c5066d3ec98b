"""Did you mean: the nearest existing name to one a user typed (a spec file, a source's path,
a command), for the message that says it is not there."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable

CUTOFF = 0.6  # difflib's default: `orders.yml` finds `orders.yaml`, `nowhere` finds nothing


def nearest_name(name: str, names: Iterable[str], cutoff: float = CUTOFF) -> str | None:
    """The one of `names` closest to `name`, if any is close enough."""
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=cutoff)
    return close[0] if close else None


def nearest_path(path: str) -> str | None:
    """The existing local path nearest to `path`, which does not exist: its first missing
    name replaced by the nearest name beside it (and the rest kept, when that exists);
    None when no name is near."""
    parts = path.split(os.sep)
    for i in range(1, len(parts) + 1):
        here = os.sep.join(parts[:i])
        if not here or os.path.lexists(here):
            continue
        parent = os.sep.join(parts[: i - 1]) or ("/" if path.startswith(os.sep) else ".")
        try:
            siblings = os.listdir(parent)
        except OSError:
            return None
        found = nearest_name(parts[i - 1], siblings)
        if found is None:
            return None
        fixed = os.sep.join([*parts[: i - 1], found])
        whole = os.sep.join([fixed, *parts[i:]])
        return whole if os.path.lexists(whole) else fixed
    return None


def did_you_mean(path: str) -> str:
    """`; did you mean PATH?` for a local path that does not exist, or nothing."""
    found = nearest_path(path)
    return f"; did you mean {found}?" if found else ""
