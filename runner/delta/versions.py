"""Which version of a table a user names: a version number, or an instant (the newest
commit whose instant is at or before it), as `runner read --as-of` and `runner restore --to`
take them."""

from __future__ import annotations

from deltalake import DeltaTable

from runner.delta.change_feed import commit_instant
from runner.errors import UserError

INSTANT_DIGITS = 17  # yyyyMMddHHmmssSSS


def is_instant(value: str) -> bool:
    return value.isdigit() and len(value) == INSTANT_DIGITS


def version_named(table: DeltaTable, value: str, option: str) -> int:
    """The version `value` names: a number below 17 digits is a version, a 17-digit one an
    instant (the newest commit at or before it: a commit's instant is its runner's, else
    its timestamp's). `option` names the option in errors."""
    if value.isdigit() and len(value) < INSTANT_DIGITS:
        version = int(value)
        if version > table.version():
            raise UserError(f"{option} {value}: the table's latest version is {table.version()}")
        return version
    if not is_instant(value):
        raise UserError(
            f"{option} {value!r}: give a version number or an instant (yyyyMMddHHmmssSSS)"
        )
    for commit in table.history():  # newest first
        if commit_instant(commit) <= value:
            return int(commit["version"])
    raise UserError(f"{option} {value}: the table has no commit at or before that instant")
