"""Prefill matmuls (``x @ W^T`` for many rows of x) from the packed ternary layout.

Two paths, the faster measured per (M bucket, N, K) on first use and cached (:mod:`tuning`): ``mm``, tiles
dequantized in registers feeding ``tl.dot``; ``dequant``, one matrix at a time dequantized into a scratch
buffer, then cuBLAS (``torch.matmul``). :func:`ternary_matmul` sends up to 8 rows to the decode mat-vec.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.formats.model_data import T2, T3, t3_bytes_per_group
from runtime.kernels.triton import tuning
from runtime.kernels.triton.launch import INTERPRET, _as_rows, _check, is_mapped
from runtime.kernels.triton.matvec import MATVEC_MAX_M, ternary_matvec
from runtime.kernels.triton.packing import _t3_codes
from runtime.kernels.triton.tuning import _MM_CANDIDATES, _key


@triton.jit
def _mm_kernel(x_ptr, stride_xm, w_ptr, s_ptr, r_ptr, stride_rm, y_ptr, stride_ym, M, N, K,
               G: tl.constexpr, T3: tl.constexpr, NBG: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, RESIDUAL: tl.constexpr, IEEE: tl.constexpr):
    """Prefill GEMM: per scale group, decode a [G, BLOCK_N] tile to the activation dtype -> tl.dot."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = offs_m < M
    n_mask = offs_n < N
    offs_g = tl.arange(0, G)
    xdt = x_ptr.dtype.element_ty
    n_groups = K // G
    sh = tl.arange(0, 16) * 2
    wcol = tl.arange(0, G // 16)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for g in range(0, n_groups):
        kk = g * G + offs_g
        xt = tl.load(x_ptr + offs_m[:, None] * stride_xm + kk[None, :], mask=m_mask[:, None], other=0.0)
        if T3:
            trit = tl.trans(_t3_codes(w_ptr, offs_n, n_mask, kk, K, G, NBG))  # [G, BLOCK_N]
            wt = (trit - 1.0).to(xdt)
        else:  # int32 words (16 weights) -> shift/mask -> magic float (c - 1), as in the mat-vec
            widx = offs_n[:, None] * (K // 16) + (g * (G // 16) + wcol)[None, :]
            words = tl.load(w_ptr + widx, mask=n_mask[:, None], other=0)
            c = (words[:, :, None] >> sh[None, None, :]) & 3
            wf = (c | 0x4B000000).to(tl.float32, bitcast=True) - 8388609.0
            wt = tl.trans(tl.reshape(wf, [BLOCK_N, G])).to(xdt)
        if IEEE:
            part = tl.dot(xt, wt, input_precision="ieee")
        else:
            part = tl.dot(xt, wt)
        sc = tl.load(s_ptr + offs_n * n_groups + g, mask=n_mask, other=0.0).to(tl.float32)
        acc += part * sc[None, :]
    mask = m_mask[:, None] & n_mask[None, :]
    out = acc
    if RESIDUAL:
        r = tl.load(r_ptr + offs_m[:, None] * stride_rm + offs_n[None, :], mask=mask, other=0.0)
        out = out.to(xdt).to(tl.float32) + r.to(tl.float32)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], out.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _dequant_kernel(w_ptr, s_ptr, out_ptr, N, K, G: tl.constexpr, T3: tl.constexpr, NBG: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    kk = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    n_mask = offs_n < N
    mask = n_mask[:, None] & (kk < K)[None, :]
    if T3:
        tf = _t3_codes(w_ptr, offs_n, n_mask, kk, K, G, NBG) - 1.0
    else:  # int32 words, decoded in registers and written as contiguous rows
        wk = pid_k * (BLOCK_K // 16) + tl.arange(0, BLOCK_K // 16)
        words = tl.load(w_ptr + offs_n[:, None] * (K // 16) + wk[None, :],
                        mask=n_mask[:, None] & (wk[None, :] < K // 16), other=0)
        c = (words[:, :, None] >> (tl.arange(0, 16) * 2)[None, None, :]) & 3
        tf = tl.reshape((c | 0x4B000000).to(tl.float32, bitcast=True) - 8388609.0, [BLOCK_N, BLOCK_K])
    if BLOCK_K == G:  # one scale per row in this block: a [BLOCK_N] load, not one gather per weight
        sc = tl.load(s_ptr + offs_n * (K // G) + pid_k, mask=n_mask, other=0.0).to(tl.float32)[:, None]
    else:
        sc = tl.load(s_ptr + offs_n[:, None] * (K // G) + (kk // G)[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs_n[:, None] * K + kk[None, :], (tf * sc).to(out_ptr.dtype.element_ty), mask=mask)


def ternary_dequantize(codes: torch.Tensor, scales: torch.Tensor, group_size: int, encoding: str = T2,
                       dtype: torch.dtype = torch.float16, out: torch.Tensor | None = None) -> torch.Tensor:
    """Dense ``[N, K]`` copy (into ``out`` when given, e.g. a reused per-layer buffer)."""
    n, groups = scales.shape
    k = groups * group_size
    _check(torch.empty(0, k, device="meta"), codes, scales, group_size, encoding)
    if out is None:  # a mapped matrix (pinned host memory) is dequantized into device memory
        dev = torch.device("cuda", torch.cuda.current_device()) if is_mapped(codes) else codes.device
        out = torch.empty(n, k, dtype=dtype, device=dev)
    bn, bk = (16, group_size) if INTERPRET else (64 if group_size <= 128 else 32, group_size)
    t3 = encoding == T3
    grid = (triton.cdiv(n, bn), triton.cdiv(k, bk))
    _dequant_kernel[grid](codes if t3 else codes.view(torch.int32), scales, out, n, k, G=group_size, T3=t3,
                          NBG=t3_bytes_per_group(group_size) if t3 else 1, BLOCK_N=bn, BLOCK_K=bk)
    return out


DEQUANT_BUFFER_ELEMS = 16 << 20  # 32 MB of bf16: larger matrices are done in row chunks (cuBLAS stays efficient)


def _dequant_matmul(x2, codes, scales, group_size, encoding, y2, r2) -> None:
    """Dequantize row chunks of W into a scratch buffer and multiply with cuBLAS. The scratch comes
    from the caching allocator per call (not kept), so no VRAM stays reserved for prefill."""
    n, groups = scales.shape
    k = groups * group_size
    rows = max(1, min(n, DEQUANT_BUFFER_ELEMS // k))
    buf = torch.empty(rows * k, dtype=x2.dtype, device=x2.device)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        wb = buf[: (r1 - r0) * k].view(r1 - r0, k)
        ternary_dequantize(codes[r0:r1], scales[r0:r1], group_size, encoding, out=wb)
        if r2 is not None:
            torch.addmm(r2[:, r0:r1], x2, wb.t(), out=y2[:, r0:r1])
        else:
            torch.matmul(x2, wb.t(), out=y2[:, r0:r1])


def _mm_launch(x2, codes, scales, group_size, encoding, y2, r2, cfg) -> None:
    bm, bn, warps = cfg
    m = x2.shape[0]
    n, groups = scales.shape
    t3 = encoding == T3
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    _mm_kernel[grid](x2, x2.stride(0), codes if t3 else codes.view(torch.int32), scales, r2 if r2 is not None else y2,
                     r2.stride(0) if r2 is not None else 0, y2, y2.stride(0), m, n, groups * group_size,
                     G=group_size, T3=t3, NBG=t3_bytes_per_group(group_size) if t3 else 1,
                     BLOCK_M=bm, BLOCK_N=bn, RESIDUAL=r2 is not None, IEEE=x2.dtype == torch.float32,
                     num_warps=warps)


def _prefill_choice(x2, codes, scales, group_size, encoding, y2, r2) -> tuple:
    if INTERPRET:
        return ("mm", (16, 16, 4))
    m = x2.shape[0]
    n = scales.shape[0]
    key = _key("prefill", triton.next_power_of_2(m), n, scales.shape[1] * group_size, group_size, encoding,
               x2.dtype)
    choice = tuning._tuned.get(key)
    if choice is not None:
        return (choice[0], tuple(choice[1]) if choice[1] else None)
    copies = tuning._tensors_to_time(x2.device, codes, scales)
    if copies is None:  # dequantize (a mapped matrix's bytes then cross the bus once); not remembered
        return ("dequant", None)
    codes, scales = copies
    y = torch.empty_like(y2)
    best, best_t = ("dequant", None), tuning._bench(lambda: _dequant_matmul(x2, codes, scales, group_size, encoding, y, None))
    for cfg in _MM_CANDIDATES:
        try:
            t = tuning._bench(lambda cfg=cfg: _mm_launch(x2, codes, scales, group_size, encoding, y, None, cfg))
        except Exception:
            continue
        if t < best_t:
            best, best_t = ("mm", cfg), t
    tuning._remember(key, (best[0], list(best[1]) if best[1] else None))
    return best


def ternary_matmul(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, group_size: int,
                   encoding: str = T2, *, out: torch.Tensor | None = None,
                   residual: torch.Tensor | None = None, prefill_path: str | None = None) -> torch.Tensor:
    """``x @ W^T (+ residual)`` for any number of rows: mat-vec up to 8 rows, else the measured
    faster of the in-kernel-dequant GEMM (``"mm"``) and dequant-into-buffer + cuBLAS (``"dequant"``)."""
    n, k = _check(x, codes, scales, group_size, encoding)
    x2 = _as_rows(x)
    m = x2.shape[0]
    if m <= MATVEC_MAX_M and prefill_path is None:
        return ternary_matvec(x, codes, scales, group_size, encoding, out=out, residual=residual)
    y2 = out.view(m, n) if out is not None else torch.empty(m, n, dtype=x.dtype, device=x.device)
    r2 = residual.reshape(m, n) if residual is not None else None
    if prefill_path == "mm":
        choice = ("mm", (16, 16, 4) if INTERPRET else _MM_CANDIDATES[0])
    elif prefill_path == "dequant":
        choice = ("dequant", None)
    else:
        choice = _prefill_choice(x2, codes, scales, group_size, encoding, y2, r2)
    if choice[0] == "mm":
        _mm_launch(x2, codes, scales, group_size, encoding, y2, r2, choice[1])
    else:
        _dequant_matmul(x2, codes, scales, group_size, encoding, y2, r2)
    return out if out is not None else y2.view(*x.shape[:-1], n)
