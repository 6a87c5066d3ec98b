"""The bucket of a record key without Spark: the index fields' values read back from the key.

The writers compute a row's bucket in Spark as pmod(hash(string(f1), ..., string(fk)), N)
over the index hash fields (runner/index/bucket.py), and its record key from the very same
string forms (runner/fields.py, FieldStrings): a one-field key is the value itself;
a composite key is Hudi's `f1:v1,f2:v2`, a null value written `__null__` (the hash skips a
null) and an empty one `__empty__`. The writer refuses a value that would make this
ambiguous (one holding `,f2:` or equal to a placeholder), so the hash fields' strings read
back from a key are exactly what Spark hashed, and runner/index/string_hash.py gives the
same hash.

A table whose keys a user's key generator class forms, or whose stored settings say less
than this needs, has no KeyHasher: a lookup then prunes by the files' key ranges only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runner.hudi.keygen_types import EMPTY_PLACEHOLDER, KEY_GENERATORS, NULL_PLACEHOLDER
from runner.index.string_hash import HASH_FUNCTION, spark_string_hash

# The stored settings read here: written by runner/delta/table_config.py table_settings and
# runner/keygen/base.py KeyGenerator.settings.
HASH_FUNCTION_SETTING = "runner.index.hash.function"
HASH_FIELDS_SETTING = "runner.index.hash.fields"
KEYGEN_TYPE_SETTING = "runner.keygen.type"
KEYGEN_CLASS_SETTING = "runner.keygen.class"
RECORD_KEY_SETTING = "runner.keygen.record.key"
ENCODING_SETTING = "runner.keygen.complex.encoding"

# Generators whose key is `f:v` pairs even for one field, with no setting to say otherwise
# (runner/keygen/global_delete.py).
_ALWAYS_COMPOSITE = frozenset({"GLOBAL_DELETE"})


def _fields(value: str | None) -> tuple[str, ...]:
    return tuple(f for f in (value or "").split(",") if f)


@dataclass(frozen=True)
class KeyHasher:
    """How the keys of one table are formed, and so how to hash one to its bucket."""

    record_key: tuple[str, ...]
    hash_fields: tuple[str, ...]
    composite: bool  # keys are `f1:v1,f2:v2`; else the one field's value

    def field_values(self, key: str) -> tuple[str | None, ...] | None:
        """The record key fields' string values (None for a null) the key was formed
        from; None when the writer forms no key like it (then no bucket can be named)."""
        if not self.composite:
            return (key,) if key else None  # a null or empty one-field key is refused
        first = f"{self.record_key[0]}:"
        if not key.startswith(first):
            return None
        parts, at = [], len(first)
        for name in self.record_key[1:]:
            separator = f",{name}:"
            end = key.find(separator, at)
            if end < 0:
                return None
            parts.append(key[at:end])
            at = end + len(separator)
        parts.append(key[at:])
        if "" in parts:  # an empty value is written __empty__
            return None
        placeholders = {NULL_PLACEHOLDER: None, EMPTY_PLACEHOLDER: ""}
        return tuple(placeholders.get(p, p) for p in parts)

    def hash_of(self, key: str) -> int | None:
        """Spark's hash() of the key's index fields, as the writers computed it for its
        row (BucketLayout.bucket_of turns it into the bucket); None as for field_values."""
        values = self.field_values(key)
        if values is None:
            return None
        by_name = dict(zip(self.record_key, values, strict=True))
        return spark_string_hash(tuple(by_name[f] for f in self.hash_fields))

    def key_form(self) -> str:
        """What a key of this table looks like, for a message."""
        if not self.composite:
            return f"the value of {self.record_key[0]}"
        return ",".join(f"{name}:VALUE" for name in self.record_key)


def key_hasher(configuration: Mapping[str, str]) -> KeyHasher | str:
    """The KeyHasher of a table with these stored settings, or why it has none."""
    function = configuration.get(HASH_FUNCTION_SETTING)
    if function != HASH_FUNCTION:
        return f"its hash function is {function!r}, not the one this runner computes"
    user_class = configuration.get(KEYGEN_CLASS_SETTING)
    if user_class:
        return f"its keys come from the key generator class {user_class}"
    kind = configuration.get(KEYGEN_TYPE_SETTING, "")
    record_key = _fields(configuration.get(RECORD_KEY_SETTING))
    hash_fields = _fields(configuration.get(HASH_FIELDS_SETTING)) or record_key
    described = KEY_GENERATORS.get(kind)
    if described is None or not record_key:
        return f"its key generator settings ({kind!r} on {record_key}) are not ones it knows"
    if not set(hash_fields) <= set(record_key):
        return f"its hash fields {list(hash_fields)} are not all record key fields"
    composite = kind in _ALWAYS_COMPOSITE or len(record_key) > 1
    if described.field_prefixed_keys and len(record_key) == 1:
        encoding = configuration.get(ENCODING_SETTING)
        if encoding not in ("FIELD_PREFIXED", "VALUE_ONLY"):
            return f"its one-field {kind} key's encoding is not stored"
        composite = encoding == "FIELD_PREFIXED"
    return KeyHasher(record_key, hash_fields, composite)
