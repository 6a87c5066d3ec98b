"""Independent references for assertions: never the code under test.

`spark_hash` re-implements Spark's `hash()` (Murmur3 x86_32, seed 42, with Spark's quirk of
mixing each tail byte of a string as a whole signed int), so tests can check every `_bucket`.
"""

from __future__ import annotations

import struct

MASK = 0xFFFFFFFF
C1, C2 = 0xCC9E2D51, 0x1B873593


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * C1) & MASK
    k1 = _rotl(k1, 15)
    return (k1 * C2) & MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = _rotl(h1, 13)
    return (h1 * 5 + 0xE6546B64) & MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & MASK
    return h1 ^ (h1 >> 16)


def _hash_bytes(data: bytes, seed: int) -> int:
    h1 = seed & MASK
    aligned = len(data) - len(data) % 4
    for i in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(struct.unpack_from("<I", data, i)[0]))
    for b in data[aligned:]:
        signed = b - 256 if b > 127 else b
        h1 = _mix_h1(h1, _mix_k1(signed & MASK))
    return _fmix(h1, len(data))


def spark_hash(*values: str | None, seed: int = 42) -> int:
    """Spark SQL's hash(v1, ..., vk) over strings: each value seeds the next; nulls are skipped."""
    h = seed & MASK
    for v in values:
        if v is not None:
            h = _hash_bytes(v.encode("utf-8"), h)
    return h - (1 << 32) if h & 0x80000000 else h


def bucket_of(values: tuple[str | None, ...], buckets: int) -> int:
    return spark_hash(*values) % buckets  # Python's % is already pmod for a positive divisor
