"""A command's options as one frozen value, so no function takes a long argument list.

click hands a command its options as keyword arguments; `options_as(RunCommand)` under the
option decorators builds the value, and the command's body reads its fields. The function
keeps its name and docstring, so the command's name and `--help` are unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def options_as(kind: type[T]) -> Callable[[Callable[[T], None]], Callable[..., None]]:
    """Decorate `command(options: kind)` so that click calls it with its options."""

    def wrap(command: Callable[[T], None]) -> Callable[..., None]:
        @functools.wraps(command)
        def from_click(**given: Any) -> None:
            command(kind(**given))

        return from_click

    return wrap
