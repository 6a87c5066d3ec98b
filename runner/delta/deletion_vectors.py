"""Delta deletion vectors: which rows of a stored parquet file a MERGE_ON_READ table deletes.

A deletion vector (DV) is a set of row positions (0-based, across row groups) stored in a
DV file as a portable RoaringBitmapArray, and named in the log by a descriptor on the file's
`add` action. The byte layout (the Delta protocol's "Deletion Vector Format", checked against
delta-rs, Polars and DuckDB on this platform): a DV file starts with a version byte 0x01,
then per DV a u32 big-endian size, the bitmap (u32 LE magic 1681511377, then the 64-bit
roaring layout pyroaring serializes) and a u32 big-endian CRC-32 of the bitmap.

The runner writes storage type `u`: the file is `<table>/<prefix>/deletion_vector_<uuid>.bin`
and the descriptor holds the prefix and the UUID in Z85. The prefix is
`_deletion_vectors/<instant>`, so that the files of a run that never committed are found by
its instant, like its data files.
"""

from __future__ import annotations

import re
import struct
import uuid
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow.fs as pafs
from pyroaring import BitMap64

from runner.errors import RunnerError

MAGIC = struct.pack("<I", 1681511377)  # RoaringBitmapArray, "portable" serialization
FORMAT_VERSION = b"\x01"
DV_DIR = "_deletion_vectors"
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {c: i for i, c in enumerate(_Z85)}
_UUID_Z85_CHARS = 20
RUNNER_DV_PATH = re.compile(
    rf"^{DV_DIR}/\d{{17}}/deletion_vector_[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-"
    r"[0-9a-f]{4}-[0-9a-f]{12}\.bin$"
)


def z85_encode(data: bytes) -> str:
    """ZeroMQ's Z85 (Python 3.11 has no base64.z85encode); len(data) % 4 == 0."""
    out: list[str] = []
    for i in range(0, len(data), 4):
        n = int.from_bytes(data[i : i + 4], "big")
        chunk = []
        for _ in range(5):
            n, digit = divmod(n, 85)
            chunk.append(_Z85[digit])
        out.extend(reversed(chunk))
    return "".join(out)


def z85_decode(text: str) -> bytes:
    out = bytearray()
    for i in range(0, len(text), 5):
        n = 0
        for c in text[i : i + 5]:
            n = n * 85 + _Z85_VALUE[c]
        out += n.to_bytes(4, "big")
    return bytes(out)


@dataclass(frozen=True)
class DeletionVector:
    """A deletion vector descriptor, as the Delta log holds it."""

    storage_type: str  # u (relative file), p (absolute path) or i (inline)
    path_or_inline: str
    offset: int | None
    size: int
    cardinality: int

    @classmethod
    def from_log(cls, d: dict[str, Any]) -> DeletionVector:
        return cls(
            storage_type=d["storageType"],
            path_or_inline=d["pathOrInlineDv"],
            offset=d.get("offset"),
            size=d["sizeInBytes"],
            cardinality=d["cardinality"],
        )

    def to_log(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "storageType": self.storage_type,
            "pathOrInlineDv": self.path_or_inline,
            "sizeInBytes": self.size,
            "cardinality": self.cardinality,
        }
        if self.offset is not None:
            d["offset"] = self.offset
        return d

    @property
    def relative_path(self) -> str | None:
        """The DV file, relative to the table root (None when inline or absolute)."""
        if self.storage_type != "u":
            return None
        prefix = self.path_or_inline[:-_UUID_Z85_CHARS]
        uid = uuid.UUID(bytes=z85_decode(self.path_or_inline[-_UUID_Z85_CHARS:]))
        name = f"deletion_vector_{uid}.bin"
        return f"{prefix}/{name}" if prefix else name


def encode_bitmap(rows: np.ndarray) -> bytes:
    return MAGIC + BitMap64(rows.astype(np.uint64, copy=False)).serialize()


def decode_bitmap(data: bytes) -> np.ndarray:
    """The row positions of a serialized bitmap, ascending, as uint64."""
    if data[:4] != MAGIC:
        raise RunnerError(
            "a deletion vector is not in the portable RoaringBitmapArray format "
            f"(magic {data[:4].hex()}); the runner reads only that format"
        )
    positions = BitMap64.deserialize(data[4:]).to_array()
    rows: np.ndarray = np.frombuffer(positions, dtype=np.uint64)
    return rows


def read_deleted_rows(fs: pafs.FileSystem, root: str, dv: DeletionVector) -> np.ndarray:
    """The positions a deletion vector deletes, checked against its CRC."""
    if dv.storage_type == "i":
        return decode_bitmap(z85_decode(dv.path_or_inline)[: dv.size])
    path = dv.relative_path
    if path is None or dv.offset is None:
        raise RunnerError(
            f"deletion vector {dv.path_or_inline!r} is stored as {dv.storage_type!r} "
            "(an absolute path); the runner reads relative (u) and inline (i) ones"
        )
    with fs.open_input_file(f"{root}/{path}") as f:
        f.seek(dv.offset)
        header = f.read(4)
        (size,) = struct.unpack(">I", header)
        data = f.read(size)
        (crc,) = struct.unpack(">I", f.read(4))
    if size != dv.size or zlib.crc32(data) != crc:
        raise RunnerError(f"deletion vector file {path} is damaged (size or checksum mismatch)")
    return decode_bitmap(data)


def keep_mask(
    fs: pafs.FileSystem, root: str, dv: DeletionVector | None, num_rows: int
) -> np.ndarray:
    """True for each of a file's `num_rows` rows that its deletion vector (if any) keeps."""
    keep = np.ones(num_rows, dtype=bool)
    if dv is not None:
        keep[read_deleted_rows(fs, root, dv).astype(np.int64)] = False
    return keep


class DeletionVectorFile:
    """A new DV file holding one or more deletion vectors (one per stored file)."""

    def __init__(self, fs: pafs.FileSystem, root: str, instant: str):
        uid = uuid.uuid4()
        self.prefix = f"{DV_DIR}/{instant}"
        self.path_or_inline = self.prefix + z85_encode(uid.bytes)
        self.relative_path = f"{self.prefix}/deletion_vector_{uid}.bin"
        self.fs, self.root = fs, root
        self.content = bytearray(FORMAT_VERSION)

    def add(self, rows: np.ndarray) -> DeletionVector:
        bitmap = encode_bitmap(rows)
        offset = len(self.content)
        self.content += struct.pack(">I", len(bitmap)) + bitmap
        self.content += struct.pack(">I", zlib.crc32(bitmap))
        return DeletionVector("u", self.path_or_inline, offset, len(bitmap), len(rows))

    def close(self) -> int:
        """Write the file; returns its size in bytes."""
        full = f"{self.root}/{self.relative_path}"
        if self.fs.type_name == "local":
            self.fs.create_dir(full.rsplit("/", 1)[0], recursive=True)
        with self.fs.open_output_stream(full) as out:
            out.write(bytes(self.content))
        return len(self.content)
