"""Embedding rows gathered by the GPU straight out of pinned host memory (zero-copy).

Why: an offloaded embedding table (the planner's first offload step) gathered on the CPU and copied
over would need the token id on the host: a sync per token and no CUDA graph. Pinned
host memory is mapped into the GPU's address space (UVA), so a kernel can read the one row it needs
(~1-3 KB of packed codes per token) over the bus itself, with the token id read from device memory.
Decode stays one graph replay per token and the table costs no VRAM.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.formats.model_data import T2, T3, t3_bytes_per_group
from runtime.kernels.triton import pdl
from runtime.kernels.triton.pdl import gdc_wait


@triton.jit
def _gather_rows_kernel(ids_ptr, codes_ptr, scales_ptr, out_ptr, COLS, ROW_BYTES, NGROUPS,
                        G: tl.constexpr, T3: tl.constexpr, NBG: tl.constexpr, DENSE: tl.constexpr,
                        BLOCK: tl.constexpr, USE_GDC: tl.constexpr):
    gdc_wait(USE_GDC)
    t = tl.program_id(0)
    row = tl.load(ids_ptr + t).to(tl.int64)
    k = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = k < COLS
    if DENSE:
        w = tl.load(codes_ptr + row * COLS + k, mask=m, other=0.0).to(tl.float32)
    else:
        g = k // G
        if T3:
            j = k - g * G
            b = tl.load(codes_ptr + row * ROW_BYTES + g * NBG + j // 5, mask=m, other=0).to(tl.int32)
            p = j % 5
            pw = tl.where(p == 0, 1, tl.where(p == 1, 3, tl.where(p == 2, 9, tl.where(p == 3, 27, 81))))
            trit = (b // pw) % 3
        else:
            b = tl.load(codes_ptr + row * ROW_BYTES + k // 4, mask=m, other=0).to(tl.int32)
            trit = (b >> (2 * (k % 4))) & 3
        sc = tl.load(scales_ptr + row * NGROUPS + g, mask=m, other=0.0).to(tl.float32)
        w = (trit - 1).to(tl.float32) * sc
    tl.store(out_ptr + t * COLS + k, w.to(out_ptr.dtype.element_ty), mask=m)


def gather_rows(ids: torch.Tensor, out_dtype: torch.dtype, *, codes: torch.Tensor | None = None,
                scales: torch.Tensor | None = None, group_size: int = 0, encoding: str = T2,
                dense: torch.Tensor | None = None) -> torch.Tensor:
    """Rows ``ids`` of a packed ternary table (``codes``/``scales``) or a ``dense`` one, dequantized
    to ``out_dtype`` on ``ids``' device. The table may live in pinned host memory."""
    n = ids.numel()
    if dense is not None:
        cols = dense.shape[1]
        src, sc, row_bytes, ngroups, g, nbg = dense, dense, 0, 0, 1, 1
    else:
        assert codes is not None and scales is not None
        ngroups = scales.shape[1]
        cols = ngroups * group_size
        row_bytes = codes.shape[1]
        src, sc, g = codes, scales, group_size
        nbg = t3_bytes_per_group(group_size) if encoding == T3 else 1
    out = torch.empty(n, cols, dtype=out_dtype, device=ids.device)
    block = 1024
    _gather_rows_kernel[(n, triton.cdiv(cols, block))](
        ids, src, sc, out, cols, row_bytes, ngroups, G=g, T3=encoding == T3, NBG=nbg,
        DENSE=dense is not None, BLOCK=block, **pdl.launch_options(ids.device))
    return out


__all__ = ["gather_rows"]
