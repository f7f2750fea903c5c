"""RMSNorm (+ residual add) as one Triton launch per row block.

Why: in a decode step the residual add and the next RMSNorm are two tiny memory-bound ops; fused
they read x and the residual once and write the new residual stream and the normalised row in the
same pass. Rounding follows HF (Qwen3: ``w * (x * rsqrt).to(dtype)``; Qwen3.5 offset style:
``(x * rsqrt * (offset + w)).to(dtype)``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels.triton import pdl
from runtime.kernels.triton.pdl import gdc_wait


@triton.jit
def _rmsnorm_kernel(x_ptr, stride_x, r_ptr, stride_r, w_ptr, y_ptr, stride_y, H, eps, offset,
                    BLOCK: tl.constexpr, RESIDUAL: tl.constexpr, QWEN3: tl.constexpr, USE_GDC: tl.constexpr):
    gdc_wait(USE_GDC)
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < H
    xv = tl.load(x_ptr + row * stride_x + cols, mask=m, other=0.0)
    dt = xv.dtype
    if RESIDUAL:  # h = residual + x in the model dtype; becomes the new residual stream
        rv = tl.load(r_ptr + row * stride_r + cols, mask=m, other=0.0)
        hv = (rv.to(tl.float32) + xv.to(tl.float32)).to(dt)
        tl.store(r_ptr + row * stride_r + cols, hv, mask=m)
        xv = hv
    xf = xv.to(tl.float32)
    inv = tl.rsqrt(tl.sum(xf * xf, axis=0) / H + eps)
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    if QWEN3:
        y = (xf * inv).to(dt).to(tl.float32) * w
    else:
        y = xf * inv * (w + offset)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=m)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float, *, residual: torch.Tensor | None = None,
            weight_offset: float = 0.0, out: torch.Tensor | None = None) -> torch.Tensor:
    """RMSNorm over the last dim. With ``residual``: ``residual += x`` in place, returns its norm."""
    h = x.shape[-1]
    if weight.shape != (h,):
        raise ValueError(f"norm weight must have shape [{h}], got {list(weight.shape)}")
    x2 = x.reshape(-1, h)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    r2 = None
    if residual is not None:
        if residual.shape != x.shape or residual.dtype != x.dtype:
            raise ValueError("residual must match x in shape and dtype")
        r2 = residual.view(-1, h)  # must be a view: it is updated in place
    y = out if out is not None else torch.empty_like(x)
    y2 = y.view(-1, h)
    block = triton.next_power_of_2(h)
    warps = 4 if block <= 2048 else 8
    _rmsnorm_kernel[(x2.shape[0],)](
        x2, x2.stride(0), r2 if r2 is not None else x2, r2.stride(0) if r2 is not None else 0,
        weight, y2, y2.stride(0), h, float(eps), float(weight_offset),
        BLOCK=block, RESIDUAL=r2 is not None, QWEN3=weight_offset == 0.0, num_warps=warps,
        **pdl.launch_options(x2.device),
    )
    return y
