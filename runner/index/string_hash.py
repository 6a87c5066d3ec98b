"""Spark's `hash()` over strings, in Python: the bucket of a key without a JVM.

`runner read --key` (and any reader outside Spark) computes a key's bucket with it; the
writers compute it in Spark (runner/index/bucket.py). Spark's Murmur3 x86_32 (seed 42)
differs from the reference Murmur3 in one place: each tail byte of a string (its last
len % 4 bytes) is mixed alone, as a signed int. tests/spark/test_string_hash.py checks it
against Spark itself.
"""

from __future__ import annotations

import struct

MASK = 0xFFFFFFFF
SEED = 42
# The bucket function's name, stored in each table's settings (runner/delta/table_config.py)
HASH_FUNCTION = "spark_murmur3_x86_32_seed42(string(fields)) pmod buckets"


def _scramble(k: int) -> int:
    k = (k * 0xCC9E2D51) & MASK
    k = ((k << 15) | (k >> 17)) & MASK
    return (k * 0x1B873593) & MASK


def _step(h: int, k: int) -> int:
    h ^= _scramble(k)
    h = ((h << 13) | (h >> 19)) & MASK
    return (h * 5 + 0xE6546B64) & MASK


def _murmur3(data: bytes, seed: int) -> int:
    h = seed
    whole = len(data) // 4 * 4
    for (word,) in struct.iter_unpack("<I", data[:whole]):  # little-endian, as Spark reads
        h = _step(h, word)
    for byte in data[whole:]:
        h = _step(h, (byte - 256 if byte > 127 else byte) & MASK)
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & MASK
    return h ^ (h >> 16)


def spark_string_hash(values: tuple[str | None, ...]) -> int:
    """Spark SQL's hash(v1, ..., vk) of string values, as a signed 32-bit int: each value's
    hash seeds the next one's, and a null is skipped."""
    h = SEED
    for value in values:
        if value is not None:
            h = _murmur3(value.encode("utf-8"), h)
    return h - (1 << 32) if h & 0x80000000 else h
