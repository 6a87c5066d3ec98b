"""Key generators: the spec's `type` names a class here, or `package.module:Class` of the user's."""

from __future__ import annotations

from runner.keygen.base import KeyColumns, KeyGenerator
from runner.keygen.complex import ComplexKeyGenerator
from runner.keygen.global_delete import GlobalDeleteKeyGenerator
from runner.keygen.nonpartitioned import NonPartitionedKeyGenerator
from runner.keygen.simple import SimpleKeyGenerator
from runner.spec.model import KeyGenSpec

KEY_GENERATORS: dict[str, type[KeyGenerator]] = {
    "SIMPLE": SimpleKeyGenerator,
    "COMPLEX": ComplexKeyGenerator,
    "NON_PARTITIONED": NonPartitionedKeyGenerator,
    "GLOBAL_DELETE": GlobalDeleteKeyGenerator,
}


def build_key_generator(spec: KeyGenSpec) -> KeyGenerator:
    return KEY_GENERATORS[spec.type](spec)


__all__ = ["KEY_GENERATORS", "KeyColumns", "KeyGenerator", "build_key_generator"]
