"""Fallback CPU ternary matmul through torch's own group-quantized int4 kernels (no compiler needed).

Why it exists: :mod:`runtime.kernels.cpu.ternary` (exact, fastest) needs a C compiler once. Without
one, this backend still avoids a dense copy of the weights. A ternary weight ``w = t * s`` maps to
int4 ``q = t + 8`` with scale ``s`` and zero ``0``: torch's kernel dequantizes ``(q - 8) * scale +
zero`` (verified in tests/cpu).

Precision: in torch 2.13 only the **bf16** path of ``aten._weight_int4pack_mm_for_cpu`` is fast
(measured on the 2-core AVX-512 CI machine: 6144x2048, batch 1, 1 thread: bf16 0.6 ms, fp16 35 ms,
fp32 53 ms), so activations and group scales are rounded to bf16 (8-bit mantissa; relative error
~2^-9 per element). That is NOT exact -- it is the fallback, never the default when cpu_ternary
builds, and its outputs are tested against the reference with a bf16 tolerance.

Memory cost: 4 bits per weight plus a bf16 (scale, zero) pair per group = 4.25 bits per weight at
group 128, i.e. 2x the ``t2`` codes. ``out_features`` must be a multiple of 16 for the packer:
other widths (the 151,669-row vocabulary) are padded with zero rows and the output is cut back.
Conversion runs in 64-row-aligned chunks, never materializing an int32 copy of a whole matrix.
"""

from __future__ import annotations

import torch

from runtime.formats import codecs
from runtime.formats.model_data import TernaryTensor
from runtime.kernels.linear import BACKENDS, LinearWeight

_ROW_ALIGN = 16  # the int4 packer needs N % 16 == 0
_CHUNK_ROWS = 4096  # multiple of the packer's 64-row block; bounds the int32 temporary
_ZERO_POINT = 8  # the kernel computes (q - 8) * scale + zero


def int4_available() -> bool:
    """True when this torch build has the CPU int4 kernels (torch >= 2.5 on x86/ARM)."""
    ops = torch.ops.aten
    return hasattr(ops, "_weight_int4pack_mm_for_cpu") and hasattr(ops, "_convert_weight_to_int4pack_for_cpu")


def pack_int4(t: TernaryTensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(packed uint8 weight, bf16 scales_and_zeros [groups, rows_padded, 2], rows_padded) for ``t``."""
    rows, cols = t.shape
    padded = -(-rows // _ROW_ALIGN) * _ROW_ALIGN
    packed = torch.empty(padded, cols // 2, dtype=torch.uint8)
    for r0 in range(0, padded, _CHUNK_ROWS):
        r1 = min(padded, r0 + _CHUNK_ROWS)
        q = torch.full((r1 - r0, cols), _ZERO_POINT, dtype=torch.int32)
        live = min(r1, rows) - r0
        if live > 0:
            part = TernaryTensor((live, cols), t.group_size, t.codes[r0:r0 + live],
                                 t.scales[r0:r0 + live], t.encoding)
            # code = t + 1, so q = t + 8 = code + 7 (code 3, Q2_0's "+2", stays exact as q = 10)
            q[:live] = codecs.codes_of(part).to(torch.int32) + (_ZERO_POINT - 1)
        packed[r0:r1] = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    groups = cols // t.group_size
    sz = torch.zeros(groups, padded, 2, dtype=torch.bfloat16)
    sz[:, :rows, 0] = t.scales.to(torch.bfloat16).t()
    return packed, sz, padded


class CpuInt4Linear(LinearWeight):
    """Ternary weight repacked once into torch's int4 CPU layout; bf16 activations (approximate)."""

    backend = "cpu_int4"

    def __init__(self, t: TernaryTensor, device: torch.device | str = "cpu") -> None:
        super().__init__(t)
        if torch.device(device).type != "cpu":
            raise ValueError(f"the cpu_int4 backend runs on the CPU, not on {device}")
        if not int4_available():
            raise RuntimeError("this torch build has no CPU int4 kernels (need torch >= 2.5)")
        if self.group_size not in (32, 64, 128, 256):
            raise ValueError(f"torch's int4 CPU kernel needs group size 32, 64, 128 or 256, got {self.group_size}")
        packed, sz, self.padded_out = pack_int4(t)
        self.register_buffer("packed", packed, persistent=False)
        self.register_buffer("scales_and_zeros", sz, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        x2 = x2.to(torch.bfloat16).contiguous()
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x2, self.packed, self.group_size, self.scales_and_zeros)
        if self.padded_out != self.out_features:
            y = y[:, : self.out_features]
        return y.to(x.dtype).reshape(*lead, self.out_features)


if int4_available():
    BACKENDS["cpu_int4"] = CpuInt4Linear
