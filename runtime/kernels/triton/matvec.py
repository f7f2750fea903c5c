"""Decode mat-vecs (``x @ W^T`` for at most 8 rows of x) straight from the packed ternary layout.

Why this shape of kernel (numbers in docs/kernels.md): at 2 bits a decode mat-vec moves only a few MB per
matrix, so it is bound by bytes in flight and by the instructions spent decoding, not by FLOPs. Each program
owns BLOCK_N output rows of one activation row and a 1/SPLIT_K slice of K; the fp16 group scale is applied
once per 16-weight word partial sum. Split-K partials are reduced *in the same launch* by the last program to
arrive at a per-tile counter (deterministic order, counters reset by that program), so epilogues (SiLU*mul,
residual add) still fuse and a decode step stays one launch per matmul. Optional prologue: RMSNorm of x
computed by every program (x is <= 20 KB, read from L2).

Variants (the first field of a launch config; tables in :mod:`runtime.kernels.triton.tuning`): the plain
fp32 kernel, ``xp``/``x3`` (x prepared by a tiny launch first), ``dot`` (tensor cores), and with int8 decode
activations ``q8``/``q8c``/``q8p`` (t2 words through ``dp4a``, one activation scale per 32 values) and ``q3``
(t3 words through ``dp2a`` on in-register base-3 digits).
"""

from __future__ import annotations

import warnings

import torch
import triton
import triton.language as tl

from runtime import flags
from runtime.formats.model_data import T2, T3, t3_bytes_per_group
from runtime.kernels.triton import pdl, tuning
from runtime.kernels.triton.launch import INTERPRET, _as_rows, _check, _sm_count, _splitk_buffers
from runtime.kernels.triton.packing import (
    _ACT_WORDS,
    INT8_ACT_BLOCK,
    Q8_PLANES,
    _dp2a,
    _dp4a,
    _load_x,
    _prep_x_kernel,
    _quant_x3_kernel,
    _quant_x_frag_kernel,
    _quant_x_kernel,
    _t3_partial,
    _t3_prescale,
    _words_in_row,
    row_inv_rms,
)
from runtime.kernels.triton.pdl import gdc_wait
from runtime.kernels.triton.tuning import (
    _DOT_CANDIDATES,
    _GEMV_CANDIDATES,
    _INTERPRET_GEMV,
    _Q3_CANDIDATES,
    _Q8_CANDIDATES,
    _Q8C_CANDIDATES,
    _Q8M_CANDIDATES,
    _Q8P_CANDIDATES,
    _Q8T_CANDIDATES,
    _Q8W_CANDIDATES,
    _QUICK_DOT,
    _QUICK_GEMV,
    _QUICK_Q3,
    _QUICK_Q8,
    _QUICK_Q8M,
    _X3_CANDIDATES,
    _XP_CANDIDATES,
    _key,
)

MATVEC_MAX_M = 8  # rows of x up to which the mat-vec kernel is used
Q8W_MAX_ROWS = 16  # rows the register-fed tensor-core mat-vec takes (two MMA columns of 8)


def _q8w_ok(m: int, k: int, g: int, cfg: tuple, device: torch.device) -> bool:
    """Whether ``_gemv_q8w_kernel`` can run this launch: its shapes, and int8 ``mma.sync`` on the GPU (the
    interpreter emulates the MMA)."""
    if not (1 < m <= Q8W_MAX_ROWS and cfg[1] == 16 and k % 32 == 0 and g in (32, 64, 128) and cfg[4] in (1, 2, 4, 8, 16)):
        return False
    return INTERPRET or (device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8)
Q8M_MAX_ROWS = 64  # rows the batched int8 mat-vec takes (runtime.batching.MAX_BATCH_LIMIT; its row loop is a loop)


@triton.jit
def _gemv_epilogue(acc, acc2, offs_n, n_mask, pid_m, r_ptr, stride_rm, y_ptr, stride_ym,
                   DUAL: tl.constexpr, RESIDUAL: tl.constexpr):
    ydt = y_ptr.dtype.element_ty
    out = acc
    if DUAL:  # silu(gate) * up, each projection rounded to the model dtype first (as HF)
        g = acc.to(ydt).to(tl.float32)
        u = acc2.to(ydt).to(tl.float32)
        out = g / (1.0 + tl.exp(-g)) * u
    if RESIDUAL:
        r = tl.load(r_ptr + pid_m * stride_rm + offs_n, mask=n_mask, other=0.0).to(tl.float32)
        out = out.to(ydt).to(tl.float32) + r
    tl.store(y_ptr + pid_m * stride_ym + offs_n, out.to(ydt), mask=n_mask)


@triton.jit
def _gemv_finish(acc, acc2, offs_n, n_mask, pid_m, pid_n, pid_k, M, N, part_ptr, cnt_ptr,
                 r_ptr, stride_rm, y_ptr, stride_ym, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
                 DUAL: tl.constexpr, RESIDUAL: tl.constexpr):
    """Write a mat-vec tile: directly, or (split-K) store this split's partial and let the last
    program of the tile to arrive reduce all splits in fixed order, run the epilogue and reset the
    counter — so a split-K mat-vec stays one launch and bitwise reproducible."""
    if SPLIT_K == 1:
        _gemv_epilogue(acc, acc2, offs_n, n_mask, pid_m, r_ptr, stride_rm, y_ptr, stride_ym, DUAL, RESIDUAL)
    else:
        NP = 2 * N if DUAL else N
        pbase = part_ptr + (pid_k * M + pid_m) * NP
        tl.store(pbase + offs_n, acc, mask=n_mask)
        if DUAL:
            tl.store(pbase + N + offs_n, acc2, mask=n_mask)
        tl.debug_barrier()  # every thread's partial is written before the release below
        cidx = pid_m * tl.num_programs(0) + pid_n
        arrived = tl.atomic_add(cnt_ptr + cidx, 1)  # acq_rel, gpu scope
        if arrived == SPLIT_K - 1:  # last program of this tile: reduce in fixed split order
            tot = tl.zeros([BLOCK_N], tl.float32)
            tot2 = tl.zeros([BLOCK_N], tl.float32)
            for s in tl.static_range(SPLIT_K):
                pb = part_ptr + (s * M + pid_m) * NP
                tot += tl.load(pb + offs_n, mask=n_mask, other=0.0, cache_modifier=".cg")
                if DUAL:
                    tot2 += tl.load(pb + N + offs_n, mask=n_mask, other=0.0, cache_modifier=".cg")
            _gemv_epilogue(tot, tot2, offs_n, n_mask, pid_m, r_ptr, stride_rm, y_ptr, stride_ym,
                           DUAL, RESIDUAL)
            tl.atomic_xchg(cnt_ptr + cidx, 0)  # leave the counter ready for the next launch


@triton.jit
def _gemv_kernel(
    x_ptr, stride_xm, nw_ptr,
    w_ptr, s_ptr, w2_ptr, s2_ptr,
    r_ptr, stride_rm, y_ptr, stride_ym,
    part_ptr, cnt_ptr,
    M, N, K, KW, NG, eps, norm_offset, MAGIC,
    G: tl.constexpr, T3: tl.constexpr, NBG: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    NORM: tl.constexpr, NORM_QWEN3: tl.constexpr, DUAL: tl.constexpr, RESIDUAL: tl.constexpr,
    PREP: tl.constexpr = 0, EVEN_K: tl.constexpr = False,
):
    """PREP=1: x was rewritten by ``_prep_x_kernel`` as fp32 ``xp[j, w] = x[16 w + j]`` (normalised if
    asked), so the value every bit position j needs is one contiguous vector load, no convert.
    PREP=2: additionally ``xp[j, w]`` is pre-multiplied by ``4^-(j mod 11)`` and row 16 holds the
    per-word sums of x; then a weight costs one LOP3 ((w & 3<<2j) | 2^23 bits), one FADD and one
    FFMA: ``c * 4^j`` times ``x * 4^-j`` is exact, and ``-1`` is applied once per word via the sum.
    KW = K/16 and NG = K/G are passed (not derived in-kernel) so Triton sees their divisibility
    and vectorises the row loads."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    x_row = x_ptr + pid_m * stride_xm
    inv_rms = 1.0
    if NORM:
        inv_rms = row_inv_rms(x_row, K, eps, BLOCK_K)

    n_kb = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(n_kb, SPLIT_K)
    kb0 = pid_k * per_split
    kb1 = tl.minimum(kb0 + per_split, n_kb)
    acc = tl.zeros([BLOCK_N], tl.float32)
    acc2 = tl.zeros([BLOCK_N], tl.float32)
    # t2: per-word partial sums stay in a 2-D accumulator (reduced once at the end) so the inner
    # loop is shift/LOP/FADD/FFMA per weight with no cross-thread traffic.
    acc2d = tl.zeros([BLOCK_N, BLOCK_K // 16], tl.float32)
    acc2d2 = tl.zeros([BLOCK_N, BLOCK_K // 16], tl.float32)
    kw_total = KW
    n_groups = NG
    for kb in range(kb0, kb1):
        k0 = kb * BLOCK_K
        if T3:
            kk = k0 + tl.arange(0, BLOCK_K)
            xf = _load_x(x_row, nw_ptr, kk, K, inv_rms, norm_offset, NORM, NORM_QWEN3)
            acc += _t3_partial(w_ptr, s_ptr, offs_n, n_mask, kk, xf, K, G, NBG)
            if DUAL:
                acc2 += _t3_partial(w2_ptr, s2_ptr, offs_n, n_mask, kk, xf, K, G, NBG)
        else:
            wk = k0 // 16 + tl.arange(0, BLOCK_K // 16)
            wmask = n_mask[:, None] & _words_in_row(wk, kw_total, EVEN_K)[None, :]
            widx = offs_n[:, None] * kw_total + wk[None, :]
            t = tl.zeros([BLOCK_N, BLOCK_K // 16], tl.float32)
            words = tl.load(w_ptr + widx, mask=wmask, other=0, eviction_policy="evict_first")
            if DUAL:
                words2 = tl.load(w2_ptr + widx, mask=wmask, other=0, eviction_policy="evict_first")
            if DUAL:
                t2 = tl.zeros([BLOCK_N, BLOCK_K // 16], tl.float32)
            if PREP == 2:
                whi = words >> 22
                if DUAL:
                    whi2 = words2 >> 22
                for j in tl.static_range(16):
                    if EVEN_K:
                        xj = tl.load(x_row + j * kw_total + wk)
                    else:
                        xj = tl.load(x_row + j * kw_total + wk, mask=wk < kw_total, other=0.0)
                    # MAGIC (= 0x4B000000) arrives as an argument so it lives in a register and each
                    # weight is one LOP3 with the bit mask as immediate (no per-weight constant MOV)
                    if j < 11:
                        cf = ((words & (3 << (2 * j))) | MAGIC).to(tl.float32, bitcast=True) - 8388608.0
                    else:
                        cf = ((whi & (3 << (2 * (j - 11)))) | MAGIC).to(tl.float32, bitcast=True) - 8388608.0
                    t += cf * xj[None, :]
                    if DUAL:
                        if j < 11:
                            cf2 = ((words2 & (3 << (2 * j))) | MAGIC).to(tl.float32, bitcast=True) - 8388608.0
                        else:
                            cf2 = ((whi2 & (3 << (2 * (j - 11)))) | MAGIC).to(tl.float32, bitcast=True) - 8388608.0
                        t2 += cf2 * xj[None, :]
                if EVEN_K:
                    xs = tl.load(x_row + 16 * kw_total + wk)
                else:
                    xs = tl.load(x_row + 16 * kw_total + wk, mask=wk < kw_total, other=0.0)
                t -= xs[None, :]
                if DUAL:
                    t2 -= xs[None, :]
            else:
                for j in tl.static_range(16):
                    if PREP:
                        if EVEN_K:
                            xj = tl.load(x_row + j * kw_total + wk)
                        else:
                            xj = tl.load(x_row + j * kw_total + wk, mask=wk < kw_total, other=0.0)
                    else:
                        xj = _load_x(x_row, nw_ptr, wk * 16 + j, K, inv_rms, norm_offset, NORM, NORM_QWEN3)
                    cf = (((words >> (2 * j)) & 3) | 0x4B000000).to(tl.float32, bitcast=True) - 8388609.0  # c-1
                    t += cf * xj[None, :]
                    if DUAL:
                        cf2 = (((words2 >> (2 * j)) & 3) | 0x4B000000).to(tl.float32, bitcast=True) - 8388609.0
                        t2 += cf2 * xj[None, :]
            sidx = offs_n[:, None] * n_groups + (wk[None, :] * 16) // G
            acc2d += t * tl.load(s_ptr + sidx, mask=wmask, other=0.0).to(tl.float32)
            if DUAL:
                acc2d2 += t2 * tl.load(s2_ptr + sidx, mask=wmask, other=0.0).to(tl.float32)
    if not T3:
        acc = tl.sum(acc2d, axis=1)
        if DUAL:
            acc2 = tl.sum(acc2d2, axis=1)

    _gemv_finish(acc, acc2, offs_n, n_mask, pid_m, pid_n, pid_k, M, N, part_ptr, cnt_ptr,
                 r_ptr, stride_rm, y_ptr, stride_ym, BLOCK_N, SPLIT_K, DUAL, RESIDUAL)


@triton.jit
def _first_tile(ptr, ptr2, idx, mask, DUAL: tl.constexpr):
    """A tile of int32 weight words (of both matrices when DUAL). A program's first one is loaded before the PDL
    wait: weights are never written during a step, so this may overlap the previous kernel's tail."""
    first = tl.load(ptr + idx, mask=mask, other=0, eviction_policy="evict_first")
    first2 = first
    if DUAL:
        first2 = tl.load(ptr2 + idx, mask=mask, other=0, eviction_policy="evict_first")
    return first, first2


@triton.jit
def _next_tile(w_ptr, w2_ptr, widx, wmask, wb, wb0, first, first2, DUAL: tl.constexpr):
    """This iteration's weight tile: the preloaded one on the first iteration (the load is masked
    off then, so it moves no bytes), a fresh load afterwards."""
    is_first = wb == wb0
    m = wmask & (wb != wb0)
    words = tl.where(is_first, first, tl.load(w_ptr + widx, mask=m, other=0, eviction_policy="evict_first"))
    words2 = words
    if DUAL:
        words2 = tl.where(is_first, first2, tl.load(w2_ptr + widx, mask=m, other=0, eviction_policy="evict_first"))
    return words, words2


@triton.jit
def _gemv_q8_kernel(
    q_ptr, w_ptr, s_ptr, w2_ptr, s2_ptr,
    r_ptr, stride_rm, y_ptr, stride_ym,
    part_ptr, cnt_ptr,
    M, N, KW, NG,
    WPG: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, SPLIT_K: tl.constexpr,
    DUAL: tl.constexpr, RESIDUAL: tl.constexpr, EVEN_K: tl.constexpr, USE_ASM: tl.constexpr,
    USE_GDC: tl.constexpr,
):
    """Mat-vec on int8 activations (W2A8, as llama.cpp's MMVQ and BitNet's GPU kernel): per int32
    weight word four in-place plane masks + ``dp4a``, per word pair (one activation scale) the exact
    integer dot of 32 codes with 32 int8 activations and one float step (``_q8p_dot``) — ~1.2
    instructions per weight on sm_90, loads and reduction included, instead of ~3.6 for the fp32 decode.
    One program per (row tile, K split).
    ``q_ptr`` holds ``_quant_x_kernel``'s rows; WPG = words per scale group (G / 16, at least 2).
    With PDL (``USE_GDC``) the first weight tile is loaded before waiting for the kernel that wrote x."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    q_row = q_ptr + pid_m * 7 * KW
    n_wb = tl.cdiv(KW, BLOCK_W)
    per_split = tl.cdiv(n_wb, SPLIT_K)
    wb0 = pid_k * per_split
    wb1 = tl.minimum(wb0 + per_split, n_wb)
    RUNS: tl.constexpr = BLOCK_W // min(4, WPG, BLOCK_W)  # scale runs per tile (_run_scales)
    acc2d = tl.zeros([BLOCK_N, RUNS], tl.float32)
    acc2d2 = tl.zeros([BLOCK_N, RUNS], tl.float32)
    n_groups = NG
    kw_total = KW
    if USE_GDC:
        wk0 = wb0 * BLOCK_W + tl.arange(0, BLOCK_W)
        m0 = n_mask[:, None] & ((wk0 < kw_total) & (wb0 < wb1))[None, :]
        first, first2 = _first_tile(w_ptr, w2_ptr, offs_n[:, None] * kw_total + wk0[None, :], m0, DUAL)
    gdc_wait(USE_GDC)
    for wb in range(wb0, wb1):
        wk = wb * BLOCK_W + tl.arange(0, BLOCK_W)
        km = _words_in_row(wk, kw_total, EVEN_K)
        wmask = n_mask[:, None] & km[None, :]
        widx = offs_n[:, None] * kw_total + wk[None, :]
        if USE_GDC:
            words, words2 = _next_tile(w_ptr, w2_ptr, widx, wmask, wb, wb0, first, first2, DUAL)
        else:
            words = tl.load(w_ptr + widx, mask=wmask, other=0, eviction_policy="evict_first")
            if DUAL:
                words2 = tl.load(w2_ptr + widx, mask=wmask, other=0, eviction_policy="evict_first")
        x0, x1, x2, x3, xs, xneg = _q8p_x(q_row, wb * BLOCK_W, kw_total, BLOCK_W, EVEN_K)
        sc = _run_scales(s_ptr, offs_n, n_mask[:, None], wb * BLOCK_W, kw_total, n_groups, WPG, BLOCK_W, EVEN_K)
        acc2d += _q8p_dot(words, sc, x0, x1, x2, x3, xs, xneg, WPG, USE_ASM)
        if DUAL:
            sc2 = _run_scales(s2_ptr, offs_n, n_mask[:, None], wb * BLOCK_W, kw_total, n_groups, WPG, BLOCK_W, EVEN_K)
            acc2d2 += _q8p_dot(words2, sc2, x0, x1, x2, x3, xs, xneg, WPG, USE_ASM)
    acc = tl.sum(acc2d, axis=1)
    acc2 = tl.sum(acc2d2, axis=1)
    _gemv_finish(acc, acc2, offs_n, n_mask, pid_m, pid_n, pid_k, M, N, part_ptr, cnt_ptr,
                 r_ptr, stride_rm, y_ptr, stride_ym, BLOCK_N, SPLIT_K, DUAL, RESIDUAL)


@triton.jit
def _gemv_q8c_kernel(
    q_ptr, w_ptr, s_ptr, w2_ptr, s2_ptr,
    r_ptr, stride_rm, y_ptr, stride_ym,
    part_ptr, cnt_ptr,
    M, N, KW, NG,
    WPG: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr, SPLIT_K: tl.constexpr,
    DUAL: tl.constexpr, RESIDUAL: tl.constexpr, EVEN_K: tl.constexpr, USE_ASM: tl.constexpr,
    USE_GDC: tl.constexpr,
):
    """``_gemv_q8_kernel`` with fewer instructions per weight word (the q8 mat-vec takes 1.3-2x a plain
    read of its own tiles on the H200; this variant is 3-5 % faster for the 27B gate_up, equal elsewhere,
    ``docs/kernels.md``): tiles are ``[BLOCK_N, BLOCK_C, 4]`` — chunks of 4 words
    (16 bytes, one vector load; G >= 64 keeps a chunk inside one scale group) — so the group scale is
    loaded and applied once per chunk, and the integer dot needs no convert: ``dp4a`` accumulates onto
    the bits of 1.5 * 2^23, so the int32 result read as fp32 is ``1.5 * 2^23 + dot`` exactly
    (|dot| < 2^22), and subtracting quantiser row 6 (``1.5 * 2^23 + sum q``, fp32) leaves
    ``dot - sum q`` exactly. Per word: 4 extracts, 4 dp4a, one FADD, one FFMA."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    q_row = q_ptr + pid_m * 7 * KW
    kc = KW // 4
    n_cb = tl.cdiv(kc, BLOCK_C)
    per_split = tl.cdiv(n_cb, SPLIT_K)
    cb0 = pid_k * per_split
    cb1 = tl.minimum(cb0 + per_split, n_cb)
    lane = tl.arange(0, 4)[None, None, :]
    acc2d = tl.zeros([BLOCK_N, BLOCK_C], tl.float32)
    acc2d2 = tl.zeros([BLOCK_N, BLOCK_C], tl.float32)
    if USE_GDC:
        c0 = cb0 * BLOCK_C + tl.arange(0, BLOCK_C)
        m0 = n_mask[:, None, None] & ((c0 < kc) & (cb0 < cb1))[None, :, None]
        first, first2 = _first_tile(w_ptr, w2_ptr, offs_n[:, None, None] * KW + c0[None, :, None] * 4 + lane, m0, DUAL)
    gdc_wait(USE_GDC)
    for cb in range(cb0, cb1):
        c = cb * BLOCK_C + tl.arange(0, BLOCK_C)
        cm = _words_in_row(c, kc, EVEN_K)
        wk = c[None, :, None] * 4 + lane  # [1, BLOCK_C, 4] word index
        km = cm[None, :, None]
        wmask = n_mask[:, None, None] & km
        widx = offs_n[:, None, None] * KW + wk
        if USE_GDC:
            words, words2 = _next_tile(w_ptr, w2_ptr, widx, wmask, cb, cb0, first, first2, DUAL)
        else:
            words = tl.load(w_ptr + widx, mask=wmask, other=0, eviction_policy="evict_first")
            words2 = words
            if DUAL:
                words2 = tl.load(w2_ptr + widx, mask=wmask, other=0, eviction_policy="evict_first")
        xs = tl.load(q_row + 4 * KW + wk, mask=km, other=0).to(tl.float32, bitcast=True)
        xo = tl.load(q_row + 6 * KW + wk, mask=km, other=0x4B400000).to(tl.float32, bitcast=True)
        dot = tl.full([BLOCK_N, BLOCK_C, 4], 0x4B400000, tl.int32)
        dot2 = dot
        for j in tl.static_range(4):
            xq = tl.load(q_row + j * KW + wk, mask=km, other=0)
            dot = _dp4a((words >> (2 * j)) & 0x03030303, xq, dot, USE_ASM)
            if DUAL:
                dot2 = _dp4a((words2 >> (2 * j)) & 0x03030303, xq, dot2, USE_ASM)
        sidx = offs_n[:, None] * NG + (c * 4)[None, :] // WPG
        smask = n_mask[:, None] & cm[None, :]
        sc = tl.load(s_ptr + sidx, mask=smask, other=0.0).to(tl.float32)
        acc2d += tl.sum((dot.to(tl.float32, bitcast=True) - xo) * xs, axis=2) * sc
        if DUAL:
            sc2 = tl.load(s2_ptr + sidx, mask=smask, other=0.0).to(tl.float32)
            acc2d2 += tl.sum((dot2.to(tl.float32, bitcast=True) - xo) * xs, axis=2) * sc2
    acc = tl.sum(acc2d, axis=1)
    acc2 = tl.sum(acc2d2, axis=1)
    _gemv_finish(acc, acc2, offs_n, n_mask, pid_m, pid_n, pid_k, M, N, part_ptr, cnt_ptr,
                 r_ptr, stride_rm, y_ptr, stride_ym, BLOCK_N, SPLIT_K, DUAL, RESIDUAL)


@triton.jit
def _q8p_tile(w_ptr, s_ptr, w2_ptr, s2_ptr, t, w0, live, N, KW, NG, WPG: tl.constexpr, BLOCK_N: tl.constexpr,
              WIDTH: tl.constexpr, DUAL: tl.constexpr, EVEN: tl.constexpr):
    """Weight words ``[w0, w0 + WIDTH)`` of row tile ``t`` and their group scales (both matrices when DUAL);
    everything masked off when ``live`` is false (the prefetch past a program's last step)."""
    offs_n = t * BLOCK_N + tl.arange(0, BLOCK_N)
    wk = w0 + tl.arange(0, WIDTH)
    rows = (offs_n < tl.where(live, N, 0))[:, None]
    wmask = rows & _words_in_row(wk, KW, EVEN)[None, :]
    widx = offs_n[:, None] * KW + wk[None, :]
    words = tl.load(w_ptr + widx, mask=wmask, other=0, eviction_policy="evict_first")
    sc = _run_scales(s_ptr, offs_n, rows, w0, KW, NG, WPG, WIDTH, EVEN)
    words2 = words
    sc2 = sc
    if DUAL:
        words2 = tl.load(w2_ptr + widx, mask=wmask, other=0, eviction_policy="evict_first")
        sc2 = _run_scales(s2_ptr, offs_n, rows, w0, KW, NG, WPG, WIDTH, EVEN)
    return words, sc, words2, sc2


@triton.jit
def _run_scales(s_ptr, offs_n, rows, w0, KW, NG, WPG: tl.constexpr, WIDTH: tl.constexpr, EVEN: tl.constexpr):
    """The fp16 group scale of each run of ``min(4, WPG, WIDTH)`` consecutive words in ``[w0, w0 + WIDTH)``
    of rows ``offs_n`` (masked by ``rows``), ``[BLOCK_N, WIDTH / run]``: a run shares one scale, so it is
    loaded and applied once (a per-word gather cost ~40 extra instructions per 16 words of a thread on sm_90)."""
    SUB: tl.constexpr = min(4, WPG, WIDTH)
    wq = w0 + tl.arange(0, WIDTH // SUB) * SUB
    sidx = offs_n[:, None] * NG + wq[None, :] // WPG
    return tl.load(s_ptr + sidx, mask=rows & _words_in_row(wq, KW, EVEN)[None, :], other=0.0)


@triton.jit
def _x_pairs(scale, qsum, WIDTH: tl.constexpr):
    """Per word pair (one activation scale): the scale / 64 and minus the pair's int8 sum, ``[1, WIDTH / 2]``
    (what ``_q8p_dot`` needs), from the quantiser's per-word scales and sums ``[WIDTH]``."""
    s_even, s_odd = tl.split(tl.reshape(scale, [WIDTH // 2, 2]))
    q_even, q_odd = tl.split(tl.reshape(qsum, [WIDTH // 2, 2]))
    return (s_even * 0.015625)[None, :], (0 - q_even - q_odd)[None, :]


@triton.jit
def _q8p_x(q_row, w0, KW, WIDTH: tl.constexpr, EVEN: tl.constexpr):
    """Words ``[w0, w0 + WIDTH)`` of a quantised x row: the four packed int8 planes ``[1, WIDTH]`` and, per
    word pair, the scale / 64 and minus the int8 sum (``_x_pairs``)."""
    wk = w0 + tl.arange(0, WIDTH)
    km = _words_in_row(wk, KW, EVEN)
    x0 = tl.load(q_row + wk, mask=km, other=0)[None, :]
    x1 = tl.load(q_row + KW + wk, mask=km, other=0)[None, :]
    x2 = tl.load(q_row + 2 * KW + wk, mask=km, other=0)[None, :]
    x3 = tl.load(q_row + 3 * KW + wk, mask=km, other=0)[None, :]
    xs = tl.load(q_row + 4 * KW + wk, mask=km, other=0).to(tl.float32, bitcast=True)
    xsum = tl.load(q_row + 5 * KW + wk, mask=km, other=0)
    xs, xneg = _x_pairs(xs, xsum, WIDTH)
    return x0, x1, x2, x3, xs, xneg


@triton.jit
def _pair_split(v):
    """``[R, W]`` to its even and odd columns, ``[R, W / 2]`` each (a register move: a thread holds whole pairs)."""
    return tl.split(tl.reshape(v, [v.shape[0], v.shape[1] // 2, 2]))


@triton.jit
def _q8p_dot(words, sc, x0, x1, x2, x3, xs, xneg, WPG: tl.constexpr, USE_ASM: tl.constexpr):
    """fp32 partial products ``[BLOCK_N, WIDTH / run]`` (one per run of words sharing a scale,
    ``_run_scales``) of one weight tile with int8 x.

    Per word pair (one activation scale) the integer dot is exact: code plane j is masked *in place*
    (``w & (0x03030303 << 2j)``: bytes 4^j c, no shift) and summed by its own ``dp4a`` chain over the pair,
    then ``a3 + 4 a2 + 16 a1 + 64 a0 = 64 * sum (c - 1) q`` (a0 starts at minus the pair's x sum, as the
    codes are t + 1). a3 starts at the bits of 1.5 * 2^23, so the result read as fp32 is 1.5 * 2^23 plus
    the dot, exact for |dot| < 2^22 (here < 2^19): one FADD instead of a convert. Per word: 4 masks and
    4 ``dp4a``; per pair: 3 shift-adds, one FADD, one FMUL (by scale / 64, exact)."""
    BN: tl.constexpr = words.shape[0]
    W: tl.constexpr = words.shape[1]
    SUB: tl.constexpr = min(4, WPG, W)
    we, wo = _pair_split(words)
    x0e, x0o = _pair_split(x0)
    x1e, x1o = _pair_split(x1)
    x2e, x2o = _pair_split(x2)
    x3e, x3o = _pair_split(x3)
    zero = tl.zeros([BN, W // 2], tl.int32)
    a0 = _dp4a(wo & 0x03030303, x0o, _dp4a(we & 0x03030303, x0e, zero + xneg, USE_ASM), USE_ASM)
    a1 = _dp4a(wo & 0x0C0C0C0C, x1o, _dp4a(we & 0x0C0C0C0C, x1e, zero, USE_ASM), USE_ASM)
    a2 = _dp4a(wo & 0x30303030, x2o, _dp4a(we & 0x30303030, x2e, zero, USE_ASM), USE_ASM)
    top = -0x3F3F3F40  # 0xC0C0C0C0 as int32
    a3 = _dp4a(wo & top, x3o, _dp4a(we & top, x3e, zero + 0x4B400000, USE_ASM, True), USE_ASM, True)
    dot = a3 + 4 * a2 + 16 * a1 + 64 * a0
    part = (dot.to(tl.float32, bitcast=True) - 12582912.0) * xs  # [BN, W / 2]
    part = tl.sum(tl.reshape(part, [BN, W // SUB, SUB // 2]), axis=2)
    return part * sc.to(tl.float32)


@triton.jit
def _gemv_q8p_kernel(
    q_ptr, w_ptr, s_ptr, w2_ptr, s2_ptr,
    r_ptr, stride_rm, y_ptr, stride_ym,
    M, N, KW, NG,
    WPG: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, TAIL: tl.constexpr, ONE_K: tl.constexpr,
    DUAL: tl.constexpr, RESIDUAL: tl.constexpr, EVEN_K: tl.constexpr, EVEN_T: tl.constexpr,
    USE_ASM: tl.constexpr, USE_GDC: tl.constexpr,
):
    """Persistent W2A8 mat-vec: a few programs per SM walk the row tiles (tile pid, pid + P, ...) and
    load the *next* step's weight words and scales before computing the current one, so every
    program keeps a tile in flight while it computes, reduces and stores — the one-tile-per-program
    kernels (``_gemv_q8_kernel``) load, wait, compute and exit, and measured 1.3-2x a plain read of
    their own tiles on the H200. A step is one (row tile, word block). With ``ONE_K`` a step is a whole
    row — ``BLOCK_W`` words (masked past K unless ``EVEN_K``) plus, when ``TAIL`` > 0, a second block of
    ``TAIL`` words after them (so K = 5120 is 256 + 64 words, not 512 with 192 idle lanes) — and the
    quantised x is loaded once per program instead of once per step."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    pid_m = tl.program_id(1)
    q_row = q_ptr + pid_m * 7 * KW
    n_tiles = tl.cdiv(N, BLOCK_N)
    n_wb = tl.cdiv(KW, BLOCK_W)
    if ONE_K:
        n_wb = 1
    total = tl.cdiv(n_tiles - pid, nprog) * n_wb
    words, sc, words2, sc2 = _q8p_tile(w_ptr, s_ptr, w2_ptr, s2_ptr, pid, 0, total > 0, N, KW, NG, WPG,
                                       BLOCK_N, BLOCK_W, DUAL, EVEN_K)
    if TAIL > 0:
        tw, tsc, tw2, tsc2 = _q8p_tile(w_ptr, s_ptr, w2_ptr, s2_ptr, pid, BLOCK_W, total > 0, N, KW, NG, WPG,
                                       BLOCK_N, TAIL, DUAL, EVEN_T)
    gdc_wait(USE_GDC)
    if ONE_K:
        x0, x1, x2, x3, xs, xneg = _q8p_x(q_row, 0, KW, BLOCK_W, EVEN_K)
        if TAIL > 0:
            tx0, tx1, tx2, tx3, txs, txneg = _q8p_x(q_row, BLOCK_W, KW, TAIL, EVEN_T)
    RUNS: tl.constexpr = BLOCK_W // min(4, WPG, BLOCK_W)  # scale runs per step (_run_scales)
    acc2d = tl.zeros([BLOCK_N, RUNS], tl.float32)
    acc2d2 = tl.zeros([BLOCK_N, RUNS], tl.float32)
    for i in range(total):
        if ONE_K:
            t = pid + i * nprog
            wb = 0
            t1 = t + nprog
            wb1 = 0
        else:
            t = pid + (i // n_wb) * nprog
            wb = i % n_wb
            t1 = pid + ((i + 1) // n_wb) * nprog
            wb1 = (i + 1) % n_wb
        nwords, nsc, nwords2, nsc2 = _q8p_tile(w_ptr, s_ptr, w2_ptr, s2_ptr, t1, wb1 * BLOCK_W, i + 1 < total, N,
                                               KW, NG, WPG, BLOCK_N, BLOCK_W, DUAL, EVEN_K)
        if TAIL > 0:
            ntw, ntsc, ntw2, ntsc2 = _q8p_tile(w_ptr, s_ptr, w2_ptr, s2_ptr, t1, BLOCK_W, i + 1 < total, N, KW, NG,
                                               WPG, BLOCK_N, TAIL, DUAL, EVEN_T)
        if not ONE_K:
            x0, x1, x2, x3, xs, xneg = _q8p_x(q_row, wb * BLOCK_W, KW, BLOCK_W, EVEN_K)
        part = _q8p_dot(words, sc, x0, x1, x2, x3, xs, xneg, WPG, USE_ASM)
        part2 = part
        if DUAL:
            part2 = _q8p_dot(words2, sc2, x0, x1, x2, x3, xs, xneg, WPG, USE_ASM)
        offs_n = t * BLOCK_N + tl.arange(0, BLOCK_N)
        if ONE_K:  # a whole row per step: reduce and store now, nothing carried to the next step
            acc = tl.sum(part, axis=1)
            acc2 = tl.sum(part2, axis=1)
            if TAIL > 0:
                acc += tl.sum(_q8p_dot(tw, tsc, tx0, tx1, tx2, tx3, txs, txneg, WPG, USE_ASM), axis=1)
                if DUAL:
                    acc2 += tl.sum(_q8p_dot(tw2, tsc2, tx0, tx1, tx2, tx3, txs, txneg, WPG, USE_ASM), axis=1)
                tw, tsc, tw2, tsc2 = ntw, ntsc, ntw2, ntsc2
            _gemv_epilogue(acc, acc2, offs_n, offs_n < N, pid_m, r_ptr, stride_rm, y_ptr, stride_ym, DUAL, RESIDUAL)
        else:
            acc2d += part
            acc2d2 += part2
            if wb == n_wb - 1:
                _gemv_epilogue(tl.sum(acc2d, axis=1), tl.sum(acc2d2, axis=1), offs_n, offs_n < N, pid_m,
                               r_ptr, stride_rm, y_ptr, stride_ym, DUAL, RESIDUAL)
                acc2d = tl.zeros([BLOCK_N, RUNS], tl.float32)
                acc2d2 = tl.zeros([BLOCK_N, RUNS], tl.float32)
        words = nwords
        sc = nsc
        words2 = nwords2
        sc2 = nsc2


@triton.jit
def _q8m_row(q_row, words, sc, words2, sc2, tw, tsc, tw2, tsc2, KW, WPG: tl.constexpr, BLOCK_W: tl.constexpr,
             TAIL: tl.constexpr, DUAL: tl.constexpr, EVEN_K: tl.constexpr, EVEN_T: tl.constexpr,
             USE_ASM: tl.constexpr):
    """One x row's whole-row dots with a decoded-once weight tile (``_gemv_q8m_kernel``): ``[BLOCK_N]`` sums of
    the main block and the tail, both matrices when DUAL."""
    x0, x1, x2, x3, xs, xneg = _q8p_x(q_row, 0, KW, BLOCK_W, EVEN_K)
    acc = tl.sum(_q8p_dot(words, sc, x0, x1, x2, x3, xs, xneg, WPG, USE_ASM), axis=1)
    acc2 = acc
    if DUAL:
        acc2 = tl.sum(_q8p_dot(words2, sc2, x0, x1, x2, x3, xs, xneg, WPG, USE_ASM), axis=1)
    if TAIL > 0:
        tx0, tx1, tx2, tx3, txs, txneg = _q8p_x(q_row, BLOCK_W, KW, TAIL, EVEN_T)
        acc += tl.sum(_q8p_dot(tw, tsc, tx0, tx1, tx2, tx3, txs, txneg, WPG, USE_ASM), axis=1)
        if DUAL:
            acc2 += tl.sum(_q8p_dot(tw2, tsc2, tx0, tx1, tx2, tx3, txs, txneg, WPG, USE_ASM), axis=1)
    return acc, acc2


@triton.jit
def _gemv_q8m_kernel(
    q_ptr, w_ptr, s_ptr, w2_ptr, s2_ptr,
    r_ptr, stride_rm, y_ptr, stride_ym,
    M, N, KW, NG,
    WPG: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, TAIL: tl.constexpr,
    DUAL: tl.constexpr, RESIDUAL: tl.constexpr, EVEN_K: tl.constexpr, EVEN_T: tl.constexpr,
    USE_ASM: tl.constexpr, USE_GDC: tl.constexpr,
):
    """Batched W2A8 mat-vec: ``_gemv_q8p_kernel``'s persistent whole-row walk, but each program multiplies its
    weight tile with *all* M rows of x, so a tile is loaded, and its code planes masked, once per batch instead
    of once per row (``q8p`` reads every weight once per row: 8 rows cost ~3x one). Per row the arithmetic and
    its order are q8p's, so a row's result does not depend on the batch it is in. The row loop is a real loop
    over a runtime M: one compile serves every batch width, and an unrolled loop let ptxas hoist all rows' x
    loads to the top of the step (spills from 8 rows on)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_tiles = tl.cdiv(N, BLOCK_N)
    total = tl.cdiv(n_tiles - pid, nprog)
    words, sc, words2, sc2 = _q8p_tile(w_ptr, s_ptr, w2_ptr, s2_ptr, pid, 0, total > 0, N, KW, NG, WPG,
                                       BLOCK_N, BLOCK_W, DUAL, EVEN_K)
    tw, tsc, tw2, tsc2 = words, sc, words2, sc2
    if TAIL > 0:
        tw, tsc, tw2, tsc2 = _q8p_tile(w_ptr, s_ptr, w2_ptr, s2_ptr, pid, BLOCK_W, total > 0, N, KW, NG, WPG,
                                       BLOCK_N, TAIL, DUAL, EVEN_T)
    gdc_wait(USE_GDC)
    for i in range(total):
        t = pid + i * nprog
        t1 = t + nprog
        nwords, nsc, nwords2, nsc2 = _q8p_tile(w_ptr, s_ptr, w2_ptr, s2_ptr, t1, 0, i + 1 < total, N, KW, NG, WPG,
                                               BLOCK_N, BLOCK_W, DUAL, EVEN_K)
        ntw, ntsc, ntw2, ntsc2 = nwords, nsc, nwords2, nsc2
        if TAIL > 0:
            ntw, ntsc, ntw2, ntsc2 = _q8p_tile(w_ptr, s_ptr, w2_ptr, s2_ptr, t1, BLOCK_W, i + 1 < total, N, KW, NG,
                                               WPG, BLOCK_N, TAIL, DUAL, EVEN_T)
        offs_n = t * BLOCK_N + tl.arange(0, BLOCK_N)
        for r in range(M):
            acc, acc2 = _q8m_row(q_ptr + r * 7 * KW, words, sc, words2, sc2, tw, tsc, tw2, tsc2, KW, WPG, BLOCK_W,
                                 TAIL, DUAL, EVEN_K, EVEN_T, USE_ASM)
            _gemv_epilogue(acc, acc2, offs_n, offs_n < N, r, r_ptr, stride_rm, y_ptr, stride_ym, DUAL, RESIDUAL)
        words, sc, words2, sc2 = nwords, nsc, nwords2, nsc2
        tw, tsc, tw2, tsc2 = ntw, ntsc, ntw2, ntsc2


@triton.jit
def _mma_u8s8(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3, LANES: tl.constexpr, USE_ASM: tl.constexpr):
    """One warp-wide ``mma.sync.m16n8k32`` (unsigned 8-bit A, signed 8-bit B, int32 C) on ``[LANES]`` tensors
    whose element ``e`` is thread ``e`` of the program (``_gemv_q8w_kernel`` checks that): each thread passes its
    own fragment registers, as PTX lays them out — for ``g = lane // 4``, ``t = lane % 4``: A rows ``g`` (a0, a2)
    and ``g + 8`` (a1, a3) at k ``4t..4t+3`` (a0, a1) and ``16+4t..`` (a2, a3); B column ``g`` at the same k
    (b0, b1); C rows ``g`` (c0, c1) and ``g + 8`` (c2, c3), columns ``2t`` and ``2t + 1``. Where inline PTX cannot
    run (the interpreter) the same product is formed from those fragments with reshapes, so a test there checks
    the fragment bookkeeping of the kernel around it."""
    if USE_ASM:
        return tl.inline_asm_elementwise(
            "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, "
            "{$10, $11, $12, $13};", "=r,=r,=r,=r,r,r,r,r,r,r,r,r,r,r",
            [a0, a1, a2, a3, b0, b1, c0, c1, c2, c3], dtype=(tl.int32, tl.int32, tl.int32, tl.int32),
            is_pure=True, pack=1)
    else:
        W: tl.constexpr = LANES // 32
        j8 = tl.arange(0, 4) * 8
        # A: registers [lane, rh (row half), kh (k half)], bytes -> [W, g, t, rh, kh, j] -> [W, rh, g, kh, t, j]
        ar = tl.join(tl.join(a0, a1), tl.join(a2, a3))
        ab = (ar[:, :, :, None] >> j8[None, None, None, :]) & 0xFF
        a = tl.reshape(tl.permute(tl.reshape(ab, [W, 8, 4, 2, 2, 4]), [0, 3, 1, 4, 2, 5]), [W, 16, 32])
        # B: registers [lane, kh], bytes signed -> [W, g (column), t, kh, j] -> [W, kh, t, j, g]
        bb = (tl.join(b0, b1)[:, :, None] >> j8[None, None, :]) & 0xFF
        bb = bb - ((bb & 0x80) << 1)
        b = tl.reshape(tl.permute(tl.reshape(bb, [W, 8, 4, 2, 4]), [0, 3, 2, 4, 1]), [W, 32, 8])
        c = tl.sum(a[:, :, :, None] * b[:, None, :, :], axis=2)  # [W, 16 rows, 8 columns]
        # back to fragments: [W, rh, g, t, odd] -> [W, g, t, rh, odd] -> [lane, rh, odd]
        cf = tl.reshape(tl.permute(tl.reshape(c, [W, 2, 8, 4, 2]), [0, 2, 3, 1, 4]), [LANES, 2, 2])
        even, odd = tl.split(cf)
        r0e, r1e = tl.split(even)
        r0o, r1o = tl.split(odd)
        return c0 + r0e, c1 + r0o, c2 + r1e, c3 + r1o


@triton.jit
def _q8w_planes(wa, wb, sh):
    """A fragments of 16 weight rows x one 32-weight block from the thread's words of rows g (``wa``) and g + 8
    (``wb``): code planes ``sh / 2`` and ``sh / 2 + 1``, unsigned bytes 0..3 (codes, t + 1)."""
    return ((wa >> sh) & 0x03030303, (wb >> sh) & 0x03030303,
            (wa >> (sh + 2)) & 0x03030303, (wb >> (sh + 2)) & 0x03030303)


@triton.jit
def _q8w_group_weights(w_ptr, s_ptr, woff0, woff1, row0, row1, rm0, rm1, grp, NG, v, KBPG: tl.constexpr):
    """Scale group ``grp``'s weights for one thread: its word of each 32-weight block (up to 4) in rows g and g + 8,
    and the two rows' fp32 scales; nothing read past the last group (zeros)."""
    live = grp < NG
    m0 = rm0 & live
    m1 = rm1 & live
    wi = 2 * grp * KBPG + v
    a0 = tl.load(w_ptr + woff0 + wi, mask=m0, other=0)
    b0 = tl.load(w_ptr + woff1 + wi, mask=m1, other=0)
    a1 = a0
    b1 = b0
    a2 = a0
    b2 = b0
    a3 = a0
    b3 = b0
    if KBPG > 1:
        a1 = tl.load(w_ptr + woff0 + wi + 2, mask=m0, other=0)
        b1 = tl.load(w_ptr + woff1 + wi + 2, mask=m1, other=0)
    if KBPG > 2:
        a2 = tl.load(w_ptr + woff0 + wi + 4, mask=m0, other=0)
        b2 = tl.load(w_ptr + woff1 + wi + 4, mask=m1, other=0)
        a3 = tl.load(w_ptr + woff0 + wi + 6, mask=m0, other=0)
        b3 = tl.load(w_ptr + woff1 + wi + 6, mask=m1, other=0)
    sc = tl.join(tl.load(s_ptr + row0 * NG + grp, mask=m0, other=0.0),
                 tl.load(s_ptr + row1 * NG + grp, mask=m1, other=0.0)).to(tl.float32)
    return a0, b0, a1, b1, a2, b2, a3, b3, sc


@triton.jit
def _q8w_x(xf_ptr, R, KB, M, nrow, crow, kb, s, v, live):
    """From ``_quant_x_frag_kernel``'s layout: the B fragments (planes ``2s``, ``2s + 1`` of word v of block kb of
    x row ``nrow``) and, for the thread's two C columns (x rows ``crow``, ``crow + 1``), the MMA's initial values
    (1.5 * 2^23 minus the block's int8 sum, as int32 bits: the result read as fp32 is 1.5 * 2^23 + sum (c - 1) q
    exactly, codes being t + 1, and one FADD recovers it) and the block scales. Rows past M read nothing: zero x,
    an initial value that makes the result 0."""
    xm = (nrow < M) & live
    f = xf_ptr + (kb * R + nrow) * 8 + 4 * s + v
    b0 = tl.load(f, mask=xm, other=0)
    b1 = tl.load(f + 2, mask=xm, other=0)
    c = xf_ptr + KB * R * 8 + (kb * R + crow) * 2
    me = (crow < M) & live
    mo = (crow + 1 < M) & live
    ie = tl.load(c, mask=me, other=0x4B400000)
    io = tl.load(c + 2, mask=mo, other=0x4B400000)
    xs = tl.join(tl.load(c + 1, mask=me, other=0), tl.load(c + 3, mask=mo, other=0))
    return b0, b1, ie, io, xs.to(tl.float32, bitcast=True)


@triton.jit
def _q8w_block(a0, a1, a2, a3, b0, b1, ie, io, xs, LANES: tl.constexpr, USE_ASM: tl.constexpr):
    """One block's MMA and its fp32 value, ``[LANES, 2 (column), 2 (row half)]``: (dot - 1.5 * 2^23) * x scale."""
    c0, c1, c2, c3 = _mma_u8s8(a0, a1, a2, a3, b0, b1, ie, io, ie, io, LANES, USE_ASM)
    c = tl.join(tl.join(c0, c1), tl.join(c2, c3)).to(tl.float32, bitcast=True)
    return (c - 12582912.0) * xs[:, :, None]


@triton.jit
def _q8w_pick(j: tl.constexpr, a0, b0, a1, b1, a2, b2, a3, b3):
    """Block ``j``'s two words of a group (``_q8w_group_weights``)."""
    if j == 0:
        return a0, b0
    elif j == 1:
        return a1, b1
    elif j == 2:
        return a2, b2
    else:
        return a3, b3


@triton.jit
def _gemv_q8w_kernel(
    q_ptr, w_ptr, s_ptr, w2_ptr, s2_ptr,
    r_ptr, stride_rm, y_ptr, stride_ym,
    M, N, KW, NG,
    WPG: tl.constexpr, NT: tl.constexpr, WARPS: tl.constexpr,
    DUAL: tl.constexpr, RESIDUAL: tl.constexpr, USE_ASM: tl.constexpr, USE_GDC: tl.constexpr,
):
    """Batched W2A8 mat-vec on the int8 tensor cores, weights decoded in registers (no shared-memory staging).

    Why: ``q8m`` multiplies a decoded weight word with each x row by ``dp4a``, ~14 integer instructions per
    16 weights and row, so 8 rows cost ~3x one. Here one ``mma.sync.m16n8k32`` multiplies a 16-row x 32-weight
    block with 8 rows of x; ``q8t``'s ``tl.dot`` staged every block through shared memory. The trick is the
    weights' own t2 layout: byte j of a word holds weights 4j..4j+3, so code plane p (``(w >> 2p) & 0x03030303``)
    is 4 weights at stride 4, and the two planes ``2s, 2s + 1`` of word ``2 kb + v`` *are* a thread's A fragment
    for block kb (thread ``t = 2v + s``), if x's B fragment takes the same k order — which is how the int8 x
    quantiser already stores x (planes). Per block and thread: 2 weight loads, 8 integer ops, one MMA per 8 rows
    of x (NT = 1 or 2), two FP ops per result.

    A program is one tile of 16 weight rows; its WARPS warps take the scale groups (at most 4 blocks: G <= 128)
    in turn and sum at the end. Each warp loads the next group's weight words and scales before it computes the
    current one, so an HBM round trip overlaps a group's MMAs (without it, each group waited for its words and
    then for its scales: 1.3-1.6x slower than ``q8m`` on the H100). Every tensor is ``[WARPS * 32]``, element e
    being thread e (checked: any other placement poisons the result with NaN, which the tuner and tests reject)."""
    LANES: tl.constexpr = WARPS * 32
    KBPG: tl.constexpr = WPG // 2  # 32-weight blocks per scale group
    R: tl.constexpr = 8 * NT  # x rows per block in q_ptr's fragment order (_quant_x_frag_kernel)
    KB = KW // 2
    e = tl.arange(0, LANES)
    warp = e // 32
    lane = e % 32
    g = lane // 4
    t = lane % 4
    s = t % 2
    v = t // 2
    sh = 4 * s
    row0 = tl.program_id(0) * 16 + g
    row1 = row0 + 8
    rm0 = row0 < N
    rm1 = row1 < N
    woff0 = row0 * KW
    woff1 = row1 * KW
    if USE_ASM:  # element e must be thread e: the MMA reads fragments by hardware lane
        tid = tl.inline_asm_elementwise("mov.u32 $0, %tid.x;", "=r,r", [e], dtype=tl.int32, is_pure=True, pack=1)
        misplaced = tl.max((tid != e).to(tl.int32), axis=0)
    else:
        misplaced = 0
    # the first group's weights before the PDL wait (weights only)
    w0, u0, w1, u1, w2, u2, w3, u3, sc = _q8w_group_weights(w_ptr, s_ptr, woff0, woff1, row0, row1, rm0, rm1,
                                                            warp, NG, v, KBPG)
    d0, f0, d1, f1, d2, f2, d3, f3, sc2 = w0, u0, w1, u1, w2, u2, w3, u3, sc
    if DUAL:
        d0, f0, d1, f1, d2, f2, d3, f3, sc2 = _q8w_group_weights(w2_ptr, s2_ptr, woff0, woff1, row0, row1, rm0, rm1,
                                                                 warp, NG, v, KBPG)
    gdc_wait(USE_GDC)
    acc = tl.zeros([LANES, 2, 2], tl.float32)
    acc_b = tl.zeros([LANES, 2, 2], tl.float32)  # NT = 2: x rows 8..15
    acc2 = tl.zeros([LANES, 2, 2], tl.float32)
    acc2_b = tl.zeros([LANES, 2, 2], tl.float32)
    for gi in range(0, tl.cdiv(NG, WARPS)):
        grp = gi * WARPS + warp
        live = grp < NG
        nw0, nu0, nw1, nu1, nw2, nu2, nw3, nu3, nsc = _q8w_group_weights(
            w_ptr, s_ptr, woff0, woff1, row0, row1, rm0, rm1, grp + WARPS, NG, v, KBPG)
        nd0, nf0, nd1, nf1, nd2, nf2, nd3, nf3, nsc2 = nw0, nu0, nw1, nu1, nw2, nu2, nw3, nu3, nsc
        if DUAL:
            nd0, nf0, nd1, nf1, nd2, nf2, nd3, nf3, nsc2 = _q8w_group_weights(
                w2_ptr, s2_ptr, woff0, woff1, row0, row1, rm0, rm1, grp + WARPS, NG, v, KBPG)
        part = tl.zeros([LANES, 2, 2], tl.float32)
        part_b = tl.zeros([LANES, 2, 2], tl.float32)
        part2 = tl.zeros([LANES, 2, 2], tl.float32)
        part2_b = tl.zeros([LANES, 2, 2], tl.float32)
        for j in tl.static_range(KBPG):
            kb = grp * KBPG + j
            wa, wb = _q8w_pick(j, w0, u0, w1, u1, w2, u2, w3, u3)
            a0, a1, a2, a3 = _q8w_planes(wa, wb, sh)
            xb0, xb1, ie, io, xs = _q8w_x(q_ptr, R, KB, M, g, 2 * t, kb, s, v, live)
            part += _q8w_block(a0, a1, a2, a3, xb0, xb1, ie, io, xs, LANES, USE_ASM)
            if DUAL:
                da, db = _q8w_pick(j, d0, f0, d1, f1, d2, f2, d3, f3)
                p0, p1, p2, p3 = _q8w_planes(da, db, sh)
                part2 += _q8w_block(p0, p1, p2, p3, xb0, xb1, ie, io, xs, LANES, USE_ASM)
            if NT == 2:
                xb0, xb1, ie, io, xs = _q8w_x(q_ptr, R, KB, M, g + 8, 2 * t + 8, kb, s, v, live)
                part_b += _q8w_block(a0, a1, a2, a3, xb0, xb1, ie, io, xs, LANES, USE_ASM)
                if DUAL:
                    part2_b += _q8w_block(p0, p1, p2, p3, xb0, xb1, ie, io, xs, LANES, USE_ASM)
        acc += part * sc[:, None, :]
        if NT == 2:
            acc_b += part_b * sc[:, None, :]
        if DUAL:
            acc2 += part2 * sc2[:, None, :]
            if NT == 2:
                acc2_b += part2_b * sc2[:, None, :]
        w0, u0, w1, u1, w2, u2, w3, u3, sc = nw0, nu0, nw1, nu1, nw2, nu2, nw3, nu3, nsc
        d0, f0, d1, f1, d2, f2, d3, f3, sc2 = nd0, nf0, nd1, nf1, nd2, nf2, nd3, nf3, nsc2
    _q8w_store(acc, acc2, misplaced, 0, M, N, r_ptr, stride_rm, y_ptr, stride_ym, WARPS, DUAL, RESIDUAL)
    if NT == 2:
        _q8w_store(acc_b, acc2_b, misplaced, 8, M, N, r_ptr, stride_rm, y_ptr, stride_ym, WARPS, DUAL, RESIDUAL)


@triton.jit
def _q8w_store(acc, acc2, misplaced, col0, M, N, r_ptr, stride_rm, y_ptr, stride_ym,
               WARPS: tl.constexpr, DUAL: tl.constexpr, RESIDUAL: tl.constexpr):
    """Sum the warps' ``[WARPS * 32, 2 (column), 2 (row half)]`` results and write them through the epilogue."""
    tot = tl.sum(tl.reshape(acc, [WARPS, 32, 2, 2]), axis=0)
    tot2 = tot
    if DUAL:
        tot2 = tl.sum(tl.reshape(acc2, [WARPS, 32, 2, 2]), axis=0)
    if misplaced != 0:
        tot = tot + float("nan")
    lane = tl.arange(0, 32)[:, None, None]
    col = col0 + 2 * (lane % 4) + tl.arange(0, 2)[None, :, None]
    row = tl.program_id(0) * 16 + lane // 4 + 8 * tl.arange(0, 2)[None, None, :]
    _gemv_epilogue(tot, tot2, row, (row < N) & (col < M), col, r_ptr, stride_rm, y_ptr, stride_ym, DUAL, RESIDUAL)


@triton.jit
def _gemv_q3_kernel(
    q_ptr, w_ptr, s_ptr, w2_ptr, s2_ptr,
    r_ptr, stride_rm, y_ptr, stride_ym,
    part_ptr, cnt_ptr,
    M, N, NG, KW3: tl.constexpr,
    NBG: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, SPLIT_K: tl.constexpr,
    DUAL: tl.constexpr, RESIDUAL: tl.constexpr, EVEN_K: tl.constexpr, USE_ASM: tl.constexpr,
    USE_GDC: tl.constexpr,
):
    """Mat-vec of t3 (base-3, 5 trits per byte) weights on int8 activations, reading the stored
    bytes as int32 words (4 bytes = 20 trit slots; NBG even, so bytes 0,1 and bytes 2,3 each lie in
    one scale group). Per word: bytes 0,2 and 1,3 go to the 16-bit lanes of two registers, are
    prescaled to q ~ ceil(256 b / 243) (TQ1_0's trick, here in-kernel), then 5 times
    ``x3; carry bytes -> digit word; mask`` gives the digits of all 4 bytes at once, which two
    ``dp2a`` (lo pair, hi pair) multiply with packed int16 activations: ~2.5 integer instructions
    per weight, no per-weight loads or float converts. ``q_ptr``: ``_quant_x3_kernel``'s rows.
    KW3 (words per row: 260, 312, 884 at 27B shapes, never a multiple of 16) is a constexpr so the
    compiler sees the row starts' alignment (16 bytes there) and can vectorise word and x-plane loads."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    q_row = q_ptr + pid_m * 13 * KW3
    n_wb = tl.cdiv(KW3, BLOCK_W)
    per_split = tl.cdiv(n_wb, SPLIT_K)
    wb0 = pid_k * per_split
    wb1 = tl.minimum(wb0 + per_split, n_wb)
    acc2d = tl.zeros([BLOCK_N, BLOCK_W], tl.float32)
    acc2d2 = tl.zeros([BLOCK_N, BLOCK_W], tl.float32)
    n_groups = NG
    kw_total = KW3
    if USE_GDC:
        wk0 = wb0 * BLOCK_W + tl.arange(0, BLOCK_W)
        m0 = n_mask[:, None] & ((wk0 < kw_total) & (wb0 < wb1))[None, :]
        first, first2 = _first_tile(w_ptr, w2_ptr, offs_n[:, None] * kw_total + wk0[None, :], m0, DUAL)
    gdc_wait(USE_GDC)
    for wb in range(wb0, wb1):
        wk = wb * BLOCK_W + tl.arange(0, BLOCK_W)
        km = _words_in_row(wk, kw_total, EVEN_K)
        wmask = n_mask[:, None] & km[None, :]
        widx = offs_n[:, None] * kw_total + wk[None, :]
        if USE_GDC:
            wi, wi2 = _next_tile(w_ptr, w2_ptr, widx, wmask, wb, wb0, first, first2, DUAL)
        else:
            wi = tl.load(w_ptr + widx, mask=wmask, other=0, eviction_policy="evict_first")
            if DUAL:
                wi2 = tl.load(w2_ptr + widx, mask=wmask, other=0, eviction_policy="evict_first")
        wu = wi.to(tl.uint32, bitcast=True)
        lo = _t3_prescale(wu & 0x00FF00FF)
        hi = _t3_prescale((wu >> 8) & 0x00FF00FF)
        if DUAL:
            wu2 = wi2.to(tl.uint32, bitcast=True)
            lo2 = _t3_prescale(wu2 & 0x00FF00FF)
            hi2 = _t3_prescale((wu2 >> 8) & 0x00FF00FF)
        # the dots start at -sum(x) of their pair (codes are t + 1), which is dp2a's first addend
        xsl = tl.load(q_row + 11 * kw_total + wk, mask=km, other=0)[None, :]
        xsh = tl.load(q_row + 12 * kw_total + wk, mask=km, other=0)[None, :]
        dl = tl.zeros([BLOCK_N, BLOCK_W], tl.int32) - xsl
        dh = tl.zeros([BLOCK_N, BLOCK_W], tl.int32) - xsh
        if DUAL:
            dl2 = tl.zeros([BLOCK_N, BLOCK_W], tl.int32) - xsl
            dh2 = tl.zeros([BLOCK_N, BLOCK_W], tl.int32) - xsh
        for i in tl.static_range(5):
            xl = tl.load(q_row + i * kw_total + wk, mask=km, other=0)[None, :]
            xh = tl.load(q_row + (5 + i) * kw_total + wk, mask=km, other=0)[None, :]
            lo = lo * 3
            hi = hi * 3
            d = (((lo >> 8) & 0x00FF00FF) | (hi & 0xFF00FF00)).to(tl.int32, bitcast=True)
            lo = lo & 0x00FF00FF
            hi = hi & 0x00FF00FF
            dl = _dp2a(xl, d, dl, 0, USE_ASM)
            dh = _dp2a(xh, d, dh, 1, USE_ASM)
            if DUAL:
                lo2 = lo2 * 3
                hi2 = hi2 * 3
                d2 = (((lo2 >> 8) & 0x00FF00FF) | (hi2 & 0xFF00FF00)).to(tl.int32, bitcast=True)
                lo2 = lo2 & 0x00FF00FF
                hi2 = hi2 & 0x00FF00FF
                dl2 = _dp2a(xl, d2, dl2, 0, USE_ASM)
                dh2 = _dp2a(xh, d2, dh2, 1, USE_ASM)
        xs = tl.load(q_row + 10 * kw_total + wk, mask=km, other=0).to(tl.float32, bitcast=True)[None, :]
        srow = offs_n[:, None] * n_groups
        glo = ((4 * wk) // NBG)[None, :]
        ghi = ((4 * wk + 2) // NBG)[None, :]
        scl = tl.load(s_ptr + srow + glo, mask=wmask, other=0.0).to(tl.float32)
        sch = tl.load(s_ptr + srow + ghi, mask=wmask, other=0.0).to(tl.float32)
        acc2d += (dl.to(tl.float32) * scl + dh.to(tl.float32) * sch) * xs
        if DUAL:
            scl2 = tl.load(s2_ptr + srow + glo, mask=wmask, other=0.0).to(tl.float32)
            sch2 = tl.load(s2_ptr + srow + ghi, mask=wmask, other=0.0).to(tl.float32)
            acc2d2 += (dl2.to(tl.float32) * scl2 + dh2.to(tl.float32) * sch2) * xs
    acc = tl.sum(acc2d, axis=1)
    acc2 = tl.sum(acc2d2, axis=1)
    _gemv_finish(acc, acc2, offs_n, n_mask, pid_m, pid_n, pid_k, M, N, part_ptr, cnt_ptr,
                 r_ptr, stride_rm, y_ptr, stride_ym, BLOCK_N, SPLIT_K, DUAL, RESIDUAL)


@triton.jit
def _q8t_planes(b, USE_ASM: tl.constexpr):
    """The four code planes of int8 weight bytes ``b`` (4 codes each), as int8 ``c`` in {0, 1, 2}: plane j is
    ``(byte >> 2j) & 3``, on sm_90 two instructions per four bytes (a register holds four, ``pack=4``)."""
    if USE_ASM:
        p0 = tl.inline_asm_elementwise("and.b32 $0, $1, 0x03030303;", "=r,r", [b], dtype=tl.int8, is_pure=True,
                                       pack=4)
        p1 = tl.inline_asm_elementwise("{ .reg .b32 t; shr.b32 t, $1, 2; and.b32 $0, t, 0x03030303; }", "=r,r",
                                       [b], dtype=tl.int8, is_pure=True, pack=4)
        p2 = tl.inline_asm_elementwise("{ .reg .b32 t; shr.b32 t, $1, 4; and.b32 $0, t, 0x03030303; }", "=r,r",
                                       [b], dtype=tl.int8, is_pure=True, pack=4)
        p3 = tl.inline_asm_elementwise("{ .reg .b32 t; shr.b32 t, $1, 6; and.b32 $0, t, 0x03030303; }", "=r,r",
                                       [b], dtype=tl.int8, is_pure=True, pack=4)
    else:
        p0 = b & 3
        p1 = (b >> 2) & 3
        p2 = (b >> 4) & 3
        p3 = (b >> 6) & 3
    return p0, p1, p2, p3


@triton.jit
def _q8t_block(wb, xb, xneg, X_ON_M: tl.constexpr, USE_ASM: tl.constexpr):
    """One activation block (32 weights of a row, two words) on int8 tensor cores: ``sum (c - 1) q``, exact in
    int32, from the block's weight bytes ``wb [BLOCK_N, 8]``, x in the decoded tile's K order
    (:func:`_q8t_x_order`) and ``xneg [BLOCK_M]``, minus the block's x sum (the MMA's accumulator starts there).
    X_ON_M: x ``[BLOCK_M, 32]`` is the MMA's A operand, result ``[BLOCK_M, BLOCK_N]``; else the weights are
    ("swap AB"), x ``[32, BLOCK_M]``, result ``[BLOCK_N, BLOCK_M]``."""
    p0, p1, p2, p3 = _q8t_planes(wb, USE_ASM)
    a = tl.reshape(tl.join(tl.join(p0, p1), tl.join(p2, p3)), [wb.shape[0], 32])
    if X_ON_M:
        out = tl.dot(xb, tl.trans(a), tl.zeros([xb.shape[0], wb.shape[0]], tl.int32) + xneg[:, None],
                     out_dtype=tl.int32)
    else:  # out_dtype: Triton 3.6 asserts that an int32 accumulator matches it (its default is float32)
        out = tl.dot(a, xb, tl.zeros([wb.shape[0], xb.shape[1]], tl.int32) + xneg[None, :], out_dtype=tl.int32)
    return out


@triton.jit
def _q8t_x_order():
    """K position p of a decoded block tile (``_q8t_block``: the joins put byte i = p // 4 of the block's 8,
    plane j = 2 * (p % 2) + (p // 2) % 2 there) as (plane, byte) ``[32]`` each: x's byte for p sits at plane j's
    words of the block, byte i."""
    p = tl.arange(0, 32)
    return 2 * (p % 2) + (p // 2) % 2, p // 4


@triton.jit
def _q8t_chunk(wbytes, brow, c, live, CH: tl.constexpr):
    """The weight bytes ``[BLOCK_N, 8]`` of chunk ``c``'s CH (1, 2 or 4) activation blocks (unused ones: the
    first again, not loaded), all masked off unless ``live``."""
    b0 = tl.load(wbytes + brow + (c * CH) * 8, mask=live, other=0, eviction_policy="evict_first")
    b1 = b0
    b2 = b0
    b3 = b0
    if CH > 1:
        b1 = tl.load(wbytes + brow + (c * CH + 1) * 8, mask=live, other=0, eviction_policy="evict_first")
    if CH > 2:
        b2 = tl.load(wbytes + brow + (c * CH + 2) * 8, mask=live, other=0, eviction_policy="evict_first")
        b3 = tl.load(wbytes + brow + (c * CH + 3) * 8, mask=live, other=0, eviction_policy="evict_first")
    return b0, b1, b2, b3


@triton.jit
def _q8t_chunk_dot(b0, b1, b2, b3, q_ptr, xbytes, xoff, xmask, xrow, m_mask, c, KW, CH: tl.constexpr,
                   X_ON_M: tl.constexpr, USE_ASM: tl.constexpr):
    """A chunk's CH blocks: ``sum_blocks (sum (c - 1) q) * x scale``, fp32 in the accumulator's orientation
    (the weight scale is one per chunk, applied by the caller). A block's two per-word x sums are one 8-byte
    load."""
    if X_ON_M:
        acc = tl.zeros([xrow.shape[0], b0.shape[0]], tl.float32)
    else:
        acc = tl.zeros([b0.shape[0], xrow.shape[0]], tl.float32)
    q64 = q_ptr.to(tl.pointer_type(tl.int64))
    for j in tl.static_range(CH):
        blk = c * CH + j
        if j == 0:
            wb = b0
        elif j == 1:
            wb = b1
        elif j == 2:
            wb = b2
        else:
            wb = b3
        xb = tl.load(xbytes + xoff + blk * 8, mask=xmask, other=0)
        xs = tl.load(q_ptr + xrow + 4 * KW + 2 * blk, mask=m_mask, other=0).to(tl.float32, bitcast=True)
        sums = tl.load(q64 + (xrow + 5 * KW + 2 * blk) // 2, mask=m_mask, other=0)  # words 2 blk, 2 blk + 1
        xneg = 0 - ((sums << 32) >> 32).to(tl.int32) - (sums >> 32).to(tl.int32)
        part = _q8t_block(wb, xb, xneg, X_ON_M, USE_ASM).to(tl.float32)
        if X_ON_M:
            acc += part * xs[:, None]
        else:
            acc += part * xs[None, :]
    return acc


@triton.jit
def _gemv_q8t_kernel(
    q_ptr, w_ptr, s_ptr, w2_ptr, s2_ptr,
    r_ptr, stride_rm, y_ptr, stride_ym,
    part_ptr, cnt_ptr,
    M, N, KW, NG,
    WPG: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
    X_ON_M: tl.constexpr, DUAL: tl.constexpr, RESIDUAL: tl.constexpr, USE_ASM: tl.constexpr,
    USE_GDC: tl.constexpr,
):
    """Batched W2A8 mat-vec on int8 tensor cores (continuous batching, 2-64 rows): each program takes BLOCK_N
    weight rows and every row of the int8 x (``_quant_x_kernel``'s planes, the same input as
    ``q8``/``q8p``/``q8m``), one activation block (32 weights, one x scale) per MMA.

    Why: the per-row int8 kernels spend a ``dp4a`` per 4 weights per row, so 8-16 rows are ALU-bound; here a
    weight byte is decoded once (its four code planes, two instructions per four bytes) for all rows, and the
    multiply-adds go to the tensor cores. Per block: ``sum c q`` in int32 (the MMA's accumulator starts at minus
    the block's x sum, since codes are t + 1: exact), times the block's x scale in fp32; per chunk of up to 4
    blocks (inside one weight group), times the weight scale. The next chunk's weight bytes are loaded before
    this one is computed. X_ON_M puts x on the MMA's M side (16 rows = one mma.sync tile; a thread then holds
    2 x rows, so fewer per-block x scale loads), else the weights ("swap AB", warp-group MMAs from 64 weight
    rows). Split-K partials are reduced in the same launch by the last program to arrive."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    BPG: tl.constexpr = WPG // 2  # activation blocks per weight group
    CH: tl.constexpr = min(BPG, 4)  # blocks per chunk (one weight scale)
    offs_m = tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    n_ch = NG * (BPG // CH)
    per_split = tl.cdiv(n_ch, SPLIT_K)
    c0 = pid_k * per_split
    c1 = tl.minimum(c0 + per_split, n_ch)
    wbytes = w_ptr.to(tl.pointer_type(tl.int8))
    wbytes2 = w2_ptr.to(tl.pointer_type(tl.int8))
    xbytes = q_ptr.to(tl.pointer_type(tl.int8))
    brow = offs_n[:, None] * (KW * 4) + tl.arange(0, 8)[None, :]  # a block's 8 weight bytes per row
    # the first chunk's weights do not depend on the previous kernel: in flight before the PDL wait
    live = (offs_n < tl.where(c0 < c1, N, 0))[:, None]
    b0, b1, b2, b3 = _q8t_chunk(wbytes, brow, c0, live, CH)
    d0, d1, d2, d3 = b0, b1, b2, b3
    if DUAL:
        d0, d1, d2, d3 = _q8t_chunk(wbytes2, brow, c0, live, CH)
    gdc_wait(USE_GDC)
    plane, byte = _q8t_x_order()
    # x byte of K position p, row m, block 0: plane j's words start at 4 * (m * 7 * KW + j * KW)
    if X_ON_M:
        xoff = (offs_m[:, None] * (7 * KW) + plane[None, :] * KW) * 4 + byte[None, :]
        xmask = m_mask[:, None]
    else:
        xoff = (offs_m[None, :] * (7 * KW) + plane[:, None] * KW) * 4 + byte[:, None]
        xmask = m_mask[None, :]
    xrow = offs_m * (7 * KW)
    if X_ON_M:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    else:
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    acc2 = acc
    for c in range(c0, c1):
        nxt = (offs_n < tl.where(c + 1 < c1, N, 0))[:, None]
        n0, n1, n2, n3 = _q8t_chunk(wbytes, brow, c + 1, nxt, CH)
        e0, e1, e2, e3 = n0, n1, n2, n3
        if DUAL:
            e0, e1, e2, e3 = _q8t_chunk(wbytes2, brow, c + 1, nxt, CH)
        g = (c * CH) // BPG
        ws = _group_scale(s_ptr, offs_n, n_mask, NG, g)
        part = _q8t_chunk_dot(b0, b1, b2, b3, q_ptr, xbytes, xoff, xmask, xrow, m_mask, c, KW, CH, X_ON_M, USE_ASM)
        if X_ON_M:
            acc += part * ws[None, :]
        else:
            acc += part * ws[:, None]
        if DUAL:
            ws2 = _group_scale(s2_ptr, offs_n, n_mask, NG, g)
            part = _q8t_chunk_dot(d0, d1, d2, d3, q_ptr, xbytes, xoff, xmask, xrow, m_mask, c, KW, CH, X_ON_M,
                                  USE_ASM)
            if X_ON_M:
                acc2 += part * ws2[None, :]
            else:
                acc2 += part * ws2[:, None]
        b0, b1, b2, b3 = n0, n1, n2, n3
        d0, d1, d2, d3 = e0, e1, e2, e3

    if X_ON_M:  # [BLOCK_N, BLOCK_M] from here on, as the epilogue takes it (one transpose per program)
        acc = tl.trans(acc)
        acc2 = tl.trans(acc2)
    _dot_finish(acc, acc2, offs_m, offs_n, m_mask, n_mask, pid_n, pid_k, M, N, part_ptr, cnt_ptr, r_ptr, stride_rm,
                y_ptr, stride_ym, SPLIT_K, DUAL, RESIDUAL)


@triton.jit
def _gemv_dot_kernel(
    x_ptr, stride_xm, nw_ptr,
    w_ptr, s_ptr, w2_ptr, s2_ptr,
    r_ptr, stride_rm, y_ptr, stride_ym,
    part_ptr, cnt_ptr,
    M, N, K, KW, NG, eps, norm_offset,
    G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
    NORM: tl.constexpr, NORM_QWEN3: tl.constexpr, DUAL: tl.constexpr, RESIDUAL: tl.constexpr,
    IEEE: tl.constexpr, PAIRS: tl.constexpr, USE_ASM: tl.constexpr, USE_GDC: tl.constexpr,
):
    """Mat-vec on tensor cores for a few (<= 16) rows, the continuous-batching step: each program decodes a
    [BLOCK_N, G] weight tile once per scale group and multiplies it by every row's x^T [G, BLOCK_M].

    Why weights on the MMA's M side ("swap AB"): the MMA tile is at least 16 long on each side, so 16 weight
    rows x 16 activation rows wastes nothing at batch 16, and the decoded tile feeds the MMA as it is (no
    transpose through shared memory). Words -> shift/mask -> magic float (c - 1, exact) -> x's dtype. Split-K
    partials are reduced in the same launch by the last program to arrive (as the other mat-vecs)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    xdt = x_ptr.dtype.element_ty
    per_split = tl.cdiv(NG, SPLIT_K)
    g0 = pid_k * per_split
    g1 = tl.minimum(g0 + per_split, NG)
    wcol = tl.arange(0, G // 16)
    # the first weight tiles do not depend on the previous kernel: in flight before the PDL wait; each step
    # then loads the next group's tiles before it decodes this one's
    wrow = offs_n[:, None] * KW + wcol[None, :]
    live = (offs_n < tl.where(g0 < g1, N, 0))[:, None]
    words, words2 = _first_tile(w_ptr, w2_ptr, wrow + g0 * (G // 16), live, DUAL)
    gdc_wait(USE_GDC)
    offs_g = _dot_k_order(G, PAIRS)
    inv_rms = tl.full([BLOCK_M], 1.0, tl.float32)
    if NORM:
        ss = tl.zeros([G, BLOCK_M], tl.float32)
        for k0 in range(0, K, G):
            xv = tl.load(x_ptr + offs_m[None, :] * stride_xm + (k0 + offs_g)[:, None], mask=m_mask[None, :],
                         other=0.0).to(tl.float32)
            ss += xv * xv
        inv_rms = tl.rsqrt(tl.sum(ss, axis=0) / K + eps)
    acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    acc2 = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    for g in range(g0, g1):
        kk = g * G + offs_g
        xv = tl.load(x_ptr + offs_m[None, :] * stride_xm + kk[:, None], mask=m_mask[None, :], other=0.0)
        if NORM:
            h = xv.to(tl.float32) * inv_rms[None, :]
            nwv = tl.load(nw_ptr + kk).to(tl.float32)[:, None]
            if NORM_QWEN3:
                xv = (h.to(xdt).to(tl.float32) * nwv).to(xdt)
            else:
                xv = (h * (nwv + norm_offset)).to(xdt)
        cur, cur2 = words, words2
        nxt = (offs_n < tl.where(g + 1 < g1, N, 0))[:, None]
        words, words2 = _first_tile(w_ptr, w2_ptr, wrow + (g + 1) * (G // 16), nxt, DUAL)
        acc += _dot_group(cur, xv, IEEE, PAIRS, USE_ASM, BLOCK_N, G) * _group_scale(s_ptr, offs_n, n_mask, NG, g)[:, None]
        if DUAL:
            acc2 += (_dot_group(cur2, xv, IEEE, PAIRS, USE_ASM, BLOCK_N, G)
                     * _group_scale(s2_ptr, offs_n, n_mask, NG, g)[:, None])

    _dot_finish(acc, acc2, offs_m, offs_n, m_mask, n_mask, pid_n, pid_k, M, N, part_ptr, cnt_ptr, r_ptr, stride_rm,
                y_ptr, stride_ym, SPLIT_K, DUAL, RESIDUAL)


@triton.jit
def _dot_finish(acc, acc2, offs_m, offs_n, m_mask, n_mask, pid_n, pid_k, M, N, part_ptr, cnt_ptr, r_ptr, stride_rm,
                y_ptr, stride_ym, SPLIT_K: tl.constexpr, DUAL: tl.constexpr, RESIDUAL: tl.constexpr):
    """A tensor-core mat-vec program's ``[BLOCK_N, BLOCK_M]`` results to y: straight through the epilogue, or with
    split-K as a partial that the last program to arrive at the tile's counter sums in split order (deterministic)
    before the epilogue, resetting the counter."""
    mask = n_mask[:, None] & m_mask[None, :]
    if SPLIT_K > 1:
        NP = 2 * N if DUAL else N
        pbase = part_ptr + pid_k * M * NP + offs_m[None, :] * NP + offs_n[:, None]
        tl.store(pbase, acc, mask=mask)
        if DUAL:
            tl.store(pbase + N, acc2, mask=mask)
        tl.debug_barrier()
        arrived = tl.atomic_add(cnt_ptr + pid_n, 1)
        if arrived == SPLIT_K - 1:
            acc = tl.zeros(acc.shape, tl.float32)
            acc2 = tl.zeros(acc.shape, tl.float32)
            for sp in tl.static_range(SPLIT_K):
                pb = part_ptr + sp * M * NP + offs_m[None, :] * NP + offs_n[:, None]
                acc += tl.load(pb, mask=mask, other=0.0, cache_modifier=".cg")
                if DUAL:
                    acc2 += tl.load(pb + N, mask=mask, other=0.0, cache_modifier=".cg")
            _dot_epilogue(acc, acc2, offs_m, offs_n, mask, r_ptr, stride_rm, y_ptr, stride_ym, DUAL, RESIDUAL)
            tl.atomic_xchg(cnt_ptr + pid_n, 0)
    else:
        _dot_epilogue(acc, acc2, offs_m, offs_n, mask, r_ptr, stride_rm, y_ptr, stride_ym, DUAL, RESIDUAL)


@triton.jit
def _dot_group(words, xv, IEEE: tl.constexpr, PAIRS: tl.constexpr, USE_ASM: tl.constexpr, BLOCK_N: tl.constexpr,
               G: tl.constexpr):
    """One scale group's [BLOCK_N, G // 16] words times x^T [G, BLOCK_M] on tensor cores (unscaled).

    PAIRS (16-bit x): weights j and j + 8 of a word decode together, in one 32-bit register as two 16-bit
    floats: ``(w >> 2j) & 0x00030003 | magic`` is (2^e + c) in both halves, one packed FMA subtracts 2^e + 1
    (exact: c - 1 in {-1, 0, 1}): 3 instructions per weight pair instead of ~4 per weight. The decoded tile's
    K order is then (word, j, half), which :func:`_dot_k_order` gives x too. Otherwise: shift/mask/magic fp32."""
    if PAIRS:
        sh = tl.arange(0, 8) * 2
        t = words[:, :, None] >> sh[None, None, :]
        lo, hi = _pair_decode(t, xv.dtype == tl.bfloat16, USE_ASM)
        wt = tl.reshape(tl.join(lo, hi), [BLOCK_N, G])
    else:
        sh = tl.arange(0, 16) * 2
        c = (words[:, :, None] >> sh[None, None, :]) & 3
        wf = (c | 0x4B000000).to(tl.float32, bitcast=True) - 8388609.0  # c - 1, exact
        wt = tl.reshape(wf, [BLOCK_N, G]).to(xv.dtype)
    if IEEE:
        return tl.dot(wt, xv, input_precision="ieee")
    return tl.dot(wt, xv)


@triton.jit
def _dot_k_order(G: tl.constexpr, PAIRS: tl.constexpr):
    """Offsets in a group of the decoded tile's K positions (see :func:`_dot_group`)."""
    p = tl.arange(0, G)
    if PAIRS:
        return (p // 16) * 16 + (p % 2) * 8 + (p % 16) // 2
    return p


@triton.jit
def _pair_decode(t, BF16: tl.constexpr, USE_ASM: tl.constexpr):
    """(code - 1) of bits 0-1 and 16-17 of each int32 of ``t`` as two bf16 (BF16) or fp16 tensors."""
    if USE_ASM:
        if BF16:  # 0x4300 = 128: (128 + c) * 1 - 129
            return tl.inline_asm_elementwise(
                "{ .reg .b32 t, one, off; and.b32 t, $2, 0x00030003; or.b32 t, t, 0x43004300; "
                "mov.b32 one, 0x3F803F80; mov.b32 off, 0xC301C301; "
                "fma.rn.bf16x2 t, t, one, off; mov.b32 {$0, $1}, t; }",
                "=h,=h,r", [t], dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=1)
        else:  # 0x6400 = 1024: (1024 + c) * 1 - 1025
            return tl.inline_asm_elementwise(
                "{ .reg .b32 t, one, off; and.b32 t, $2, 0x00030003; or.b32 t, t, 0x64006400; "
                "mov.b32 one, 0x3C003C00; mov.b32 off, 0xE401E401; "
                "fma.rn.f16x2 t, t, one, off; mov.b32 {$0, $1}, t; }",
                "=h,=h,r", [t], dtype=(tl.float16, tl.float16), is_pure=True, pack=1)
    else:
        lo = ((t & 3) - 1).to(tl.float32)
        hi = (((t >> 16) & 3) - 1).to(tl.float32)
        if BF16:
            return lo.to(tl.bfloat16), hi.to(tl.bfloat16)
        else:
            return lo.to(tl.float16), hi.to(tl.float16)


@triton.jit
def _group_scale(s_ptr, offs_n, n_mask, NG, g):
    return tl.load(s_ptr + offs_n * NG + g, mask=n_mask, other=0.0).to(tl.float32)


@triton.jit
def _dot_epilogue(acc, acc2, offs_m, offs_n, mask, r_ptr, stride_rm, y_ptr, stride_ym,
                  DUAL: tl.constexpr, RESIDUAL: tl.constexpr):
    """[BLOCK_N, BLOCK_M] results -> y[m, n]: SiLU(gate) * up and the residual in the model dtype (as HF)."""
    ydt = y_ptr.dtype.element_ty
    out = acc
    if DUAL:
        gg = acc.to(ydt).to(tl.float32)
        out = gg / (1.0 + tl.exp(-gg)) * acc2.to(ydt).to(tl.float32)
    if RESIDUAL:
        rr = tl.load(r_ptr + offs_m[None, :] * stride_rm + offs_n[:, None], mask=mask, other=0.0)
        out = out.to(ydt).to(tl.float32) + rr.to(tl.float32)
    tl.store(y_ptr + offs_m[None, :] * stride_ym + offs_n[:, None], out.to(ydt), mask=mask)


ACTIVATION_MODES = ("int8", "exact")
_decode_activations = flags.value("TERNARY_DECODE_ACTIVATIONS")
if _decode_activations not in ACTIVATION_MODES:
    _decode_activations = "int8"


def set_decode_activations(mode: str) -> None:
    """``"int8"``: decode mat-vecs quantise x to int8 (one scale per 32 values) and use ``dp4a`` —
    what llama.cpp does for every quantised mat-vec, ~3x fewer instructions per weight (t3 weights:
    one scale per 20 values and ``dp2a``, see ``_gemv_q3_kernel``); ``"exact"``:
    x stays fp32 in the kernel (results equal the reference to fp32 rounding). Applies to bf16/fp16
    activations in mat-vecs of <= 8 rows; fp32 activations and prefill GEMMs are always exact."""
    global _decode_activations
    if mode not in ACTIVATION_MODES:
        raise ValueError(f"decode activations must be one of {', '.join(ACTIVATION_MODES)}, not {mode!r}")
    _decode_activations = mode


def decode_activations() -> str:
    return _decode_activations


def _quantise_x(kernel, x2, nw, out, k, eps, norm_offset, norm: dict, gdc: dict, *layout) -> None:
    """Launch an int8 x quantiser (``_quant_x_kernel``, or ``_quant_x_frag_kernel`` with its rows per block in
    ``layout``): one program per x row and block of up to 64 words, whole activation blocks each."""
    kw = k // 16
    qw = min(64, triton.next_power_of_2(kw))  # >= _ACT_WORDS (kw is): whole activation blocks
    kernel[(x2.shape[0], triton.cdiv(kw, qw))](
        x2, x2.stride(0), nw if nw is not None else x2, out, k, kw, *layout, float(eps), float(norm_offset),
        BLOCK_W=qw, num_warps=4, **norm, **gdc)


def _gemv_q8_launch(x2, nw, w, s, w2, s2, r2, y2, n, k, g, eps, norm_offset, dual, cfg, qx=None):
    kind, bn, bk, sk, warps = cfg
    m = x2.shape[0]
    kw = k // 16
    gdc = pdl.launch_options(x2.device)
    norm = dict(NORM=nw is not None, NORM_QWEN3=norm_offset == 0.0, NORM_BLOCK=min(4096, triton.next_power_of_2(k)))
    if kind == "q8w":  # int8 tensor cores fed from registers: tiles of 16 weight rows, 1 or 2 MMAs of 8 x rows
        nt = 1 if m <= 8 else 2
        # x in the MMA's fragment order, by its own quantisation launch (a producer's row-major planes, qx, are
        # not in that order; x2 holds the same x)
        xf = torch.empty((kw // 2) * 8 * nt * 10, dtype=torch.int32, device=x2.device)
        _quantise_x(_quant_x_frag_kernel, x2, nw, xf, k, eps, norm_offset, norm, gdc, 8 * nt)
        wv = w.view(torch.int32)
        _gemv_q8w_kernel[(triton.cdiv(n, 16),)](
            xf, wv, s, w2.view(torch.int32) if dual else wv, s2 if dual else s,
            r2 if r2 is not None else y2, r2.stride(0) if r2 is not None else 0, y2, y2.stride(0), m, n, kw, k // g,
            WPG=g // 16, NT=nt, WARPS=warps, DUAL=dual, RESIDUAL=r2 is not None, USE_ASM=not INTERPRET,
            num_warps=warps, **gdc)
        return
    if qx is not None and nw is None:  # x's producer wrote its int8 planes already (quant_x_planes)
        if qx.dtype != torch.int32 or qx.numel() < m * Q8_PLANES * kw:
            raise ValueError(f"pre-quantised x must be int32 [{m}, {Q8_PLANES} * K/16]")
    else:
        qx = torch.empty(m, Q8_PLANES * kw, dtype=torch.int32, device=x2.device)
        _quantise_x(_quant_x_kernel, x2, nw, qx, k, eps, norm_offset, norm, gdc)
    n_tiles = triton.cdiv(n, bn)
    persistent = kind in ("q8p", "q8m")
    part, cnt = _splitk_buffers(1 if persistent else sk, m, n, dual, m * n_tiles, y2)
    wv = w.view(torch.int32)
    args = (qx, wv, s, w2.view(torch.int32) if dual else wv, s2 if dual else s,
            r2 if r2 is not None else y2, r2.stride(0) if r2 is not None else 0, y2, y2.stride(0),
            part, cnt, m, n, kw, k // g)
    common = dict(WPG=g // 16, BLOCK_N=bn, SPLIT_K=sk, DUAL=dual, RESIDUAL=r2 is not None,
                  USE_ASM=not INTERPRET, num_warps=warps, **gdc)
    if kind == "q8t":  # int8 tensor cores: every row (up to 64) per program, M padded to 16
        _gemv_q8t_kernel[(n_tiles, sk)](*args, BLOCK_M=max(16, triton.next_power_of_2(m)), X_ON_M=bk == 1, **common)
    elif kind == "q8c":  # chunks of 4 words (64 weights)
        bc = max(1, bk // 64)
        _gemv_q8c_kernel[(n_tiles, m, sk)](*args, BLOCK_C=bc, EVEN_K=(kw // 4) % bc == 0, **common)
    elif persistent:  # the third field is programs per SM, not a K split
        common.pop("SPLIT_K")
        progs = min(n_tiles, _sm_count(x2.device) * sk)
        whole = bk == 0
        # whole rows: a power of two of words, then the rest rounded up to a power of two; else BLOCK_K blocks
        bw = 1 << (kw.bit_length() - 1) if whole else max(_ACT_WORDS, bk // 16)
        tail = triton.next_power_of_2(kw - bw) if whole and kw > bw else 0
        even = dict(EVEN_K=whole or kw % bw == 0, EVEN_T=not tail or tail == kw - bw)
        if kind == "q8m":  # all rows per program; whole rows per step only (checked by _gemv_launch)
            _gemv_q8m_kernel[(progs,)](*args[:9], *args[11:], BLOCK_W=bw, TAIL=tail, **even, **common)
        else:
            _gemv_q8p_kernel[(progs, m)](*args[:9], *args[11:], BLOCK_W=bw, TAIL=tail, ONE_K=whole or bw >= kw,
                                         **even, **common)
    else:
        bw = max(_ACT_WORDS, bk // 16)
        _gemv_q8_kernel[(n_tiles, m, sk)](*args, BLOCK_W=bw, EVEN_K=kw % bw == 0, **common)


def _q3_ok(k: int, g: int) -> bool:
    """t3 layouts the int8 dp2a mat-vec reads: an even number of bytes per group (each byte pair of an
    int32 word in one scale group; G = 128 -> 26) and rows of whole int32 words."""
    nbg = t3_bytes_per_group(g)
    return nbg % 2 == 0 and ((k // g) * nbg) % 4 == 0


def _gemv_q3_launch(x2, nw, w, s, w2, s2, r2, y2, n, k, g, eps, norm_offset, dual, cfg):
    _, bn, bw, sk, warps = cfg
    m = x2.shape[0]
    nbg = t3_bytes_per_group(g)
    kw3 = (k // g) * nbg // 4
    qx = torch.empty(m, 13 * kw3, dtype=torch.int32, device=x2.device)
    gdc = pdl.launch_options(x2.device)
    qw = min(64, triton.next_power_of_2(kw3))
    _quant_x3_kernel[(m, triton.cdiv(kw3, qw))](
        x2, x2.stride(0), nw if nw is not None else x2, qx, k, kw3, float(eps), float(norm_offset),
        G=g, NBG=nbg, BLOCK_W=qw, NORM=nw is not None, NORM_QWEN3=norm_offset == 0.0,
        NORM_BLOCK=min(4096, triton.next_power_of_2(k)), num_warps=4, **gdc)
    n_tiles = triton.cdiv(n, bn)
    part, cnt = _splitk_buffers(sk, m, n, dual, m * n_tiles, y2)
    wv = w.view(torch.int32)
    _gemv_q3_kernel[(n_tiles, m, sk)](
        qx, wv, s, w2.view(torch.int32) if dual else wv, s2 if dual else s,
        r2 if r2 is not None else y2, r2.stride(0) if r2 is not None else 0, y2, y2.stride(0),
        part, cnt, m, n, k // g, KW3=kw3,
        NBG=nbg, BLOCK_N=bn, BLOCK_W=bw, SPLIT_K=sk, DUAL=dual, RESIDUAL=r2 is not None,
        EVEN_K=kw3 % bw == 0, USE_ASM=not INTERPRET, num_warps=warps, **gdc,
    )


def _gemv_launch(x2, nw, w, s, w2, s2, r2, y2, n, k, g, encoding, eps, norm_offset, dual, cfg, prep=0, qx=None):
    if cfg[0] == "q3":
        if encoding != T3:
            raise ValueError("the q3 int8-activation mat-vec handles t3 weights")
        if _q3_ok(k, g):
            return _gemv_q3_launch(x2, nw, w, s, w2, s2, r2, y2, n, k, g, eps, norm_offset, dual, cfg)
        # a layout it cannot read (odd bytes per group, e.g. G = 64): the exact t3 kernel
        cfg = _INTERPRET_GEMV if INTERPRET else _GEMV_CANDIDATES[0]
        cfg = (cfg[0], max(min(cfg[1], triton.next_power_of_2(k)), g), cfg[2], cfg[3])
    if cfg[0] in ("q8", "q8c", "q8p", "q8m", "q8t", "q8w"):
        if cfg[0] == "q8w" and not _q8w_ok(x2.shape[0], k, g, cfg, x2.device):
            raise ValueError(f"the register-fed int8 tensor-core mat-vec takes 2-{Q8W_MAX_ROWS} rows of x, tiles of 16 "
                             "weight rows, K a multiple of 32, groups of 32-128, and a GPU with int8 mma.sync (sm_80 or newer)")
        if cfg[0] == "q8m" and (cfg[2] != 0 or x2.shape[0] > Q8M_MAX_ROWS):
            raise ValueError(f"the batched int8 mat-vec takes whole rows (BLOCK_K 0) and at most {Q8M_MAX_ROWS} rows")
        if cfg[0] == "q8t" and (cfg[1] < 16 or cfg[2] not in (0, 1) or x2.shape[0] > Q8M_MAX_ROWS):
            raise ValueError(f"the int8 tensor-core mat-vec takes tiles of at least 16 rows and at most "
                             f"{Q8M_MAX_ROWS} rows of x")
        if encoding != T2:
            raise ValueError("the int8-activation mat-vec handles t2 weights")
        if cfg[0] == "q8c" and g < 64:
            raise ValueError("the chunked int8-activation mat-vec needs scale groups of at least 64")
        if g < INT8_ACT_BLOCK:
            raise ValueError(f"the int8-activation mat-vec needs scale groups of at least {INT8_ACT_BLOCK} (one "
                             f"activation scale per {INT8_ACT_BLOCK} values must lie inside one weight group)")
        return _gemv_q8_launch(x2, nw, w, s, w2, s2, r2, y2, n, k, g, eps, norm_offset, dual, cfg, qx=qx)
    if cfg[0] in ("xp", "x3"):
        if encoding != T2:
            raise ValueError("the prepared-x mat-vec handles t2 weights")
        m = x2.shape[0]
        scaled = cfg[0] == "x3"
        xp = torch.empty(m, k + k // 16 if scaled else k, dtype=torch.float32, device=x2.device)
        _prep_x_kernel[(m,)](x2, x2.stride(0), nw if nw is not None else x2, xp, k, float(eps), float(norm_offset),
                             BLOCK=min(4096, triton.next_power_of_2(k)), NORM=nw is not None,
                             NORM_QWEN3=norm_offset == 0.0, SCALED=scaled, num_warps=4)
        return _gemv_launch(xp, None, w, s, w2, s2, r2, y2, n, k, g, encoding, eps, norm_offset, dual,
                            tuple(cfg[1:]), prep=2 if scaled else 1)
    if cfg[0] in ("dot", "dotp"):
        if encoding != T2 or x2.shape[0] > 16:
            raise ValueError("the tensor-core mat-vec handles t2 weights and at most 16 rows")
        return _gemv_dot_launch(x2, nw, w, s, w2, s2, r2, y2, n, k, g, eps, norm_offset, dual, cfg)
    bn, bk, sk, warps = cfg
    m = x2.shape[0]
    t3 = encoding == T3
    wv = w if t3 else w.view(torch.int32)
    w2v = (w2 if t3 else w2.view(torch.int32)) if dual else wv
    n_tiles = triton.cdiv(n, bn)
    part, cnt = _splitk_buffers(sk, m, n, dual, m * n_tiles, y2)
    _gemv_kernel[(n_tiles, m, sk)](
        x2, x2.stride(0), nw if nw is not None else x2,
        wv, s, w2v, s2 if dual else s,
        r2 if r2 is not None else y2, r2.stride(0) if r2 is not None else 0, y2, y2.stride(0),
        part, cnt, m, n, k, k // 16, k // g, float(eps), float(norm_offset), 0x4B000000,
        G=g, T3=t3, NBG=t3_bytes_per_group(g) if t3 else 1,
        BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=sk,
        NORM=nw is not None, NORM_QWEN3=norm_offset == 0.0, DUAL=dual, RESIDUAL=r2 is not None,
        PREP=prep, EVEN_K=k % bk == 0, num_warps=warps,
    )


def _gemv_dot_launch(x2, nw, w, s, w2, s2, r2, y2, n, k, g, eps, norm_offset, dual, cfg):
    kind, bn, _, sk, warps = cfg
    pairs = kind == "dotp"
    m = x2.shape[0]
    wv = w.view(torch.int32)
    w2v = w2.view(torch.int32) if dual else wv
    n_tiles = triton.cdiv(n, bn)
    part, cnt = _splitk_buffers(sk, m, n, dual, n_tiles, y2)
    _gemv_dot_kernel[(n_tiles, sk)](
        x2, x2.stride(0), nw if nw is not None else x2,
        wv, s, w2v, s2 if dual else s,
        r2 if r2 is not None else y2, r2.stride(0) if r2 is not None else 0, y2, y2.stride(0),
        part, cnt, m, n, k, k // 16, k // g, float(eps), float(norm_offset),
        G=g, BLOCK_M=max(16, triton.next_power_of_2(m)), BLOCK_N=bn, SPLIT_K=sk,
        NORM=nw is not None, NORM_QWEN3=norm_offset == 0.0, DUAL=dual, RESIDUAL=r2 is not None,
        IEEE=x2.dtype == torch.float32, PAIRS=x2.dtype != torch.float32 and pairs, USE_ASM=not INTERPRET,
        num_warps=warps, **pdl.launch_options(x2.device),
    )


def _agrees(y: torch.Tensor, ref: torch.Tensor, tol: float = 0.05) -> bool:
    """Whether two mat-vec variants computed the same thing: a relative difference within ``tol`` (int8 and
    exact activations differ by ~1e-2; a broken kernel by ~1). Vacuous where ``ref`` is not finite (the x a
    tuning call happened to see, e.g. an uninitialised buffer during a graph warm-up)."""
    a, b = y.float(), ref.float()
    if not bool(torch.isfinite(b).all()):
        return True
    scale = float(b.norm())
    return bool(torch.isfinite(a).all()) and float((a - b).norm()) <= tol * max(scale, 1e-6)


def _gemv_config(x2, nw, w, s, w2, s2, r2, n, k, g, encoding, eps, norm_offset, dual) -> tuple:
    if INTERPRET:
        bn, bk, sk, w_ = _INTERPRET_GEMV
        return (bn, max(min(bk, triton.next_power_of_2(k)), g if encoding == T3 else 16), sk, w_)
    # fp32 activations mean "exact" (reference comparisons); 16-bit ones already round x to 8-9 bits
    a8 = _decode_activations == "int8" and x2.dtype != torch.float32
    int8 = a8 and encoding == T2 and g >= INT8_ACT_BLOCK  # an activation block lies inside one scale group
    q3 = a8 and encoding == T3 and _q3_ok(k, g)
    key = _key("gemv", x2.shape[0], n, k, g, encoding, nw is not None, dual, r2 is not None, x2.dtype)
    key += "|a8" if int8 or q3 else ""
    cfg = tuning._tuned.get(key)
    if cfg is not None:
        return cfg
    m = x2.shape[0]
    cands: list[tuple] = []

    def fits(c: tuple) -> bool:
        if c[0] == "q8p":  # at least one tile per program
            return m * triton.cdiv(n, c[1]) >= 64
        if c[0] == "q8m":
            return 1 < m <= Q8M_MAX_ROWS and triton.cdiv(n, c[1]) >= 64
        if c[0] == "q8t":
            return 1 < m <= Q8M_MAX_ROWS and c[3] <= k // g and triton.cdiv(n, c[1]) * c[3] >= 64
        if c[0] == "q8w":
            return _q8w_ok(m, k, g, c, x2.device)
        return c[3] <= triton.cdiv(k, c[2]) and m * triton.cdiv(n, c[1]) * c[3] >= 64

    if int8:
        cands += [c for c in _Q8_CANDIDATES + (_Q8C_CANDIDATES if g >= 64 else []) + _Q8P_CANDIDATES
                  + _Q8M_CANDIDATES + _Q8T_CANDIDATES + _Q8W_CANDIDATES if fits(c)]
    if q3:
        kw3 = (k // g) * t3_bytes_per_group(g) // 4
        cands += [c for c in _Q3_CANDIDATES if c[3] <= triton.cdiv(kw3, c[2]) and m * triton.cdiv(n, c[1]) * c[3] >= 64]
    if encoding == T2 and g >= 16:
        # prepared-x variants only: the plain FMA kernel (x re-read and converted per weight word)
        # measured 4x slower inside a real decode step than alone (docs/kernels.md, version 3)
        cands += [c for c in _XP_CANDIDATES + _X3_CANDIDATES if fits(c)]
        cands += [c for c in _DOT_CANDIDATES if c[3] <= k // g]
    else:
        for bn, bk, sk, warps in _GEMV_CANDIDATES:
            n_kb = triton.cdiv(k, bk)
            if sk > n_kb or m * triton.cdiv(n, bn) * sk < 64:
                continue
            cands.append((bn, bk, sk, warps))
    if flags.value("TERNARY_KERNELS_TUNE") != "full":
        # q8t is timed only under TERNARY_KERNELS_TUNE=full: slower than q8m/dotp on the H100 (docs/kernels.md)
        quick = _QUICK_GEMV + _QUICK_Q8 + _QUICK_Q3 + (_QUICK_DOT + _QUICK_Q8M + _Q8W_CANDIDATES if m > 1 else [])
        cands = [c for c in cands if c in quick] or cands
    if not cands:
        cands = [(16, 256, 1, 4)]
    copies = tuning._tensors_to_time(x2.device, w, s, w2, s2)
    if copies is None:  # the first candidate, not remembered (a resident twin of this shape still tunes)
        return cands[0]
    w, s, w2, s2 = copies
    y = torch.empty(m, n, dtype=x2.dtype, device=x2.device)
    best, best_t = cands[0], float("inf")
    first: torch.Tensor | None = None  # the output of the first config that ran, and that config
    first_cfg = cands[0]
    for cfg in cands:
        def run(cfg=cfg):
            _gemv_launch(x2, nw, w, s, w2, s2, r2, y, n, k, g, encoding, eps, norm_offset, dual, cfg)
        try:
            t = tuning._bench(run)
            run()
        except Exception:  # a config the compiler rejects (e.g. out of resources) is skipped
            continue
        if first is None:
            first, first_cfg = y.clone(), cfg
        elif not _agrees(y, first):  # a variant wrong on this GPU / Triton is never chosen, however fast
            warnings.warn(f"mat-vec config {cfg} disagrees with {first_cfg} at {m}x{n}x{k}; not used", stacklevel=2)
            continue
        if t < best_t:
            best, best_t = cfg, t
    if best_t == float("inf"):  # nothing could be timed (e.g. no room for the L2-flush buffer): not remembered
        return best
    tuning._remember(key, best)
    return best


def _gemv(x, codes, scales, group_size, encoding, *, out=None, residual=None, norm_weight=None,
          eps=1e-6, norm_offset=0.0, up_codes=None, up_scales=None, config=None, x_int8=None) -> torch.Tensor:
    dual = up_codes is not None
    n, k = _check(x, codes, scales, group_size, encoding)
    if dual:
        _check(x, up_codes, up_scales, group_size, encoding)
        if up_scales.shape[0] != n:
            raise ValueError("gate and up projections must have the same number of rows")
    x2 = _as_rows(x)
    m = x2.shape[0]
    lead = x.shape[:-1]
    y2 = out.view(m, n) if out is not None else torch.empty(m, n, dtype=x.dtype, device=x.device)
    r2 = residual.reshape(m, n) if residual is not None else None
    nw = norm_weight.contiguous() if norm_weight is not None else None
    cfg = config or _gemv_config(x2, nw, codes, scales, up_codes, up_scales, r2, n, k, group_size, encoding,
                                 eps, norm_offset, dual)
    _gemv_launch(x2, nw, codes, scales, up_codes, up_scales, r2, y2, n, k, group_size, encoding, eps,
                 norm_offset, dual, cfg, qx=x_int8)
    return out if out is not None else y2.view(*lead, n)


def ternary_matvec(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, group_size: int,
                   encoding: str = T2, *, out: torch.Tensor | None = None,
                   residual: torch.Tensor | None = None, config: tuple | None = None,
                   x_int8: torch.Tensor | None = None) -> torch.Tensor:
    """``y = x @ W^T (+ residual)`` for ``x [..., K]`` with at most 8 rows (decode). fp32 accumulate;
    output in x's dtype. ``out`` may alias ``residual`` (in-place residual stream update). ``x_int8``:
    x's int8 planes (:func:`quant_x_planes`) already written by x's producer in this step; an int8-activation
    kernel then skips its quantisation launch (the others read x itself)."""
    return _gemv(x, codes, scales, group_size, encoding, out=out, residual=residual, config=config, x_int8=x_int8)


def quant_x_planes(m: int, k: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
    """A buffer for the int8 planes (what ``_quant_x_kernel`` writes) of an x ``[m, k]`` of ``dtype`` when decode
    mat-vecs on it may take int8 activations (16-bit x, k a multiple of the activation block), else None: for
    producers that quantise their own output (``attention.decode_attention``'s ``q8_out``)."""
    if _decode_activations != "int8" or dtype == torch.float32 or k % INT8_ACT_BLOCK:
        return None
    return torch.empty(m, Q8_PLANES * (k // 16), dtype=torch.int32, device=device)


def fused_rmsnorm_matvec(x: torch.Tensor, norm_weight: torch.Tensor, eps: float, codes: torch.Tensor,
                         scales: torch.Tensor, group_size: int, encoding: str = T2, *,
                         weight_offset: float = 0.0, out: torch.Tensor | None = None,
                         config: tuple | None = None) -> torch.Tensor:
    """``rmsnorm(x) @ W^T`` in one launch: each program recomputes 1/rms(x) (x is tiny)."""
    return _gemv(x, codes, scales, group_size, encoding, out=out, norm_weight=norm_weight, eps=eps,
                 norm_offset=weight_offset, config=config)


def swiglu_matvec(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, group_size: int,
                  encoding: str = T2, *, up_codes: torch.Tensor | None = None,
                  up_scales: torch.Tensor | None = None, norm_weight: torch.Tensor | None = None,
                  eps: float = 1e-6, weight_offset: float = 0.0, out: torch.Tensor | None = None,
                  config: tuple | None = None) -> torch.Tensor:
    """``silu(x Wg^T) * (x Wu^T)`` in one launch reading both weights (optionally on rmsnorm(x)).

    Pass gate and up separately (``up_codes``/``up_scales``) or as one row-fused ``[2I, ...]``
    matrix (gate rows first, as ``torch.cat`` of the two TernaryTensors gives).
    """
    if up_codes is None:
        if codes.shape[0] % 2:
            raise ValueError("a fused gate_up matrix must have an even number of rows")
        half = codes.shape[0] // 2
        codes, up_codes = codes[:half], codes[half:]
        scales, up_scales = scales[:half], scales[half:]
    return _gemv(x, codes, scales, group_size, encoding, out=out, norm_weight=norm_weight, eps=eps,
                 norm_offset=weight_offset, up_codes=up_codes, up_scales=up_scales, config=config)
