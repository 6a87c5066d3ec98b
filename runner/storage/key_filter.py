"""A Bloom filter of a data file's record keys, kept in its parquet footer (the key-value
entry `runner.key_filter`), as Hudi keeps one in each base file's footer for its bloom
index.

A write of new keys into a large table would otherwise read the `_record_key` column of
every stored file of every bucket it touches only to learn that the keys are new (TPC-H's
RF1 at scale factor 1: 6,000 new lineitems, 0.3 s of keys read from 6M stored rows). With
the filter, a file none of the batch's keys can be in is not read (runner/write/
stored_bucket.py). Filters never say no to a key the file holds; they say yes to an
absent key with a probability of about 1.4e-4 (20 bits and 8 probes per key), so a file
is skipped for 375 probes ~95 % of the time.

Hashes are the runner's own (no Parquet-standard xxHash64 here, and no reader but the
runner asks): 64 bits from each key's UTF-8 bytes, taken 8 bytes at a time.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FOOTER_KEY = b"runner.key_filter"

_VERSION = 1
BITS_PER_KEY = 20
PROBES = 8
# Keys up to this many bytes are padded together; longer ones by powers of two.
_PADDED_MAX_BYTES = 256

_MAX_BITS = 2**32  # positions are reduced from 32-bit values (a file of 200M keys)

_U64 = np.uint64
_SEED_1 = _U64(0x5BD1E9955BD1E995)
_MULTIPLIER = _U64(0x9E3779B97F4A7C15)  # 2**64 / the golden ratio, odd


def _mix(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer (every input bit moves every output bit), on a new
    array, computed in place in it."""
    h = h ^ (h >> _U64(33))
    h *= _U64(0xFF51AFD7ED558CCD)
    h ^= h >> _U64(33)
    h *= _U64(0xC4CEB9FE1A85EC53)
    h ^= h >> _U64(33)
    return h


def key_hashes(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each key (strings, no nulls), as uint64: of its UTF-8 bytes in
    8-byte words, zero-padded, its length first. A key's hash depends on its bytes alone
    (never on the keys beside it), so a file's filter and a later batch agree. Read from
    the Arrow buffers: pyarrow's own conversions to numpy import pandas (0.2 s of `runner
    read --key`)."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if len(keys) == 0:
        return np.empty(0, dtype=np.uint64)
    if keys.type != pa.string():
        keys = keys.cast(pa.string())
    if keys.null_count:  # a stored row always has a key; hashed as "" should one not
        keys = pc.fill_null(keys, "")
    offsets = np.frombuffer(
        keys.buffers()[1], dtype=np.int32, count=len(keys) + 1, offset=keys.offset * 4
    )
    lengths = np.diff(offsets).astype(np.uint64)
    if lengths.max() <= _PADDED_MAX_BYTES:
        return _padded_hashes(keys, lengths)
    # keys are padded to the longest of their class: one class up to _PADDED_MAX_BYTES,
    # then one per power of two, so that a rare long key does not pad every other one
    classes = np.maximum(lengths, _PADDED_MAX_BYTES)
    classes = np.left_shift(1, np.ceil(np.log2(classes)).astype(np.int64))
    hashes = np.empty(len(keys), dtype=np.uint64)
    for size in np.unique(classes):
        rows = np.flatnonzero(classes == size)
        hashes[rows] = _padded_hashes(keys.take(pa.array(rows)), lengths[rows])
    return hashes


def _padded_hashes(keys: pa.Array, lengths: np.ndarray) -> np.ndarray:
    """Keys padded with zero bytes to the longest one's words (pyarrow's ascii_rpad pads by
    bytes, whatever the characters): one row of 8-byte words each, each key's hash over
    its own words only."""
    width = max(8, int(-(-int(lengths.max()) // 8) * 8))
    padded = pc.ascii_rpad(keys, width=width, padding="\0")
    words = np.frombuffer(padded.buffers()[2], dtype=np.uint64, count=len(keys) * width // 8)
    words = words.reshape(len(keys), width // 8)
    own_words = (lengths + _U64(7)) // _U64(8)
    every_key_has = int(own_words.min())  # words up to here need no mask
    h = lengths ^ _SEED_1
    for column in range(width // 8):
        stepped = _step(h, words[:, column])
        h = stepped if column < every_key_has else np.where(own_words > column, stepped, h)
    return _mix(h)


def _step(h: np.ndarray, word: np.ndarray) -> np.ndarray:
    """One word into a running hash: a multiply spreads its bits upward, the shift brings
    the high ones back down; _mix at the end finishes what the steps leave."""
    h = h ^ word
    h *= _MULTIPLIER
    h ^= h >> _U64(29)
    return h


def _probes(hashes: np.ndarray, bits: int) -> np.ndarray:
    """The `PROBES` bit positions of each hash, one row per probe: double hashing on
    32-bit halves (wrapping as uint32), each reduced into [0, bits) by a multiply and a
    shift, not a modulo."""
    h1 = (hashes >> _U64(32)).astype(np.uint32)  # key_hashes are mixed: halves will do
    h2 = hashes.astype(np.uint32) | np.uint32(1)
    probe = np.arange(PROBES, dtype=np.uint32)[:, None]
    return ((h1 + probe * h2).astype(np.uint64) * _U64(bits)) >> _U64(32)


# base64's alphabet, as the 6-bit value of each character ('=' padding reads as 0)
_BASE64_VALUES = np.zeros(256, dtype=np.uint32)
for _value, _char in enumerate(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"):
    _BASE64_VALUES[_char] = _value


@dataclass(frozen=True)
class KeyFilter:
    """The filter of one file: `bits` bits (least significant first in each byte), kept
    as the footer holds them, base64 (other readers decode footer values as UTF-8). A
    probe decodes only the 4 characters of each byte it asks for: a 375,000-key file's
    filter is 0.6 MiB of text, and decoding it whole cost more than the probes."""

    bits: int
    text: np.ndarray  # uint8: the base64 characters of the packed bits

    @classmethod
    def of(cls, hashes: np.ndarray) -> KeyFilter:
        """The filter of keys with these key_hashes."""
        bits = min(max(64, -(-len(hashes) * BITS_PER_KEY // 64) * 64), _MAX_BITS)
        flags = np.zeros(bits, dtype=bool)
        flags[_probes(hashes, bits).ravel()] = True
        packed = np.packbits(flags, bitorder="little").tobytes()
        return cls(bits, np.frombuffer(base64.b64encode(packed), dtype=np.uint8))

    def might_hold(self, hashes: np.ndarray) -> np.ndarray:
        """Per hash: False when the file surely holds no such key."""
        positions = _probes(hashes, self.bits).ravel()
        bit = (self._bytes_at(positions >> _U64(3)) >> (positions & _U64(7))) & _U64(1)
        return np.asarray(bit.reshape(PROBES, len(hashes)).all(axis=0))

    def _bytes_at(self, index: np.ndarray) -> np.ndarray:
        """The packed bytes at `index`, from the base64 groups (4 characters for 3 bytes)
        that hold them."""
        first = (index // _U64(3)) * _U64(4)
        chars = self.text[first[:, None] + np.arange(4, dtype=np.uint64)]
        values = _BASE64_VALUES[chars].astype(np.uint64)
        group = (values[:, 0] << 18) | (values[:, 1] << 12) | (values[:, 2] << 6) | values[:, 3]
        shift = (_U64(2) - index % _U64(3)) * _U64(8)
        return np.asarray((group >> shift) & _U64(0xFF))

    def encode(self) -> bytes:
        """The footer value: `version:probes:bits:` then the bits, base64."""
        return f"{_VERSION}:{PROBES}:{self.bits}:".encode() + self.text.tobytes()

    @classmethod
    def decode(cls, value: bytes) -> KeyFilter | None:
        """The filter in a footer value; None for one this version cannot read."""
        parts = value[:64].split(b":", 3)  # the header; the text is not copied
        if len(parts) != 4 or not all(p.isdigit() for p in parts[:3]):
            return None
        version, probes, bits = (int(p) for p in parts[:3])
        header = sum(len(p) for p in parts[:3]) + 3
        text = np.frombuffer(value, dtype=np.uint8, offset=header)
        if version != _VERSION or probes != PROBES or len(text) * 6 < bits:
            return None
        return cls(bits, text)


def written_for(table_type: str) -> bool:
    """Whether a table's data files carry key filters: a MERGE_ON_READ table's. A
    COPY_ON_WRITE table rewrites every file a batch touches, reading it whole (or every
    row of it after its keys): skipping the key column saves it next to nothing, while
    the filters cost every rewrite of a wide table a few percent."""
    return table_type == "MERGE_ON_READ"


def footer_filter(metadata: dict[bytes, bytes] | None) -> KeyFilter | None:
    """The key filter of a file's footer entries, if it has one this version reads."""
    value = (metadata or {}).get(FOOTER_KEY)
    return KeyFilter.decode(value) if value else None
