"""The user's own classes named in a spec (key generators, mergers): imported only when named,
from the spec's directory or PYTHONPATH, and checked to subclass the runner's base."""

from __future__ import annotations

import importlib
import sys
from typing import Any

from runner.errors import UserError


def import_user_class(
    class_path: str, search_path: str | None, setting: str, base: type[Any]
) -> type[Any]:
    """Import `package.module:ClassName` (`setting` names the spec field, for errors)."""
    module_name, _, class_name = class_path.partition(":")
    if search_path and search_path not in sys.path:
        sys.path.append(search_path)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(
            f"{setting} {class_path}: cannot import {module_name} ({exc}); put it "
            "beside the spec or on PYTHONPATH"
        ) from exc
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise UserError(
            f"{setting} {class_path}: {module_name} has no class {class_name} "
            f"that subclasses {base.__module__}.{base.__qualname__}"
        )
    return cls
