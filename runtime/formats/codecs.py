"""Bit-level codecs for the canonical ternary encodings (``t2``, ``t3``), and :class:`TernaryTensor`,
the packed tensor they read and write (its layout is described in :mod:`runtime.formats.model_data`,
which re-exports it; defined here so that the codec does not import the model representation back).

GGUF block codecs (Q2_0, PQ2_0, PTQ1_0, TQ1_0, TQ2_0, Q8_0, Q4_0) live in
:mod:`runtime.formats.gguf_codecs`; they convert to and from these canonical encodings.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

T2 = "t2"
T3 = "t3"


def t3_bytes_per_group(group_size: int) -> int:
    return (group_size + 4) // 5


@dataclass
class TernaryTensor:
    """A ternary weight matrix in the canonical packed layout (see :mod:`runtime.formats.model_data`)."""

    shape: tuple[int, int]
    group_size: int
    codes: torch.Tensor  # uint8
    scales: torch.Tensor  # float16 [rows, cols // group_size]
    encoding: str = T2

    def __post_init__(self) -> None:
        rows, cols = self.shape
        if cols % self.group_size:
            raise ValueError(f"cols {cols} is not a multiple of group size {self.group_size}")
        groups = cols // self.group_size
        if self.encoding == T2:
            expect = (rows, cols // 4)
        elif self.encoding == T3:
            expect = (rows, groups * t3_bytes_per_group(self.group_size))
        else:
            raise ValueError(f"unknown ternary encoding {self.encoding!r}")
        if tuple(self.codes.shape) != expect or self.codes.dtype != torch.uint8:
            raise ValueError(f"codes must be uint8{list(expect)}, got {self.codes.dtype}{list(self.codes.shape)}")
        if tuple(self.scales.shape) != (rows, groups) or self.scales.dtype != torch.float16:
            raise ValueError(f"scales must be float16[{rows}, {groups}], got {self.scales.dtype}{list(self.scales.shape)}")

    @property
    def nbytes(self) -> int:
        return self.codes.numel() + self.scales.numel() * 2

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Full-precision copy. For tests and small models only, never on the hot path."""
        return dequantize_ternary(self, dtype)


_SHIFTS = torch.tensor([0, 2, 4, 6], dtype=torch.uint8)
_POW3 = torch.tensor([1, 3, 9, 27, 81], dtype=torch.int32)


def pack_t2(codes: torch.Tensor) -> torch.Tensor:
    """Pack codes 0..3 (uint8 ``[rows, cols]``) four per byte, LSB first -> ``[rows, cols//4]``."""
    rows, cols = codes.shape
    if cols % 4:
        raise ValueError("t2 packing needs cols % 4 == 0")
    c = codes.to(torch.uint8).reshape(rows, cols // 4, 4)
    return (c[..., 0] | (c[..., 1] << 2) | (c[..., 2] << 4) | (c[..., 3] << 6)).contiguous()


def unpack_t2(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_t2`: uint8 ``[rows, cols//4]`` -> codes uint8 ``[rows, cols]``."""
    rows, nb = packed.shape
    return ((packed.unsqueeze(-1) >> _SHIFTS.to(packed.device)) & 3).reshape(rows, nb * 4)


def pack_t3(codes: torch.Tensor, group_size: int) -> torch.Tensor:
    """Pack trits 0..2 (``[rows, cols]``) five per byte within each group (see model_data)."""
    rows, cols = codes.shape
    groups = cols // group_size
    nbg = t3_bytes_per_group(group_size)
    c = codes.to(torch.int32).reshape(rows, groups, group_size)
    pad = nbg * 5 - group_size
    if pad:
        c = torch.nn.functional.pad(c, (0, pad), value=0)
    c = c.reshape(rows, groups, nbg, 5)
    packed = (c * _POW3.to(c.device)).sum(-1)
    return packed.to(torch.uint8).reshape(rows, groups * nbg).contiguous()


def unpack_t3(packed: torch.Tensor, cols: int, group_size: int) -> torch.Tensor:
    """Inverse of :func:`pack_t3` -> codes uint8 ``[rows, cols]`` (0..2)."""
    rows = packed.shape[0]
    groups = cols // group_size
    nbg = t3_bytes_per_group(group_size)
    p = packed.to(torch.int32).reshape(rows, groups, nbg, 1)
    trits = (p // _POW3.to(p.device)) % 3
    trits = trits.reshape(rows, groups, nbg * 5)[..., :group_size]
    return trits.reshape(rows, cols).to(torch.uint8)


def codes_of(t: TernaryTensor) -> torch.Tensor:
    """Unpacked codes (uint8, 0..3; weight = (code-1)*scale) of a ternary tensor."""
    if t.encoding == T2:
        return unpack_t2(t.codes)
    if t.encoding == T3:
        return unpack_t3(t.codes, t.shape[1], t.group_size)
    raise ValueError(f"unknown ternary encoding {t.encoding!r}")


def dequantize_ternary(t: TernaryTensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    rows, cols = t.shape
    trits = codes_of(t).to(torch.float32) - 1.0
    scales = t.scales.to(torch.float32).repeat_interleave(t.group_size, dim=1)
    return (trits * scales).to(dtype).reshape(rows, cols)


def quantize_ternary(w: torch.Tensor, group_size: int = 128, *, strict: bool = True,
                     encoding: str = T2) -> tuple[TernaryTensor, float]:
    """Recover (codes, scales) from a dense weight: s = max|w| per group, t = round(w/s).

    With ``strict`` the weight must be exactly ternary per group (every value is -s, 0 or +s up
    to fp16 rounding of s); otherwise ``ValueError`` names the first offending group. Returns the
    tensor and the max relative reconstruction error (0.0 for a truly ternary weight).
    """
    rows, cols = w.shape
    if cols % group_size:
        raise ValueError(f"input width {cols} is not a multiple of group size {group_size}")
    wf = w.detach().to(torch.float32).reshape(rows, cols // group_size, group_size)
    s = wf.abs().amax(-1)
    s16 = s.to(torch.float16)
    safe = torch.where(s > 0, s, torch.ones_like(s)).unsqueeze(-1)
    t = torch.round(wf / safe).clamp(-1, 1)
    recon = t * s16.to(torch.float32).unsqueeze(-1)
    err = (recon - wf).abs()
    tol = s.unsqueeze(-1) * 1e-3 + 1e-12
    bad = err > tol
    max_rel = float((err / safe).max()) if err.numel() else 0.0
    if strict and bool(bad.any()):
        idx = bad.any(-1).nonzero()[0].tolist()
        raise ValueError(
            f"not ternary: row {idx[0]}, group {idx[1]} has values other than {{-s, 0, +s}} "
            f"(max relative error {max_rel:.3g}); use --quantize to quantize it explicitly"
        )
    codes = (t + 1).to(torch.uint8).reshape(rows, cols)
    packed = pack_t2(codes) if encoding == T2 else pack_t3(codes, group_size)
    return TernaryTensor((rows, cols), group_size, packed, s16.contiguous(), encoding), max_rel
