"""Every built-in key generator described once: its name in the spec, Hudi's names for it,
and the facts validation, Hudi-property parsing, stored table settings and the generator
registry (runner.keygen) read. A new generator is one more entry here and one class there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

HUDI_PACKAGE = "org.apache.hudi.keygen."
# What Hudi's key generators write for a null and an empty field value in a record key
# (runner/keygen/common.py); `runner read --key` reads them back (runner/commands/key_bucket.py)
NULL_PLACEHOLDER = "__null__"
EMPTY_PLACEHOLDER = "__empty__"

# several: any number, none giving the path "" (as Hudi's ComplexKeyGenerator writes it);
# typed: CUSTOM's field:TYPE
PartitionFields = Literal["none", "one", "several", "typed"]


@dataclass(frozen=True)
class KeyGenType:
    name: str  # `key_generator.type` in a spec, and `runner.keygen.type` in a table
    hudi_classes: tuple[str, ...]  # hoodie.datasource.write.keygenerator.class values
    hudi_types: tuple[str, ...]  # hoodie.datasource.write.keygenerator.type values
    partition_fields: PartitionFields
    one_key_field: bool = False  # takes exactly one record key field
    timestamp: bool = False  # its partition path is a formatted timestamp
    field_prefixed_keys: bool = False  # a one-field key is written field:value (COMPLEX)


def _hudi(stem: str, avro_stem: str | None = None) -> tuple[str, ...]:
    return (
        f"{HUDI_PACKAGE}{stem}KeyGenerator",
        f"{HUDI_PACKAGE}{avro_stem or stem + 'Avro'}KeyGenerator",
    )


KEY_GENERATORS: dict[str, KeyGenType] = {
    t.name: t
    for t in (
        KeyGenType("SIMPLE", _hudi("Simple"), ("SIMPLE", "SIMPLE_AVRO"), "one", one_key_field=True),
        KeyGenType(
            "COMPLEX",
            _hudi("Complex"),
            ("COMPLEX", "COMPLEX_AVRO"),
            "several",
            field_prefixed_keys=True,
        ),
        KeyGenType("CUSTOM", _hudi("Custom"), ("CUSTOM", "CUSTOM_AVRO"), "typed"),
        KeyGenType(
            "TIMESTAMP",
            _hudi("TimestampBased"),
            ("TIMESTAMP", "TIMESTAMP_AVRO"),
            "one",
            one_key_field=True,
            timestamp=True,
        ),
        KeyGenType(
            "NON_PARTITIONED",
            _hudi("Nonpartitioned"),
            ("NON_PARTITION", "NON_PARTITION_AVRO"),
            "none",
        ),
        KeyGenType(
            "GLOBAL_DELETE",
            _hudi("GlobalDelete", "GlobalAvroDelete"),
            ("GLOBAL_DELETE", "GLOBAL_DELETE_AVRO"),
            "none",
        ),
    )
}

# Hudi's names for each generator, for `key_generator.properties` and `runner keys -p`
HUDI_CLASSES = {c: t.name for t in KEY_GENERATORS.values() for c in t.hudi_classes}
HUDI_TYPES = {h: t.name for t in KEY_GENERATORS.values() for h in t.hudi_types}
