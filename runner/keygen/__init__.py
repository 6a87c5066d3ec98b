"""Key generators: the spec's `type` names a class here, or `package.module:Class` of the user's."""

from __future__ import annotations

import importlib
import sys

from runner.errors import UserError
from runner.keygen.base import KeyColumns, KeyGenerator
from runner.keygen.complex import ComplexKeyGenerator
from runner.keygen.custom import CustomKeyGenerator
from runner.keygen.global_delete import GlobalDeleteKeyGenerator
from runner.keygen.nonpartitioned import NonPartitionedKeyGenerator
from runner.keygen.simple import SimpleKeyGenerator
from runner.keygen.timestamp import TimestampBasedKeyGenerator
from runner.spec.model import KeyGenSpec

# The class of each generator runner.spec.keygen_types describes (a test holds them equal).
GENERATOR_CLASSES: dict[str, type[KeyGenerator]] = {
    "SIMPLE": SimpleKeyGenerator,
    "COMPLEX": ComplexKeyGenerator,
    "CUSTOM": CustomKeyGenerator,
    "TIMESTAMP": TimestampBasedKeyGenerator,
    "NON_PARTITIONED": NonPartitionedKeyGenerator,
    "GLOBAL_DELETE": GlobalDeleteKeyGenerator,
}


def build_key_generator(spec: KeyGenSpec) -> KeyGenerator:
    if spec.class_path:
        return load_user_class(spec.class_path, spec.search_path)(spec)
    return GENERATOR_CLASSES[spec.type](spec)


def load_user_class(class_path: str, search_path: str | None) -> type[KeyGenerator]:
    """Import `package.module:ClassName`, looking in the spec's directory too."""
    module_name, _, class_name = class_path.partition(":")
    if search_path and search_path not in sys.path:
        sys.path.append(search_path)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(
            f"key_generator.class {class_path}: cannot import {module_name} ({exc}); put it "
            "beside the spec or on PYTHONPATH"
        ) from exc
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, KeyGenerator)):
        raise UserError(
            f"key_generator.class {class_path}: {module_name} has no class {class_name} "
            "that subclasses runner.keygen.KeyGenerator"
        )
    return cls


__all__ = ["GENERATOR_CLASSES", "KeyColumns", "KeyGenerator", "build_key_generator"]
