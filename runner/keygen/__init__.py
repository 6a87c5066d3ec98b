"""Key generators: the spec's `type` names a class here, or `package.module:Class` of the user's."""

from __future__ import annotations

from runner.keygen.base import KeyColumns, KeyGenerator
from runner.keygen.complex import ComplexKeyGenerator
from runner.keygen.custom import CustomKeyGenerator
from runner.keygen.global_delete import GlobalDeleteKeyGenerator
from runner.keygen.nonpartitioned import NonPartitionedKeyGenerator
from runner.keygen.simple import SimpleKeyGenerator
from runner.keygen.timestamp import TimestampBasedKeyGenerator
from runner.spec.model import KeyGenSpec
from runner.user_code import import_user_class

# The class of each generator runner.hudi.keygen_types describes (a test holds them equal).
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
    cls: type[KeyGenerator] = import_user_class(
        class_path, search_path, "key_generator.class", KeyGenerator
    )
    return cls


__all__ = ["GENERATOR_CLASSES", "KeyColumns", "KeyGenerator", "build_key_generator"]
