"""Pipeline specs: YAML loading, JSON Schema validation, semantic checks, typed model.

The names below load on first use (PEP 562): a command that needs only a light module of
the package (runner.spec.secrets, for every command's error text) does not pay for the
loader and jsonschema, about a quarter of a second (`runner read --key`'s budget is half).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `as` re-exports them for the type checker
    from runner.spec.loader import check_spec_file as check_spec_file
    from runner.spec.loader import load_spec as load_spec
    from runner.spec.model import IndexSpec as IndexSpec
    from runner.spec.model import KeyGenSpec as KeyGenSpec
    from runner.spec.model import PipelineSpec as PipelineSpec
    from runner.spec.model import Source as Source
    from runner.spec.model import SparkSettings as SparkSettings
    from runner.spec.model import Target as Target
    from runner.spec.schema_check import schema_path as schema_path

_HOMES = {
    "check_spec_file": "runner.spec.loader",
    "load_spec": "runner.spec.loader",
    "IndexSpec": "runner.spec.model",
    "KeyGenSpec": "runner.spec.model",
    "PipelineSpec": "runner.spec.model",
    "Source": "runner.spec.model",
    "SparkSettings": "runner.spec.model",
    "Target": "runner.spec.model",
    "schema_path": "runner.spec.schema_check",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'runner.spec' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
