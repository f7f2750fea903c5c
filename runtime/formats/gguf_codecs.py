"""GGML block codecs: raw GGUF tensor bytes <-> our canonical encodings, bit-exactly.

Why a separate module: the GGUF container (``gguf.py``) only slices bytes; what a block *means* is
decided here, once, for the reader, the writer and the tests. Every codec is vectorized (numpy
reshapes, shifts and 256-entry lookup tables) and works through big tensors in row chunks so the
temporary memory stays a few tens of MB whatever the tensor size.

Layouts (all little-endian; see docs/format.md and the research note section 3):

* ``Q2_0`` (id 42, g64, 18 B) / legacy Q2_0 (id 42, g128, 34 B) / ``PQ2_0`` (id 142, g128, 34 B):
  ``fp16 d`` first, then ``qs[B/4]`` with four consecutive weights per byte, LSB first; that *is*
  our ``t2`` layout, so decode is a byte shuffle.
* ``TQ2_0`` (id 35, g256, 66 B): ``qs[64]`` then ``d``; byte ``32c+m`` holds weights
  ``128c + 32l + m`` at bits ``2l`` (strided).
* ``TQ1_0`` (id 34, g256, 54 B) and ``PTQ1_0`` (id 143, g128, 28 B): base-3, ``qs`` in stages of
  32/16/8 bytes (byte ``m`` of a ``c``-byte stage holds weights ``m + n c``, n = 0..4, most
  significant trit first), then ``qh`` (4 trits per byte, weights ``j + n * len(qh)``, pre-multiplied
  by 3), then ``d`` LAST. Bytes are ``ceil(q * 256 / 243)``; trit n of byte b is
  ``((uint8)(b * 3^n) * 3) >> 8``.
* ``F32``/``F16``/``BF16`` plain; ``Q8_0`` (32 x int8, d first) and ``Q4_0`` (16 bytes of nibbles,
  low nibbles = weights 0..15, high = 16..31, value ``(q - 8) * d``) dequantize exactly to f32.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from runtime.formats.model_data import T2, T3, DenseTensor, TernaryTensor, t3_bytes_per_group

# Work on at most this many weights per chunk (bounds temporaries to ~tens of MB).
CHUNK_WEIGHTS = 1 << 22


@dataclass(frozen=True)
class GGMLType:
    """One GGML tensor type as we handle it (``name`` is unique; ``type_id`` may repeat for legacy)."""

    name: str
    type_id: int
    block_size: int  # weights per block
    type_size: int  # bytes per block
    ternary: bool

    def row_bytes(self, cols: int) -> int:
        return cols // self.block_size * self.type_size

    def nbytes(self, n_elements: int) -> int:
        return n_elements // self.block_size * self.type_size


F32 = GGMLType("F32", 0, 1, 4, False)
F16 = GGMLType("F16", 1, 1, 2, False)
Q4_0 = GGMLType("Q4_0", 2, 32, 18, False)
Q8_0 = GGMLType("Q8_0", 8, 32, 34, False)
BF16 = GGMLType("BF16", 30, 1, 2, False)
TQ1_0 = GGMLType("TQ1_0", 34, 256, 54, True)
TQ2_0 = GGMLType("TQ2_0", 35, 256, 66, True)
Q2_0 = GGMLType("Q2_0", 42, 64, 18, True)
Q2_0_LEGACY = GGMLType("Q2_0_LEGACY", 42, 128, 34, True)
PQ2_0 = GGMLType("PQ2_0", 142, 128, 34, True)
PTQ1_0 = GGMLType("PTQ1_0", 143, 128, 28, True)

TYPES_BY_NAME: dict[str, GGMLType] = {t.name: t for t in
                                      (F32, F16, Q4_0, Q8_0, BF16, TQ1_0, TQ2_0, Q2_0, Q2_0_LEGACY, PQ2_0, PTQ1_0)}
# Type id -> the type a reader assumes first (type 42 is re-checked against the byte span).
TYPES_BY_ID: dict[int, GGMLType] = {t.type_id: t for t in TYPES_BY_NAME.values() if t is not Q2_0_LEGACY}

# Names of GGML types we do not decode, for error messages.
OTHER_TYPE_NAMES = {
    3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K",
    15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S",
    22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M",
    36: "I2_S", 39: "MXFP4", 40: "NVFP4", 41: "Q1_0",
}


def type_name(type_id: int) -> str:
    t = TYPES_BY_ID.get(type_id)
    return t.name if t else OTHER_TYPE_NAMES.get(type_id, f"unknown type {type_id}")


# ----------------------------------------------------------------------------------------------
# lookup tables

_POW3_5 = np.array([1, 3, 9, 27, 81], dtype=np.uint16)
# trit n (n = 0 is the most significant) of a GGML base-3 byte
_GGML_DEC = ((((np.arange(256, dtype=np.uint16)[:, None] * _POW3_5[None, :]) & 0xFF) * 3) >> 8).astype(np.uint8)
# GGML byte for a 5-trit number q (0..242): ceil(q * 256 / 243)
_GGML_ENC = ((np.arange(243, dtype=np.uint16) * 256 + 242) // 243).astype(np.uint8)
# canonical t3 byte -> 5 trits, least significant first
_T3_DEC = ((np.arange(256, dtype=np.int32)[:, None] // np.array([1, 3, 9, 27, 81])[None, :]) % 3).astype(np.uint8)
# 2-bit fields of a byte, LSB first
_T2_DEC = ((np.arange(256, dtype=np.uint8)[:, None] >> np.array([0, 2, 4, 6], dtype=np.uint8)) & 3).astype(np.uint8)


def _lut64(table: np.ndarray) -> np.ndarray:
    """A [256, k<=7] digit table as one uint64 per byte value (digits in bytes 0..k-1, then zeros):
    a 1-D gather of 8-byte words is ~30x faster than a row gather, and byte 7 is always 0
    (the source of padding digits)."""
    t8 = np.zeros((256, 8), dtype=np.uint8)
    t8[:, :table.shape[1]] = table
    return t8.view(np.uint64).reshape(256)


_GGML_DEC64, _T3_DEC64, _T2_DEC64 = _lut64(_GGML_DEC), _lut64(_T3_DEC), _lut64(_T2_DEC)
_T2_DEC32 = np.ascontiguousarray(_T2_DEC).view(np.uint32).reshape(256)  # four 2-bit fields, one word
_PAD = 7  # an always-zero digit position (byte 0, digit 7)


def _expand(lut64: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[..., n] bytes -> [..., n * 8] digits."""
    return lut64[b].view(np.uint8).reshape(*b.shape[:-1], b.shape[-1] * 8)


def _weighted5(t: np.ndarray, w: tuple[int, int, int, int, int]) -> np.ndarray:
    """sum_n w[n] * t[..., n, :] over a [..., 5, k] uint8 array (values stay < 256)."""
    return (w[0] * t[..., 0, :] + w[1] * t[..., 1, :] + w[2] * t[..., 2, :] + w[3] * t[..., 3, :]
            + w[4] * t[..., 4, :]).astype(np.uint8)


def _chunks(rows: int, cols: int):
    step = max(1, CHUNK_WEIGHTS // max(cols, 1))
    for r0 in range(0, rows, step):
        yield r0, min(rows, r0 + step)


def _pack2(codes: np.ndarray) -> np.ndarray:
    """[..., 4k] codes 0..3 -> [..., k] bytes, four consecutive per byte LSB first."""
    c = codes.reshape(*codes.shape[:-1], -1, 4)
    return (c[..., 0] | (c[..., 1] << 2) | (c[..., 2] << 4) | (c[..., 3] << 6)).astype(np.uint8)


def _unpack2(packed: np.ndarray) -> np.ndarray:
    return _T2_DEC32[packed].view(np.uint8).reshape(*packed.shape[:-1], packed.shape[-1] * 4)


def _pack_t3_trits(trits: np.ndarray, group_size: int) -> np.ndarray:
    """[rows, groups*g] trits 0..2 -> canonical t3 bytes [rows, groups*ceil(g/5)]."""
    rows = trits.shape[0]
    nbg = t3_bytes_per_group(group_size)
    t = trits.reshape(rows, -1, group_size)
    pad = nbg * 5 - group_size
    if pad:
        t = np.concatenate([t, np.zeros((rows, t.shape[1], pad), dtype=np.uint8)], axis=-1)
    t = t.reshape(rows, -1, nbg, 5)
    out = t[..., 0] + 3 * t[..., 1] + 9 * t[..., 2] + 27 * t[..., 3] + 81 * t[..., 4]
    return out.astype(np.uint8).reshape(rows, -1)


def _unpack_t3_trits(packed: np.ndarray, cols: int, group_size: int) -> np.ndarray:
    rows = packed.shape[0]
    nbg = t3_bytes_per_group(group_size)
    t = _T3_DEC[packed].reshape(rows, cols // group_size, nbg * 5)[..., :group_size]
    return t.reshape(rows, cols)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().contiguous().numpy()


def ternary_codes(t: TernaryTensor, r0: int = 0, r1: int | None = None) -> np.ndarray:
    """Unpacked codes (uint8 0..3) of rows ``r0:r1`` of a ternary tensor."""
    packed = _np(t.codes[r0:r1])
    if t.encoding == T2:
        return _unpack2(packed)
    if t.encoding == T3:
        return _unpack_t3_trits(packed, t.shape[1], t.group_size)
    raise ValueError(f"unknown ternary encoding {t.encoding!r}")


def _pack_codes(codes: np.ndarray, encoding: str, group_size: int) -> np.ndarray:
    if encoding == T2:
        return _pack2(codes)
    if codes.max(initial=0) > 2:
        raise ValueError("code 3 (+2*scale) cannot be stored in the base-3 t3 encoding")
    return _pack_t3_trits(codes, group_size)


# ----------------------------------------------------------------------------------------------
# group size changes (exact or refused)

def regroup_scales(t: TernaryTensor, new_group: int) -> np.ndarray:
    """fp16 scales ``[rows, cols/new_group]`` equivalent to ``t``'s, or ValueError if not exact.

    Splitting a group repeats its scale. Merging groups needs equal scales, except that an
    all-zero sub-group (every code 1) takes the merged group's scale: it decodes identically.
    """
    rows, cols = t.shape
    g = t.group_size
    if cols % new_group:
        raise ValueError(f"width {cols} is not a multiple of block size {new_group}")
    s = _np(t.scales)
    if new_group == g:
        return s
    if g % new_group == 0:
        return np.repeat(s, g // new_group, axis=1)
    if new_group % g:
        raise ValueError(f"group size {g} and block size {new_group} do not nest")
    k = new_group // g
    out = np.empty((rows, cols // new_group), dtype=np.float16)
    for r0, r1 in _chunks(rows, cols):
        sub = s[r0:r1].reshape(r1 - r0, -1, k)
        codes = ternary_codes(t, r0, r1).reshape(r1 - r0, -1, k, g)
        nonzero = (codes != 1).any(-1)  # [r, G, k]
        su = sub.view(np.uint16)
        # pick the scale of the first non-zero sub-group (or the first sub-group)
        first = np.argmax(nonzero, axis=-1)
        pick = np.take_along_axis(su, first[..., None], axis=-1)
        mismatch = nonzero & (su != pick)
        if mismatch.any():
            r, grp = (int(v) for v in np.argwhere(mismatch.any(-1))[0])
            raise ValueError(
                f"cannot store group-{g} scales in blocks of {new_group} losslessly: row {r0 + r}, "
                f"block {grp} has different scales in its {k} groups"
            )
        out[r0:r1] = pick[..., 0].view(np.float16)
    return out


def regroup(t: TernaryTensor, new_group: int) -> TernaryTensor:
    """The same weights with ``new_group`` weights per scale (exact, or ValueError; see regroup_scales)."""
    if new_group == t.group_size:
        return t
    scales = torch.from_numpy(regroup_scales(t, new_group).copy())
    if t.encoding == T2:
        return TernaryTensor(t.shape, new_group, t.codes, scales, T2)
    rows, cols = t.shape
    codes = np.empty((rows, cols // new_group * t3_bytes_per_group(new_group)), dtype=np.uint8)
    for r0, r1 in _chunks(rows, cols):
        codes[r0:r1] = _pack_t3_trits(ternary_codes(t, r0, r1), new_group)
    return TernaryTensor(t.shape, new_group, torch.from_numpy(codes), scales, T3)


# ----------------------------------------------------------------------------------------------
# ternary decode

def decode_ternary(raw: np.ndarray, rows: int, cols: int, gtype: GGMLType, encoding: str | None = None) -> TernaryTensor:
    """Raw bytes of a ``[rows, cols]`` tensor of ternary GGML type -> canonical TernaryTensor.

    ``encoding`` defaults to ``t3`` for PTQ1_0 and ``t2`` otherwise (TQ1_0 can also go to t3).
    """
    if not gtype.ternary:
        raise ValueError(f"{gtype.name} is not a ternary type")
    B = gtype.block_size
    if cols % B:
        raise ValueError(f"row width {cols} is not a multiple of the {gtype.name} block size {B}")
    nb = cols // B
    raw = np.asarray(raw, dtype=np.uint8).reshape(rows, nb * gtype.type_size)
    enc = encoding or (T3 if gtype is PTQ1_0 else T2)
    if gtype.name in ("Q2_0", "Q2_0_LEGACY", "PQ2_0"):
        blocks = raw.reshape(rows, nb, gtype.type_size)
        scales = np.ascontiguousarray(blocks[..., :2]).view(np.float16).reshape(rows, nb)
        if enc == T2:
            codes = np.ascontiguousarray(blocks[..., 2:]).reshape(rows, cols // 4)
        else:
            codes = np.empty((rows, nb * t3_bytes_per_group(B)), dtype=np.uint8)
            for r0, r1 in _chunks(rows, cols):
                c = _unpack2(np.ascontiguousarray(blocks[r0:r1, :, 2:]).reshape(r1 - r0, cols // 4))
                codes[r0:r1] = _pack_codes(c, T3, B)
        return TernaryTensor((rows, cols), B, torch.from_numpy(codes), torch.from_numpy(scales.copy()), enc)

    blocks = raw.reshape(rows, nb, gtype.type_size)
    scales = np.ascontiguousarray(blocks[..., -2:]).view(np.float16).reshape(rows, nb).copy()
    ncb = cols // 4 if enc == T2 else nb * t3_bytes_per_group(B)
    codes = np.empty((rows, ncb), dtype=np.uint8)
    for r0, r1 in _chunks(rows, cols):
        b = blocks[r0:r1]
        if gtype is TQ2_0:
            qs = b[..., :64].reshape(r1 - r0, nb, 2, 1, 32)
            w = (qs >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 1, 4, 1)) & 3  # [r, nb, c, l, m]
            codes[r0:r1] = _pack_codes(w.reshape(r1 - r0, cols), enc, B)
        else:
            codes[r0:r1] = _base3_decode(b, B, enc).reshape(r1 - r0, -1)
    return TernaryTensor((rows, cols), B, torch.from_numpy(codes), torch.from_numpy(scales), enc)


def _stages(nq: int) -> list[int]:
    out, left = [], nq
    for c in (32, 16, 8):
        while left >= c:
            out.append(c)
            left -= c
    if left:
        raise ValueError(f"qs length {nq} does not split into 32/16/8-byte stages")
    return out


@functools.cache
def _base3_tables(block: int) -> tuple[int, int, np.ndarray, np.ndarray]:
    """(len(qs), len(qh), src, dst) of a base-3 block of ``block`` weights.

    ``src[w]``: position of weight w's trit in the block's bytes expanded 8 digits per byte
    (:func:`_expand`); ``dst[byte, n]``: the weight whose trit is digit n of that byte (-1: padding).
    """
    nh = block // 64
    nq = (block - 4 * nh) // 5
    src = np.empty(block, dtype=np.int64)
    dst = np.full((nq + nh, 5), -1, dtype=np.int64)
    pos = base = 0
    for c in _stages(nq):
        for m in range(c):
            for n in range(5):
                src[base + m + n * c] = (pos + m) * 8 + n
                dst[pos + m, n] = base + m + n * c
        pos += c
        base += 5 * c
    for j in range(nh):
        for n in range(4):
            src[base + j + n * nh] = (nq + j) * 8 + n
            dst[nq + j, n] = base + j + n * nh
    return nq, nh, src, dst


@functools.cache
def _base3_decode_index(block: int, encoding: str) -> np.ndarray:
    """Gather index: expanded GGML digits -> weights in canonical order.

    For t3 the index is digit-major (``[5, bytes per block]``) so the base-3 sum reads
    contiguous slices; padding positions point at an always-zero digit.
    """
    _nq, _nh, src, _dst = _base3_tables(block)
    if encoding == T2:
        return src
    nbg = t3_bytes_per_group(block)
    w = np.arange(nbg * 5).reshape(nbg, 5).T  # [digit, byte] -> weight 5*byte + digit
    return np.where(w < block, src[np.minimum(w, block - 1)], _PAD).reshape(-1)


def _base3_decode(b: np.ndarray, block: int, encoding: str) -> np.ndarray:
    """[r, nb, type_size] base-3 blocks -> canonical codes bytes [r, nb, bytes per block]."""
    nq, nh, _src, _dst = _base3_tables(block)
    r, nb = b.shape[:2]
    exp = _expand(_GGML_DEC64, b[..., :nq + nh])
    trits = exp[..., _base3_decode_index(block, encoding)]
    if encoding == T2:
        return _pack2(trits)
    return _weighted5(trits.reshape(r, nb, 5, -1), (1, 3, 9, 27, 81))


@functools.cache
def _base3_encode_index(block: int, kind: str) -> np.ndarray:
    """Gather index (digit-major ``[5, nq + nh]``): canonical expanded digits -> GGML digits."""
    _nq, _nh, _src, dst = _base3_tables(block)
    if kind == T3:  # t3 bytes expanded: weight w at (w // 5) * 8 + w % 5
        pos = (dst // 5) * 8 + dst % 5
    elif kind == T2:  # t2 bytes expanded: weight w at (w // 4) * 8 + w % 4
        pos = (dst // 4) * 8 + dst % 4
    else:  # plain codes, one per weight, with an extra zero column at index ``block``
        pos = dst.copy()
    return np.where(dst >= 0, pos, block if kind == "codes" else _PAD).T.reshape(-1)


def _base3_encode(t: TernaryTensor, r0: int, r1: int, block: int, nb: int) -> np.ndarray:
    """Rows r0:r1 of a ternary tensor -> GGML base-3 bytes without the scale, [r, nb, nq + nh]."""
    r = r1 - r0
    packed = _np(t.codes[r0:r1])
    if t.encoding == T3 and t.group_size == block:
        kind, exp = T3, _expand(_T3_DEC64, packed.reshape(r, nb, -1))
    elif t.encoding == T2:
        kind, exp = T2, _expand(_T2_DEC64, packed.reshape(r, nb, -1))
        if exp.max(initial=0) > 2:
            raise ValueError(f"code 3 (+2*scale) cannot be stored in base-3 blocks of {block}")
    else:  # t3 with another group size: unpack to codes first (rare)
        codes = ternary_codes(t, r0, r1).reshape(r, nb, block)
        kind, exp = "codes", np.concatenate([codes, np.zeros((r, nb, 1), dtype=np.uint8)], axis=-1)
    g = exp[..., _base3_encode_index(block, kind)].reshape(r, nb, 5, -1)
    return _GGML_ENC[_weighted5(g, (81, 27, 9, 3, 1))]


# ----------------------------------------------------------------------------------------------
# ternary encode

def encode_ternary(t: TernaryTensor, gtype: GGMLType) -> np.ndarray:
    """Canonical TernaryTensor -> raw GGML bytes ``uint8[rows, row_bytes]`` (exact or ValueError)."""
    if not gtype.ternary:
        raise ValueError(f"{gtype.name} is not a ternary type")
    rows, cols = t.shape
    B = gtype.block_size
    if cols % B:
        raise ValueError(f"row width {cols} is not a multiple of the {gtype.name} block size {B}")
    nb = cols // B
    scales = regroup_scales(t, B).reshape(rows, nb, 1).view(np.uint8)  # [rows, nb, 2]
    out = np.empty((rows, nb, gtype.type_size), dtype=np.uint8)
    for r0, r1 in _chunks(rows, cols):
        if gtype.name in ("Q2_0", "Q2_0_LEGACY", "PQ2_0"):
            out[r0:r1, :, :2] = scales[r0:r1]
            if t.encoding == T2:
                out[r0:r1, :, 2:] = _np(t.codes[r0:r1]).reshape(r1 - r0, nb, B // 4)
            else:
                out[r0:r1, :, 2:] = _pack2(ternary_codes(t, r0, r1)).reshape(r1 - r0, nb, B // 4)
            continue
        out[r0:r1, :, -2:] = scales[r0:r1]
        if gtype is TQ2_0:
            c = ternary_codes(t, r0, r1).reshape(r1 - r0, nb, 2, 4, 32)
            out[r0:r1, :, :64] = (c[..., 0, :] | (c[..., 1, :] << 2) | (c[..., 2, :] << 4)
                                  | (c[..., 3, :] << 6)).reshape(r1 - r0, nb, 64)
            continue
        try:
            out[r0:r1, :, :-2] = _base3_encode(t, r0, r1, B, nb)
        except ValueError:
            raise ValueError(f"code 3 (+2*scale) cannot be stored in base-3 {gtype.name}") from None
    return out.reshape(rows, nb * gtype.type_size)


# ----------------------------------------------------------------------------------------------
# dense types

def decode_dense(raw: np.ndarray, shape: tuple[int, ...], gtype: GGMLType) -> DenseTensor:
    """Raw bytes -> DenseTensor (F32/F16/BF16 as stored; Q8_0/Q4_0 dequantized exactly to f32).

    ``shape`` is torch order (GGUF ``ne`` reversed). F32/F16/BF16 results are copies.
    """
    raw = np.asarray(raw, dtype=np.uint8).reshape(-1)
    n = int(np.prod(shape)) if shape else 1
    if gtype is F32:
        return DenseTensor(torch.from_numpy(raw.view(np.float32).reshape(shape).copy()))
    if gtype is F16:
        return DenseTensor(torch.from_numpy(raw.view(np.float16).reshape(shape).copy()))
    if gtype is BF16:
        return DenseTensor(torch.from_numpy(raw.view(np.int16).reshape(shape).copy()).view(torch.bfloat16))
    if gtype not in (Q8_0, Q4_0):
        raise ValueError(f"{gtype.name} is not a dense type")
    nb = n // gtype.block_size
    blocks = raw.reshape(nb, gtype.type_size)
    out = np.empty((nb, gtype.block_size), dtype=np.float32)
    step = max(1, CHUNK_WEIGHTS // gtype.block_size)
    for b0 in range(0, nb, step):
        b = blocks[b0:b0 + step]
        d = np.ascontiguousarray(b[:, :2]).view(np.float16).astype(np.float32)
        if gtype is Q8_0:
            q = b[:, 2:].view(np.int8).astype(np.float32)
        else:
            qs = b[:, 2:]
            q = np.concatenate([(qs & 0x0F), (qs >> 4)], axis=-1).astype(np.float32) - 8.0
        out[b0:b0 + step] = q * d
    return DenseTensor(torch.from_numpy(out.reshape(shape)))


def _roundf(x: np.ndarray) -> np.ndarray:
    """C ``roundf``: half away from zero."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def encode_dense(data: torch.Tensor, gtype: GGMLType) -> np.ndarray:
    """Tensor -> raw bytes (flat uint8) of a dense GGML type (Q8_0/Q4_0 as ggml's reference quantizer)."""
    if gtype is BF16:
        return _np(data.to(torch.bfloat16).view(torch.int16)).view(np.uint8).reshape(-1)
    if gtype is F16:
        return _np(data.to(torch.float16)).view(np.uint8).reshape(-1)
    if gtype is F32:
        return _np(data.to(torch.float32)).view(np.uint8).reshape(-1)
    x = _np(data.to(torch.float32)).reshape(-1, gtype.block_size)
    if gtype is Q8_0:
        amax = np.abs(x).max(-1, keepdims=True)
        d = amax / np.float32(127)
        with np.errstate(divide="ignore"):
            idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        qs = _roundf(x * idv).astype(np.int8)
        return np.concatenate([d.astype(np.float16).view(np.uint8), qs.view(np.uint8)], axis=-1).reshape(-1)
    if gtype is Q4_0:
        idx = np.argmax(np.abs(x), axis=-1)[:, None]
        mx = np.take_along_axis(x, idx, axis=-1)
        d = mx / np.float32(-8)
        with np.errstate(divide="ignore"):
            idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        q = np.minimum(15, np.trunc(x * idv + np.float32(8.5))).astype(np.uint8)
        qs = q[:, :16] | (q[:, 16:] << 4)
        return np.concatenate([d.astype(np.float16).view(np.uint8), qs], axis=-1).reshape(-1)
    raise ValueError(f"{gtype.name} is not a dense type")
