"""Building blocks shared by Hudi's key generators, as Spark column expressions.

Constants and encodings follow Hudi's KeyGenUtils and PartitionPathEncodeUtils (see
docs/keygen.md): `__null__`/`__empty__` placeholders inside composite keys, the default
partition `__HIVE_DEFAULT_PARTITION__`, and Hive's path escaping for url_encode. Each takes
the FieldStrings that turns field values into text (runner/fields.py); the default, Spark's
cast, differs from Hudi only for timestamps.
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import Column
from pyspark.sql import functions as F

from runner.fields import CAST_STRINGS, FieldStrings, field_value
from runner.hudi.keygen_types import EMPTY_PLACEHOLDER, NULL_PLACEHOLDER

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

# Characters Hive's escapePathName turns into %XX (besides the control characters).
_ESCAPED = "\"#%'*/:=?\\{[]^\x7f"
_ESCAPED_ALL = [chr(c) for c in range(0x20)] + list(_ESCAPED)
_NEEDS_ESCAPE_RE = "[\\x00-\\x1f\"#%'*/:=?\\\\{\\[\\]^\\x7f]"


def escape_path_name(value: Column) -> Column:
    """Hive's escapePathName: control characters and "#%'*/:=?\\{[]^ DEL become %XX."""
    escaped = reduce(
        lambda col, ch: F.replace(col, F.lit(ch), F.lit(f"%{ord(ch):02X}")),
        # '%' first, so the escapes it adds are not escaped again.
        ["%", *[c for c in _ESCAPED_ALL if c != "%"]],
        value,
    )
    return F.when(value.rlike(_NEEDS_ESCAPE_RE), escaped).otherwise(value)


def is_null_or_empty(value: Column) -> Column:
    return value.isNull() | (value == F.lit(""))


def simple_record_key(name: str, strings: FieldStrings = CAST_STRINGS) -> tuple[Column, Column]:
    """Single-field encoding: the value as is; null or empty is an error (Hudi's message)."""
    value = strings(name)
    bad = is_null_or_empty(value)
    shown = F.coalesce(value, F.lit("null"))
    error = F.when(
        bad,
        F.concat(
            F.lit('recordKey value: "'),
            shown,
            F.lit(f'" for field: "{name}" cannot be null or empty.'),
        ),
    )
    return F.when(~bad, value), error


def complex_record_key(
    names: tuple[str, ...], strings: FieldStrings = CAST_STRINGS
) -> tuple[Column, Column]:
    """List encoding `f1:v1,f2:v2`; null/empty parts become placeholders; all-empty is an error.

    The encoding is Hudi's, and it is ambiguous: `a="x,b:1", b="2"` and `a="x", b="1,b:2"`
    both render `a:x,b:1,b:2`, and a value `__null__` renders as a null does. Such a value
    is a key error (quarantined or failing the run), never a silently shared key."""
    parts = []
    for name in names:
        value = strings(name)
        encoded = (
            F.when(value.isNull(), F.lit(NULL_PLACEHOLDER))
            .when(value == F.lit(""), F.lit(EMPTY_PLACEHOLDER))
            .otherwise(value)
        )
        parts.append(F.concat(F.lit(f"{name}:"), encoded))
    key = F.concat_ws(",", *parts)
    all_bad = reduce(lambda a, b: a & b, [is_null_or_empty(strings(n)) for n in names])
    error = F.coalesce(
        *[_missing(name) for name in names if "." in name],
        F.when(
            all_bad,
            F.concat(
                F.lit('recordKey values: "'),
                key,
                F.lit(f'" for fields: [{", ".join(names)}] cannot be entirely null or empty.'),
            ),
        ),
        *[_ambiguous_part(name, names, strings) for name in names],
    )
    return F.when(error.isNull(), key), error


def _missing(name: str) -> Column:
    """Hudi's error for a dotted field of a composite key with a null struct on the way: its
    insert and upsert look such a field up strictly (its bulk_insert writes `__null__`)."""
    parts = name.split(".")
    on_the_way = [field_value(".".join(parts[:i])).isNull() for i in range(1, len(parts))]
    return F.when(
        reduce(lambda a, b: a | b, on_the_way),
        F.lit(f"Record key field '{name}' does not exist in the input record"),
    )


def _ambiguous_part(name: str, names: tuple[str, ...], strings: FieldStrings) -> Column:
    """The reason a field's value would make the composite key ambiguous, else null: it
    holds the separator before a later field (`,f2:`), or equals a placeholder."""
    value = strings(name)
    reasons = [
        F.when(
            value.contains(separator),
            F.lit(
                f'recordKey value of field "{name}" holds "{separator}", the separator of '
                "the composite key encoding, so another record could render the same key; "
                "replace it in the transform or key on other fields."
            ),
        )
        for separator in (f",{later}:" for later in names[1:])
    ]
    reasons += [
        F.when(
            value == F.lit(placeholder),
            F.lit(
                f'recordKey value of field "{name}" is "{placeholder}", the placeholder of '
                f"{meaning} value, so it would share its key with one; replace it in the "
                "transform."
            ),
        )
        for placeholder, meaning in ((NULL_PLACEHOLDER, "a null"), (EMPTY_PLACEHOLDER, "an empty"))
    ]
    return F.coalesce(*reasons)


def partition_part(
    name: str, hive_style: bool, url_encode: bool, strings: FieldStrings = CAST_STRINGS
) -> Column:
    """One partition path part: default partition for null/empty, escaping, hive prefix."""
    value = strings(name)
    encoded = escape_path_name(value) if url_encode else value
    part = F.when(is_null_or_empty(value), F.lit(DEFAULT_PARTITION)).otherwise(encoded)
    return F.concat(F.lit(f"{name}="), part) if hive_style else part


def join_parts(parts: list[Column]) -> Column:
    return F.concat_ws("/", *parts) if parts else F.lit("")
