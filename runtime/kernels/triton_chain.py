"""Decode mat-vecs that hand each other int8 activations: no quantisation launch between them.

Why: the W2A8 mat-vec (``triton_linear._gemv_q8_kernel``) needs its input as int8 with one scale
per 16 values, so every mat-vec of a batch-1 decode step used to be two launches: quantise x, then
multiply. At a few microseconds per launch in a chain of dependent kernels, those quantisation
launches were a large part of the Bonsai-8B step (4 of its 10 launches per layer). Here the kernel
that *produces* an activation also writes its int8 form, and the consumer reads that directly:

* a mat-vec's epilogue quantises its output rows in groups of 16. A program that owns whole
  groups quantises them itself; when a group spans several programs, the last of them to finish
  (an arrival counter, as in the split-K reduction) quantises it from the stored values.
* the RMSNorm in front of the next mat-vec is deferred: ``rmsnorm(x) * w`` quantised per group is
  ``x * w`` quantised per group (the 1/rms factor cancels in a group's scale), and the consumer
  multiplies its dot products by 1/rms, computed from per-group sums of squares the producer
  wrote next to the codes. So a residual-stream producer needs no grid-wide reduction.
* decode attention writes its output's int8 form the same way (``triton_attention``).

The activation layout ("chain layout") is ``_quant_x_kernel``'s six rows of ``K/16`` int32 — four
rows of packed bytes ordered for ``(word >> 2j) & 0x03030303`` + ``dp4a``, the fp32 scale, the sum
of the 16 int8 values — plus a seventh row: the fp32 sum of squares of the 16 (unnormalised) values.
Numerics: the same int8 rounding as the two-launch path, except that the product ``x * w`` is
quantised in fp32 instead of after rounding ``rmsnorm(x)`` to the model dtype, and 1/rms multiplies
the fp32 dot product instead of x.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.formats.model_data import T2
from runtime.kernels import pdl
from runtime.kernels import triton_linear as tlin
from runtime.kernels.pdl import gdc_wait
from runtime.kernels.triton_linear import (
    INTERPRET,
    _counter_buffer,
    _dp4a,
    _first_tile,
    _gemv_epilogue,
    _next_tile,
)

CHAIN_ROWS = 7  # int32 rows per 16 activations: 4 packed byte rows, scale, sum of int8, sum of squares


@triton.jit
def _quant_groups(src_row, q_row, nw_ptr, g0, n_groups, KW, norm_offset, NGB: tl.constexpr, QNORM: tl.constexpr):
    """Groups ``g0 .. g0 + n_groups - 1`` (16 values each) of ``src_row`` into the chain layout of
    ``q_row`` (a row of ``KW`` groups); with ``QNORM`` the values are first multiplied by the next
    RMSNorm's weight (``w + norm_offset``). Loads bypass L1: other programs may have just stored them."""
    g = g0 + tl.arange(0, NGB)
    gm = g < g0 + n_groups
    kk = g[:, None] * 16 + tl.arange(0, 16)[None, :]
    m = gm[:, None] & (kk >= 0)
    v = tl.load(src_row + kk, mask=m, other=0.0, cache_modifier=".cg").to(tl.float32)
    ss = tl.sum(v * v, axis=1)
    if QNORM:
        w = tl.load(nw_ptr + kk, mask=m, other=0.0).to(tl.float32)
        v = v * (w + norm_offset)
    amax = tl.max(tl.abs(v), axis=1)
    scale = amax / 127.0
    rcp = tl.where(amax > 0, 127.0 / tl.maximum(amax, 1e-30), 0.0)
    q = tl.floor(v * rcp[:, None] + 0.5)
    q = tl.minimum(tl.maximum(q, -127.0), 127.0).to(tl.int32)  # [NGB, 16], index 4b + j
    tl.store(q_row + 4 * KW + g, scale.to(tl.int32, bitcast=True), mask=gm)
    tl.store(q_row + 5 * KW + g, tl.sum(q, axis=1), mask=gm)
    tl.store(q_row + 6 * KW + g, ss.to(tl.int32, bitcast=True), mask=gm)
    q3 = tl.reshape(q & 0xFF, [NGB, 4, 4])  # [g, b, j]
    shift = (tl.arange(0, 4) * 8)[None, :, None]
    packed = tl.sum(q3 << shift, axis=1)  # [g, j]; disjoint bytes, so the sum is an OR
    tl.store(q_row + tl.arange(0, 4)[None, :] * KW + g[:, None], packed, mask=gm[:, None])


@triton.jit
def _chain_quant_kernel(x_ptr, stride_xm, nw_ptr, q_ptr, KW, norm_offset, BLOCK_G: tl.constexpr,
                        QNORM: tl.constexpr, USE_GDC: tl.constexpr):
    """A whole activation row to the chain layout (the step's first one: the embedding row)."""
    gdc_wait(USE_GDC)
    row = tl.program_id(0)
    g0 = tl.program_id(1) * BLOCK_G
    _quant_groups(x_ptr + row * stride_xm, q_ptr + row * 7 * KW, nw_ptr, g0, tl.minimum(BLOCK_G, KW - g0), KW,
                  norm_offset, BLOCK_G, QNORM)


@triton.jit
def _quant_out(y_row, qo_row, qnw_ptr, qcnt_ptr, n0, N, qnorm_offset, BLOCK_N: tl.constexpr, QNORM: tl.constexpr):
    """After a program stored rows ``n0 .. n0 + BLOCK_N - 1`` of ``y_row``: quantise the groups of 16 it
    completes. Programs of at least 16 rows own whole groups; smaller ones count arrivals per group
    and the last to arrive quantises it, then resets its counter for the next launch."""
    KWo = N // 16
    tl.debug_barrier()  # every thread's stores are done (and, below, released) before anyone reads them
    if BLOCK_N >= 32:
        g0 = n0 // 16
        _quant_groups(y_row, qo_row, qnw_ptr, g0, tl.minimum(BLOCK_N // 16, KWo - g0), KWo, qnorm_offset,
                      BLOCK_N // 16, QNORM)
    elif BLOCK_N == 16:  # one group (a block of two, half masked: no size-1 tensors)
        _quant_groups(y_row, qo_row, qnw_ptr, n0 // 16, 1, KWo, qnorm_offset, 2, QNORM)
    else:
        g = n0 // 16
        arrived = tl.atomic_add(qcnt_ptr + g, 1)  # acq_rel, gpu scope
        if arrived == 16 // BLOCK_N - 1:
            _quant_groups(y_row, qo_row, qnw_ptr, g, 1, KWo, qnorm_offset, 2, QNORM)
            tl.atomic_xchg(qcnt_ptr + g, 0)


@triton.jit
def _weight_tile(w_ptr, w2_ptr, widx, wmask, wb, wb0, first, first2, DUAL: tl.constexpr, PRELOADED: tl.constexpr):
    """This iteration's int32 weight words (both matrices when DUAL): with PDL the first tile was
    loaded before the wait (``_first_tile``), otherwise every tile is loaded here."""
    if PRELOADED:
        words, words2 = _next_tile(w_ptr, w2_ptr, widx, wmask, wb, wb0, first, first2, DUAL)
    else:
        words = tl.load(w_ptr + widx, mask=wmask, other=0, eviction_policy="evict_first")
        words2 = words
        if DUAL:
            words2 = tl.load(w2_ptr + widx, mask=wmask, other=0, eviction_policy="evict_first")
    return words, words2


@triton.jit
def _gemv_q8c_kernel(
    q_ptr, w_ptr, s_ptr, w2_ptr, s2_ptr,
    r_ptr, stride_rm, y_ptr, stride_ym,
    part_ptr, cnt_ptr, qo_ptr, qnw_ptr, qcnt_ptr,
    M, N, KW, NG, eps, qnorm_offset,
    WPG: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, SPLIT_K: tl.constexpr,
    DUAL: tl.constexpr, RESIDUAL: tl.constexpr, EVEN_K: tl.constexpr, USE_ASM: tl.constexpr,
    NORM: tl.constexpr, SS_BLOCK: tl.constexpr, QOUT: tl.constexpr, QNORM: tl.constexpr, USE_GDC: tl.constexpr,
):
    """W2A8 mat-vec on chain-layout activations (see the module docstring and ``_gemv_q8_kernel``).
    ``NORM``: x is the input of an RMSNorm whose weight the producer already applied; multiply by
    1/rms from the sums of squares. ``QOUT``: also write the output's chain layout to ``qo_ptr``
    (``QNORM``: pre-multiplied by the next RMSNorm's weight ``qnw_ptr``)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    q_row = q_ptr + pid_m * 7 * KW
    n_wb = tl.cdiv(KW, BLOCK_W)
    per_split = tl.cdiv(n_wb, SPLIT_K)
    wb0 = pid_k * per_split
    wb1 = tl.minimum(wb0 + per_split, n_wb)
    acc2d = tl.zeros([BLOCK_N, BLOCK_W], tl.float32)
    acc2d2 = tl.zeros([BLOCK_N, BLOCK_W], tl.float32)
    n_groups = NG
    kw_total = KW
    first = tl.zeros([BLOCK_N, BLOCK_W], tl.int32)
    first2 = first
    if USE_GDC:
        first, first2 = _first_tile(w_ptr, w2_ptr, offs_n, n_mask, wb0, wb1, kw_total, BLOCK_W, DUAL)
    gdc_wait(USE_GDC)
    for wb in range(wb0, wb1):
        wk = wb * BLOCK_W + tl.arange(0, BLOCK_W)
        if EVEN_K:
            km = wk >= 0
        else:
            km = wk < kw_total
        wmask = n_mask[:, None] & km[None, :]
        widx = offs_n[:, None] * kw_total + wk[None, :]
        words, words2 = _weight_tile(w_ptr, w2_ptr, widx, wmask, wb, wb0, first, first2, DUAL, USE_GDC)
        xs = tl.load(q_row + 4 * kw_total + wk, mask=km, other=0).to(tl.float32, bitcast=True)
        xsum = tl.load(q_row + 5 * kw_total + wk, mask=km, other=0)
        dot = tl.zeros([BLOCK_N, BLOCK_W], tl.int32)
        dot2 = tl.zeros([BLOCK_N, BLOCK_W], tl.int32)
        for j in tl.static_range(4):
            xq = tl.load(q_row + j * kw_total + wk, mask=km, other=0)[None, :]
            dot = _dp4a((words >> (2 * j)) & 0x03030303, xq, dot, USE_ASM)
            if DUAL:
                dot2 = _dp4a((words2 >> (2 * j)) & 0x03030303, xq, dot2, USE_ASM)
        sidx = offs_n[:, None] * n_groups + wk[None, :] // WPG
        sc = tl.load(s_ptr + sidx, mask=wmask, other=0.0).to(tl.float32)
        acc2d += (dot - xsum[None, :]).to(tl.float32) * (sc * xs[None, :])
        if DUAL:
            sc2 = tl.load(s2_ptr + sidx, mask=wmask, other=0.0).to(tl.float32)
            acc2d2 += (dot2 - xsum[None, :]).to(tl.float32) * (sc2 * xs[None, :])
    acc = tl.sum(acc2d, axis=1)
    acc2 = tl.sum(acc2d2, axis=1)
    if NORM:  # 1/rms of the unnormalised input, from the producer's per-group sums of squares
        ss = tl.zeros([SS_BLOCK], tl.float32)
        for k0 in range(0, kw_total, SS_BLOCK):
            kk = k0 + tl.arange(0, SS_BLOCK)
            ss += tl.load(q_row + 6 * kw_total + kk, mask=kk < kw_total, other=0).to(tl.float32, bitcast=True)
        inv = tl.rsqrt(tl.sum(ss, axis=0) / (kw_total * 16) + eps)
        acc = acc * inv
        acc2 = acc2 * inv
    y_row = y_ptr + pid_m * stride_ym
    qo_row = qo_ptr + pid_m * 7 * (N // 16)
    qcnt = qcnt_ptr + pid_m * (N // 16)
    if SPLIT_K == 1:
        _gemv_epilogue(acc, acc2, offs_n, n_mask, pid_m, r_ptr, stride_rm, y_ptr, stride_ym, DUAL, RESIDUAL)
        if QOUT:
            _quant_out(y_row, qo_row, qnw_ptr, qcnt, pid_n * BLOCK_N, N, qnorm_offset, BLOCK_N, QNORM)
    else:  # as triton_linear._gemv_finish, plus the output quantisation by the tile's last program
        NP = 2 * N if DUAL else N
        pbase = part_ptr + (pid_k * M + pid_m) * NP
        tl.store(pbase + offs_n, acc, mask=n_mask)
        if DUAL:
            tl.store(pbase + N + offs_n, acc2, mask=n_mask)
        tl.debug_barrier()
        cidx = pid_m * tl.num_programs(1) + pid_n
        arrived = tl.atomic_add(cnt_ptr + cidx, 1)
        if arrived == SPLIT_K - 1:
            tot = tl.zeros([BLOCK_N], tl.float32)
            tot2 = tl.zeros([BLOCK_N], tl.float32)
            for s in tl.static_range(SPLIT_K):
                pb = part_ptr + (s * M + pid_m) * NP
                tot += tl.load(pb + offs_n, mask=n_mask, other=0.0, cache_modifier=".cg")
                if DUAL:
                    tot2 += tl.load(pb + N + offs_n, mask=n_mask, other=0.0, cache_modifier=".cg")
            _gemv_epilogue(tot, tot2, offs_n, n_mask, pid_m, r_ptr, stride_rm, y_ptr, stride_ym, DUAL, RESIDUAL)
            if QOUT:
                _quant_out(y_row, qo_row, qnw_ptr, qcnt, pid_n * BLOCK_N, N, qnorm_offset, BLOCK_N, QNORM)
            tl.atomic_xchg(cnt_ptr + cidx, 0)


# ---------------------------------------------------------------------------------------------
# functional API
# ---------------------------------------------------------------------------------------------

def chain_buffer(m: int, k: int, device: torch.device | str) -> torch.Tensor:
    """A zeroed int32 ``[m, 7 * k / 16]`` chain-layout activation buffer (k a multiple of 16)."""
    if k % 16:
        raise ValueError(f"chain activations need a multiple of 16 values, got {k}")
    return torch.zeros(m, CHAIN_ROWS * (k // 16), dtype=torch.int32, device=device)


def _rows(q: torch.Tensor) -> tuple[int, int]:
    if q.dtype != torch.int32 or q.dim() != 2 or q.shape[1] % CHAIN_ROWS or not q.is_contiguous():
        raise ValueError("a chain activation buffer is a contiguous int32 [m, 7 * K / 16] tensor (chain_buffer)")
    return q.shape[0], q.shape[1] // CHAIN_ROWS


def chain_quantize(x: torch.Tensor, q: torch.Tensor, norm_weight: torch.Tensor | None = None,
                   norm_offset: float = 0.0) -> torch.Tensor:
    """Write ``x [m, K]`` (times ``norm_weight + norm_offset``, the deferred RMSNorm's weight) into
    the chain buffer ``q``; returns ``q``."""
    m, kw = _rows(q)
    x2 = x.reshape(m, kw * 16)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    block = max(2, min(64, triton.next_power_of_2(kw)))
    _chain_quant_kernel[(m, triton.cdiv(kw, block))](
        x2, x2.stride(0), norm_weight if norm_weight is not None else x2, q, kw, float(norm_offset),
        BLOCK_G=block, QNORM=norm_weight is not None, num_warps=4, **pdl.launch_options(x2.device))
    return q


def chain_config(m: int, codes: torch.Tensor, scales: torch.Tensor, group_size: int, dtype: torch.dtype, *,
                 norm: bool, dual: bool, residual: bool) -> tuple:
    """The q8 config the two-launch path uses for this shape (tuned, or measured there on these
    weights), so the chain runs the same tiles; a non-q8 winner falls back to the first q8
    candidate that fits. ``dual``: ``codes``/``scales`` are the gate half (up has the same shape)."""
    n, groups = scales.shape
    k = groups * group_size
    dev = torch.device("cuda", torch.cuda.current_device()) if codes.device.type != "cuda" else codes.device
    x = torch.zeros(m, k, dtype=dtype, device=dev)
    nw = torch.ones(k, dtype=dtype, device=dev) if norm else None
    r = torch.zeros(m, n, dtype=dtype, device=dev) if residual else None
    cfg = tlin._gemv_config(x, nw, codes, scales, codes if dual else None, scales if dual else None, r, n, k,
                            group_size, T2, 1e-6, 0.0, dual)
    if cfg[0] == "q8":
        return cfg
    fits = [c for c in tlin._Q8_CANDIDATES if c[3] <= triton.cdiv(k, c[2])]
    return fits[0] if fits else ("q8", 4, 2048, 1, 2)


class ChainConfigs:
    """The tiles of a decode step's chain mat-vecs, per shape, looked up once: on the step's first
    (eager) call, where tuning may run; later calls, and CUDA-graph capture, only read the dict."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self._cfg: dict[tuple, tuple | None] = {}

    def __call__(self, codes: torch.Tensor, scales: torch.Tensor, group_size: int, *, norm: bool = False,
                 dual: bool = False, residual: bool = False) -> tuple | None:
        key = (tuple(scales.shape), group_size, norm, dual, residual)
        if key not in self._cfg:
            self._cfg[key] = None if INTERPRET else chain_config(1, codes, scales, group_size, self.dtype, norm=norm,
                                                                 dual=dual, residual=residual)
        return self._cfg[key]


def chain_matvec(q: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, group_size: int, *,
                 dtype: torch.dtype, norm_eps: float | None = None, residual: torch.Tensor | None = None,
                 up_codes: torch.Tensor | None = None, up_scales: torch.Tensor | None = None,
                 q_out: torch.Tensor | None = None, q_out_norm: torch.Tensor | None = None,
                 q_out_norm_offset: float = 0.0, out: torch.Tensor | None = None,
                 config: tuple | None = None) -> torch.Tensor:
    """``y = x @ W^T`` (t2 weights) for x given in chain layout ``q [m, 7K/16]``; returns ``y [m, N]``.

    ``norm_eps``: x is the input of an RMSNorm whose weight the producer applied (``q_out_norm``
    of the kernel that wrote ``q``); the result is scaled by 1/rms(x). ``up_codes``/``up_scales``:
    ``silu(x Wg^T) * (x Wu^T)``. ``residual``: added (``out`` may alias it). ``q_out``: also write
    y's chain layout there (``q_out_norm``: pre-multiplied by the next RMSNorm's weight).
    """
    m, kw = _rows(q)
    k = kw * 16
    n, groups = scales.shape
    dual = up_codes is not None
    if groups * group_size != k or codes.shape != (n, k // 4) or group_size % 16:
        raise ValueError(f"weights [{n}, {groups * group_size}] (group {group_size}) do not take {k} chain inputs")
    if dual and (up_scales is None or up_scales.shape != scales.shape or up_codes.shape != codes.shape):
        raise ValueError("gate and up projections must have the same shape")
    if q_out is not None and (n % 16 or _rows(q_out) != (m, n // 16)):
        raise ValueError(f"q_out must be a chain buffer for [{m}, {n}] outputs")
    dev = q.device
    if config is not None:
        cfg = config
    elif INTERPRET:
        cfg = ("q8", 16, 64, 1, 4)
    else:
        cfg = chain_config(m, codes, scales, group_size, dtype, norm=norm_eps is not None, dual=dual,
                           residual=residual is not None)
    _, bn, bk, sk, warps = cfg
    y = out if out is not None else torch.empty(m, n, dtype=dtype, device=dev)
    r2 = residual.reshape(m, n) if residual is not None else None
    bw = max(1, bk // 16)
    n_tiles = triton.cdiv(n, bn)
    part, cnt = tlin._splitk_buffers(sk, m, n, dual, m * n_tiles, y)
    qcnt = _counter_buffer(dev, m * (n // 16), owner="chain") if q_out is not None and bn < 16 else y
    wv = codes.view(torch.int32)
    _gemv_q8c_kernel[(m, n_tiles, sk)](
        q, wv, scales, up_codes.view(torch.int32) if dual else wv, up_scales if dual else scales,
        r2 if r2 is not None else y, r2.stride(0) if r2 is not None else 0, y, y.stride(0),
        part, cnt, q_out if q_out is not None else q, q_out_norm if q_out_norm is not None else y, qcnt,
        m, n, kw, k // group_size, float(norm_eps or 0.0), float(q_out_norm_offset),
        WPG=group_size // 16, BLOCK_N=bn, BLOCK_W=bw, SPLIT_K=sk, DUAL=dual, RESIDUAL=r2 is not None,
        EVEN_K=kw % bw == 0, USE_ASM=not INTERPRET, NORM=norm_eps is not None,
        SS_BLOCK=min(1024, triton.next_power_of_2(kw)), QOUT=q_out is not None, QNORM=q_out_norm is not None,
        num_warps=warps, **pdl.launch_options(dev),
    )
    return y


__all__ = ["CHAIN_ROWS", "ChainConfigs", "chain_buffer", "chain_config", "chain_matvec", "chain_quantize"]
