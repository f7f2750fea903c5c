"""Triton kernels for the small DeltaNet ops around the recurrence (CUDA decode path).

Why: at batch 1 a Gated-DeltaNet layer's glue (conv window update + SiLU, the decay / beta gates,
the gated RMSNorm) is ~25 tiny torch kernels per layer, 48 layers per token: launch-bound. Each of
these kernels replaces one group of them with one launch; the torch versions in
:mod:`runtime.model.deltanet` stay the reference (tests compare the two under TRITON_INTERPRET=1).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels import pdl
from runtime.kernels.pdl import gdc_wait


@triton.jit
def _conv_step_kernel(x_ptr, state_ptr, w_ptr, y_ptr, C, K: tl.constexpr, BLOCK: tl.constexpr,
                      USE_GDC: tl.constexpr):
    gdc_wait(USE_GDC)
    pid = tl.program_id(0)
    c = pid * BLOCK + tl.arange(0, BLOCK)
    m = c < C
    xv = tl.load(x_ptr + c, mask=m, other=0.0)
    acc = xv.to(tl.float32) * tl.load(w_ptr + c * K + (K - 1), mask=m, other=0.0).to(tl.float32)
    for j in tl.static_range(K - 1):
        sv = tl.load(state_ptr + c * (K - 1) + j, mask=m, other=0.0)
        acc += sv.to(tl.float32) * tl.load(w_ptr + c * K + j, mask=m, other=0.0).to(tl.float32)
    for j in tl.static_range(K - 2):  # shift the window left by one
        nxt = tl.load(state_ptr + c * (K - 1) + j + 1, mask=m, other=0.0)
        tl.store(state_ptr + c * (K - 1) + j, nxt, mask=m)
    tl.store(state_ptr + c * (K - 1) + (K - 2), xv.to(state_ptr.dtype.element_ty), mask=m)
    y = acc / (1.0 + tl.exp(-acc))
    tl.store(y_ptr + c, y.to(y_ptr.dtype.element_ty), mask=m)


def conv_step(x: torch.Tensor, state: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Decode step of :func:`deltanet.causal_conv1d`: ``x [1, C]``, ``state [C, K-1]`` (updated)."""
    c, k = weight.shape[0], weight.shape[-1]
    if k < 2 or not state.is_contiguous():
        raise ValueError("conv_step needs kernel >= 2 and a contiguous state")
    xs = x.reshape(c).contiguous()
    y = torch.empty_like(xs)
    block = 1024
    _conv_step_kernel[(triton.cdiv(c, block),)](xs, state, weight.reshape(c, k).contiguous(), y, c, K=k,
                                                BLOCK=block, **pdl.launch_options(x.device))
    return y.view(1, c)


@triton.jit
def _gates_kernel(a_ptr, b_ptr, A_ptr, dt_ptr, g_ptr, beta_ptr, N, HV, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < N
    h = i % HV
    av = tl.load(a_ptr + i, mask=m, other=0.0).to(tl.float32) + tl.load(dt_ptr + h, mask=m, other=0.0)
    e = tl.exp(-tl.abs(av))  # softplus = max(a, 0) + log1p(exp(-|a|)), log1p by series when tiny
    sp = tl.maximum(av, 0.0) + tl.where(e < 1e-4, e - 0.5 * e * e, tl.log(1.0 + e))
    g = tl.load(A_ptr + h, mask=m, other=0.0) * sp
    bv = tl.load(b_ptr + i, mask=m, other=0.0)
    beta = 1.0 / (1.0 + tl.exp(-bv.to(tl.float32)))
    tl.store(g_ptr + i, g, mask=m)
    tl.store(beta_ptr + i, beta.to(beta_ptr.dtype.element_ty), mask=m)


def gates(a: torch.Tensor, b: torch.Tensor, A: torch.Tensor, dt_bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``g = A * softplus(a + dt_bias)`` (fp32) and ``beta = sigmoid(b)`` (b's dtype), ``a, b [T, HV]``."""
    a2, b2 = a.contiguous(), b.contiguous()
    n, hv = a2.numel(), a2.shape[-1]
    g = torch.empty(a2.shape, dtype=torch.float32, device=a.device)
    beta = torch.empty_like(b2)
    block = 256
    _gates_kernel[(triton.cdiv(n, block),)](a2, b2, A, dt_bias, g, beta, n, hv, BLOCK=block)
    return g, beta


@triton.jit
def _gated_norm_kernel(x_ptr, z_ptr, w_ptr, y_ptr, D, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    d = tl.arange(0, BLOCK)
    m = d < D
    xv = tl.load(x_ptr + row * D + d, mask=m, other=0.0)
    xf = xv.to(tl.float32)
    inv = tl.rsqrt(tl.sum(xf * xf, axis=0) / D + eps)
    w = tl.load(w_ptr + d, mask=m, other=0.0)
    y = (w.to(tl.float32) * (xf * inv).to(xv.dtype).to(tl.float32)).to(xv.dtype).to(tl.float32)
    zf = tl.load(z_ptr + row * D + d, mask=m, other=0.0).to(tl.float32)
    y = y * (zf / (1.0 + tl.exp(-zf)))
    tl.store(y_ptr + row * D + d, y.to(y_ptr.dtype.element_ty), mask=m)


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Same rounding as :func:`deltanet.gated_rms_norm` (HF ``Qwen3_5RMSNormGated``), one launch."""
    d = x.shape[-1]
    x2, z2 = x.reshape(-1, d).contiguous(), z.reshape(-1, d).contiguous()
    y = torch.empty_like(x2)
    _gated_norm_kernel[(x2.shape[0],)](x2, z2, weight.to(x.dtype).contiguous(), y, d, float(eps),
                                       BLOCK=triton.next_power_of_2(d))
    return y.view(x.shape)
