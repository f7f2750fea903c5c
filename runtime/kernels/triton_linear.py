"""Triton ternary matmuls that read the canonical packed layout directly (no fp16 weight copy).

Why this shape of kernel (see docs/kernels.md for numbers): at 2 bits a decode mat-vec moves only
a few MB per matrix, so it is bound by bytes in flight and by the instructions spent decoding,
not by FLOPs. Hence

* ``gemv`` (batch 1..8): each program owns BLOCK_N output rows of one activation row and a
  1/SPLIT_K slice of K; int32 words (16 weights) are decoded with shift/mask and the
  "magic float" trick ``bitcast(c | 0x4B000000) - (2^23 + 1) == c - 1`` (no int->float convert);
  the fp16 group scale is applied once per 16-weight word partial sum, not per weight.
  Split-K partials are reduced *in the same launch* by the last program to arrive at a per-tile
  counter (deterministic order, counters reset by that program), so epilogues (SiLU*mul,
  residual add) still fuse and a decode step stays one launch per matmul.
  Optional prologue: RMSNorm of x computed by every program (x is <= 20 KB, read from L2).
* ``mm`` (prefill, many tokens): tiles dequantized in registers feeding ``tl.dot``.
* ``dequant`` + cuBLAS: one matrix at a time into a reused buffer, then ``torch.matmul``.
  Which prefill path runs is measured per (M bucket, N, K) on first use and cached.

* ``q8`` / ``q3`` (decode activations "int8"): x is quantised to int8 by a tiny kernel first and
  the mat-vec works in integers: t2 words through ``dp4a`` (one activation scale per 32 values, so a word
  pair's integer dots add up before one float step, ``_q8p_dot``); t3 words (4 bytes = 20 trits) through
  an in-register base-3 digit extraction (TQ1_0's prescale-and-multiply-by-3) feeding ``dp2a``.

Layouts: ``t2`` codes uint8 ``[N, K/4]`` read as int32 ``[N, K/16]`` (weight k at bits 2k of its
word); ``t3`` base-3 5 trits/byte per group (decoded with exact float floor/div tricks, or as int32
words in the q3 kernel when a group has an even number of bytes, e.g. G = 128).
Scales fp16 ``[N, K/G]``. Weights are never repacked: the GPU buffers are the file's bytes.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import torch
import triton
import triton.language as tl

from runtime.formats.model_data import T2, T3, TernaryTensor, t3_bytes_per_group
from runtime.kernels import linear, pdl
from runtime.kernels.pdl import gdc_wait

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
MATVEC_MAX_M = 8  # rows of x up to which the mat-vec kernel is used
TUNED_DIR = Path(__file__).with_name("tuned")


# ---------------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------------

@triton.jit
def _words_in_row(wk, KW, EVEN: tl.constexpr):
    """Which word indices ``wk`` lie in a row of KW words (all of them when the block is known to fit: EVEN)."""
    if EVEN:
        return wk >= 0
    return wk < KW


@triton.jit
def row_inv_rms(x_row, K, eps, BLOCK: tl.constexpr):
    """1 / RMS of one row from BLOCK-wide fp32 partial sums of squares (kernels that normalise the same row
    with the same BLOCK get the same bits, e.g. the quantisation launch and the q8px mat-vec)."""
    ss = tl.zeros([BLOCK], tl.float32)
    for k0 in range(0, K, BLOCK):
        kk = k0 + tl.arange(0, BLOCK)
        xv = tl.load(x_row + kk, mask=kk < K, other=0.0).to(tl.float32)
        ss += xv * xv
    return tl.rsqrt(tl.sum(ss, axis=0) / K + eps)


@triton.jit
def _load_x(x_row, nw_ptr, kk, K, inv_rms, norm_offset, NORM: tl.constexpr, NORM_QWEN3: tl.constexpr):
    """x[kk] as fp32, optionally RMS-normalised with HF's rounding order for the model dtype."""
    m = kk < K
    xv = tl.load(x_row + kk, mask=m, other=0.0)
    return _norm_x(xv, _norm_weights(nw_ptr, kk, K, NORM), inv_rms, norm_offset, NORM, NORM_QWEN3)


@triton.jit
def _norm_x(xv, w, inv_rms, norm_offset, NORM: tl.constexpr, NORM_QWEN3: tl.constexpr):
    """Loaded x values as fp32, RMS-normalised with weight ``w`` (fp32) when NORM, in HF's rounding order."""
    xf = xv.to(tl.float32)
    if NORM:
        h = xf * inv_rms
        if NORM_QWEN3:  # weight * h.to(dtype), product rounded to dtype
            xf = (h.to(xv.dtype).to(tl.float32) * w).to(xv.dtype).to(tl.float32)
        else:  # (h * (offset + w)).to(dtype)
            xf = (h * (w + norm_offset)).to(xv.dtype).to(tl.float32)
    return xf


@triton.jit
def _t3_codes(w_ptr, offs_n, n_mask, kk, K, G: tl.constexpr, NBG: tl.constexpr):
    """Trits (0..2, as fp32) of t3 weights kk for rows offs_n: base-3 digit via exact float floors."""
    g = kk // G
    j = kk - g * G
    byte = g * NBG + j // 5
    pw = j % 5
    inv_p = tl.where(pw == 0, 1.0, tl.where(pw == 1, 1.0 / 3.0, tl.where(
        pw == 2, 1.0 / 9.0, tl.where(pw == 3, 1.0 / 27.0, 1.0 / 81.0))))
    row_bytes = (K // G) * NBG
    m = n_mask[:, None] & (kk < K)[None, :]
    b = tl.load(w_ptr + offs_n[:, None] * row_bytes + byte[None, :], mask=m, other=0).to(tl.float32)
    q = tl.floor((b + 0.5) * inv_p[None, :])  # b // 3^pw (margin 0.5/81 >> fp32 error)
    return q - 3.0 * tl.floor((q + 0.5) * (1.0 / 3.0))  # q % 3


@triton.jit
def _t3_partial(w_ptr, s_ptr, offs_n, n_mask, kk, xf, K, G: tl.constexpr, NBG: tl.constexpr):
    trit = _t3_codes(w_ptr, offs_n, n_mask, kk, K, G, NBG)
    m = n_mask[:, None] & (kk < K)[None, :]
    sc = tl.load(s_ptr + offs_n[:, None] * (K // G) + (kk // G)[None, :], mask=m, other=0.0)
    return tl.sum((trit - 1.0) * xf[None, :] * sc.to(tl.float32), axis=1)


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
def _prep_x_kernel(x_ptr, stride_xm, nw_ptr, xp_ptr, K, eps, norm_offset, BLOCK: tl.constexpr,
                   NORM: tl.constexpr, NORM_QWEN3: tl.constexpr, SCALED: tl.constexpr = False):
    """fp32 copy of one x row, permuted to ``xp[j * K/16 + w] = x[16 w + j]`` (and RMS-normalised).
    SCALED: times ``4^-(j mod 11)``, plus a row ``xp[16 * K/16 + w] = sum_j x[16 w + j]``."""
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_xm
    if SCALED:
        inv = 1.0
        if NORM:
            ss = tl.zeros([BLOCK // 16, 16], tl.float32)
            for k0 in range(0, K, BLOCK):
                kk = k0 + tl.arange(0, BLOCK // 16)[:, None] * 16 + tl.arange(0, 16)[None, :]
                xv = tl.load(x_row + kk, mask=kk < K, other=0.0).to(tl.float32)
                ss += xv * xv
            inv = tl.rsqrt(tl.sum(tl.sum(ss, axis=1), axis=0) / K + eps)
        kwn = K // 16
        jj = tl.arange(0, 16)
        e = tl.where(jj < 11, jj, jj - 11)
        pw = ((127 - 2 * e) << 23).to(tl.float32, bitcast=True)  # 4^-e, exact
        for k0 in range(0, K, BLOCK):
            w = k0 // 16 + tl.arange(0, BLOCK // 16)
            kk = w[:, None] * 16 + jj[None, :]
            xf = _load_x(x_row, nw_ptr, kk, K, inv, norm_offset, NORM, NORM_QWEN3)
            base = xp_ptr + row * (17 * kwn)
            tl.store(base + jj[None, :] * kwn + w[:, None], xf * pw[None, :], mask=kk < K)
            tl.store(base + 16 * kwn + w, tl.sum(xf, axis=1), mask=w < kwn)
    else:
        _prep_plain(x_row, nw_ptr, xp_ptr + row * K, K, eps, norm_offset, BLOCK, NORM, NORM_QWEN3)


@triton.jit
def _prep_plain(x_row, nw_ptr, xp_row, K, eps, norm_offset, BLOCK: tl.constexpr, NORM: tl.constexpr,
                NORM_QWEN3: tl.constexpr):
    inv_rms = 1.0
    if NORM:
        inv_rms = row_inv_rms(x_row, K, eps, BLOCK)
    kw = K // 16
    for k0 in range(0, K, BLOCK):
        kk = k0 + tl.arange(0, BLOCK)
        xf = _load_x(x_row, nw_ptr, kk, K, inv_rms, norm_offset, NORM, NORM_QWEN3)
        tl.store(xp_row + (kk % 16) * kw + kk // 16, xf, mask=kk < K)


@triton.jit
def _dp4a(a, b, c, USE_ASM: tl.constexpr, UNSIGNED_A: tl.constexpr = False):
    """``c + sum_i a.byte[i] * b.byte[i]`` over the 4 signed bytes of int32 ``a``, ``b`` (PTX ``dp4a``;
    the same arithmetic in plain integer ops where inline PTX cannot run, i.e. the interpreter).
    ``UNSIGNED_A``: the bytes of ``a`` are unsigned (``dp4a.u32.s32``): a code masked in place at bits 6-7
    of each byte is 0, 64 or 128, which a signed byte would read as -128."""
    if USE_ASM:
        op: tl.constexpr = "dp4a.u32.s32" if UNSIGNED_A else "dp4a.s32.s32"
        return tl.inline_asm_elementwise(op + " $0, $1, $2, $3;", "=r,r,r,r", [a, b, c],
                                         dtype=tl.int32, is_pure=True, pack=1)
    else:
        for i in tl.static_range(4):
            ab = (a >> (8 * i)) & 0xFF
            if not UNSIGNED_A:
                ab = ab - ((ab & 0x80) << 1)
            bb = (b >> (8 * i)) & 0xFF
            bb = bb - ((bb & 0x80) << 1)
            c += ab * bb
        return c


@triton.jit
def _quant_words(xf, WIDTH: tl.constexpr):
    """``[WIDTH, 16]`` fp32 x (one weight word's 16 activations per row; WIDTH even, starting at an even
    word) to int8 with one scale per 32 values, i.e. per pair of words (llama.cpp's q8_1 block): returns
    the packed bytes ``[WIDTH, 4]`` (``[w, j]`` holds ``x[16w + 4b + j]``, b = 0..3), each word's fp32
    scale (its pair's) and the per-word sums of the int8 values. One scale per pair lets the persistent
    mat-vec add a pair's integer dots before converting (``_q8p_dot``)."""
    amax = tl.max(tl.abs(xf), axis=1)
    amax = tl.max(tl.reshape(amax, [WIDTH // 2, 2]), axis=1)
    amax = tl.reshape(tl.broadcast_to(amax[:, None], [WIDTH // 2, 2]), [WIDTH])
    scale = amax / 127.0
    rcp = tl.where(amax > 0, 127.0 / tl.maximum(amax, 1e-30), 0.0)
    q = tl.floor(xf * rcp[:, None] + 0.5)
    q = tl.minimum(tl.maximum(q, -127.0), 127.0).to(tl.int32)  # index 4b + j
    q3 = tl.reshape(q & 0xFF, [WIDTH, 4, 4])  # [w, b, j]
    packed = tl.sum(q3 << (tl.arange(0, 4) * 8)[None, :, None], axis=1)  # disjoint bytes: the sum is an OR
    return packed, scale, tl.sum(q, axis=1)


@triton.jit
def _norm_weights(nw_ptr, kk, K, NORM: tl.constexpr):
    """RMSNorm weights ``[kk]`` as fp32 (a placeholder of the same shape, never used, without NORM): weights, so
    read before the PDL wait (they overlap the previous kernel)."""
    if NORM:
        return tl.load(nw_ptr + kk, mask=kk < K, other=0.0).to(tl.float32)
    return kk.to(tl.float32)


@triton.jit
def _quant_x_kernel(x_ptr, stride_xm, nw_ptr, q_ptr, K, KW, eps, norm_offset, BLOCK_W: tl.constexpr,
                    NORM: tl.constexpr, NORM_QWEN3: tl.constexpr, NORM_BLOCK: tl.constexpr,
                    USE_GDC: tl.constexpr):
    """One x row (RMS-normalised when asked) to int8, one fp32 scale per 32 values (two weight words).

    Output row of ``Q8_PLANES * K/16`` int32: rows 0..3 ``q[j, w]`` pack the bytes ``x[16w + 4b + j]``
    (b = 0..3) — exactly the weights that ``(word >> 2j) & 0x03030303`` exposes, so one ``dp4a``
    multiplies 4 codes by their 4 activations; row 4 the fp32 scale (bit pattern) of word w (its pair's); row 5
    the sum s of word w's 16 int8 values (codes are t + 1: ``sum (c - 1) q = sum c q - s``); row 6
    ``1.5 * 2^23 + s`` as fp32 bits (exact), the offset ``_gemv_q8c_kernel`` subtracts without a convert."""
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_xm
    q_row = q_ptr + row * 7 * KW
    # one block of BLOCK_W words per program
    w = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    kk = w[:, None] * 16 + tl.arange(0, 16)[None, :]
    nw = _norm_weights(nw_ptr, kk, K, NORM)
    gdc_wait(USE_GDC)
    xv = tl.load(x_row + kk, mask=kk < K, other=0.0)  # issued before the row reduction's loads
    inv = 1.0
    if NORM:  # every program reduces the whole (small, L2-resident) row: no second launch
        inv = row_inv_rms(x_row, K, eps, NORM_BLOCK)
    xf = _norm_x(xv, nw, inv, norm_offset, NORM, NORM_QWEN3)  # [BLOCK_W, 16]
    store_quant_words(q_row, KW, w, w < KW, xf, BLOCK_W)


@triton.jit
def store_quant_words(q_row, KW, w, wm, xf, WIDTH: tl.constexpr):
    """Quantise ``xf [WIDTH, 16]`` (fp32, words ``w`` of an x row, starting at an even word) and store the planes
    ``_quant_x_kernel`` writes, where ``wm``. Shared with kernels that produce a mat-vec's input and quantise it
    themselves (decode attention for o_proj), so both give the same bits."""
    packed, scale, qsum = _quant_words(xf, WIDTH)
    tl.store(q_row + 5 * KW + w, qsum, mask=wm)
    tl.store(q_row + 6 * KW + w, (qsum.to(tl.float32) + 12582912.0).to(tl.int32, bitcast=True), mask=wm)
    tl.store(q_row + 4 * KW + w, scale.to(tl.int32, bitcast=True), mask=wm)
    tl.store(q_row + tl.arange(0, 4)[None, :] * KW + w[:, None], packed, mask=wm[:, None])


@triton.jit
def _first_tile(ptr, ptr2, idx, mask, DUAL: tl.constexpr):
    """A program's first tile of int32 weight words (of both matrices when DUAL), loaded before the PDL
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
def _q8p_quant(x_row, nw_ptr, w0, K, inv, norm_offset, WIDTH: tl.constexpr, NORM: tl.constexpr,
               NORM_QWEN3: tl.constexpr):
    """Words ``[w0, w0 + WIDTH)`` of x quantised in registers, exactly as ``_quant_x_kernel`` writes them
    (same arithmetic, so q8px and q8/q8p give the same products), in ``_q8p_x``'s form."""
    w = w0 + tl.arange(0, WIDTH)
    kk = w[:, None] * 16 + tl.arange(0, 16)[None, :]
    xf = _load_x(x_row, nw_ptr, kk, K, inv, norm_offset, NORM, NORM_QWEN3)  # [WIDTH, 16], 0 past K
    packed, scale, qsum = _quant_words(xf, WIDTH)
    even, odd = tl.split(tl.reshape(packed, [WIDTH, 2, 2]))  # j = 0, 2 | j = 1, 3
    x0, x2 = tl.split(even)
    x1, x3 = tl.split(odd)
    xs, xneg = _x_pairs(scale, qsum, WIDTH)
    return x0[None, :], x1[None, :], x2[None, :], x3[None, :], xs, xneg


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
    M, N, KW, NG, x_ptr, stride_xm, nw_ptr, K, eps, norm_offset,
    WPG: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, TAIL: tl.constexpr, ONE_K: tl.constexpr,
    DUAL: tl.constexpr, RESIDUAL: tl.constexpr, EVEN_K: tl.constexpr, EVEN_T: tl.constexpr,
    QUANT_X: tl.constexpr, NORM: tl.constexpr, NORM_QWEN3: tl.constexpr, NORM_BLOCK: tl.constexpr,
    USE_ASM: tl.constexpr, USE_GDC: tl.constexpr,
):
    """Persistent W2A8 mat-vec: a few programs per SM walk the row tiles (tile pid, pid + P, ...) and
    load the *next* step's weight words and scales before computing the current one, so every
    program keeps a tile in flight while it computes, reduces and stores — the one-tile-per-program
    kernels (``_gemv_q8_kernel``) load, wait, compute and exit, and measured 1.3-2x a plain read of
    their own tiles on the H200. A step is one (row tile, word block). With ``ONE_K`` a step is a whole
    row — ``BLOCK_W`` words (masked past K unless ``EVEN_K``) plus, when ``TAIL`` > 0, a second block of
    ``TAIL`` words after them (so K = 5120 is 256 + 64 words, not 512 with 192 idle lanes) — and the
    quantised x is loaded once per program instead of once per step; with ``QUANT_X`` (whole rows only)
    every program quantises the bf16 x row itself (RMSNorm fused when ``NORM``), so the mat-vec needs no
    quantisation launch before it."""
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
    if QUANT_X:
        x_row = x_ptr + pid_m * stride_xm
        inv = 1.0
        if NORM:  # the same reduction as _quant_x_kernel's, so the same bits
            inv = row_inv_rms(x_row, K, eps, NORM_BLOCK)
        x0, x1, x2, x3, xs, xneg = _q8p_quant(x_row, nw_ptr, 0, K, inv, norm_offset, BLOCK_W, NORM, NORM_QWEN3)
        if TAIL > 0:
            tx0, tx1, tx2, tx3, txs, txneg = _q8p_quant(x_row, nw_ptr, BLOCK_W, K, inv, norm_offset, TAIL, NORM,
                                                        NORM_QWEN3)
    elif ONE_K:
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
def _dp2a(a, b, c, HI: tl.constexpr, USE_ASM: tl.constexpr):
    """``c + a.half[0] * b.byte[o] + a.half[1] * b.byte[o + 1]`` (o = 2 if HI else 0) for int32 ``a``
    holding two signed 16-bit values and ``b`` four signed bytes (PTX ``dp2a.lo``/``dp2a.hi``;
    plain integer ops in the interpreter)."""
    if USE_ASM:
        if HI:
            return tl.inline_asm_elementwise("dp2a.hi.s32.s32 $0, $1, $2, $3;", "=r,r,r,r", [a, b, c],
                                             dtype=tl.int32, is_pure=True, pack=1)
        else:
            return tl.inline_asm_elementwise("dp2a.lo.s32.s32 $0, $1, $2, $3;", "=r,r,r,r", [a, b, c],
                                             dtype=tl.int32, is_pure=True, pack=1)
    else:
        for i in tl.static_range(2):
            ah = (a >> (16 * i)) & 0xFFFF
            ah = ah - ((ah & 0x8000) << 1)
            bb = (b >> (8 * (i + 2 * HI))) & 0xFF
            bb = bb - ((bb & 0x80) << 1)
            c += ah * bb
        return c


# t3 prescale, per 16-bit lane holding a base-3 byte b (0..242): q = b + ((55 b + 1023) >> 10) is
# ceil(256 b / 243) (one more for 13 values of b, where that is as good), and from the 8-bit fraction
# q / 256 "times 3, take the carry byte" yields the five trits most-significant first (checked for every
# b in the tests; no single multiply-shift in a 16-bit lane is exact); 55 * 242 + 1023 < 2^16 and the
# 4-bit mask keep the two lanes of a uint32 independent.
T3_PRESCALE_MUL = 55
T3_PRESCALE_ADD = 1023
T3_PRESCALE_SHIFT = 10


@triton.jit
def _t3_prescale(v):
    """TQ1_0-style prescale (~``ceil(256 b / 243)``) of the two bytes b in the 16-bit lanes of uint32 ``v``."""
    return v + (((v * 55 + 0x03FF03FF) >> 10) & 0x000F000F)


@triton.jit
def _q3_slot_x(x_row, nw_ptr, w, bb, i, KW3, K, inv, norm_offset, G: tl.constexpr, NBG: tl.constexpr,
               NORM: tl.constexpr, NORM_QWEN3: tl.constexpr):
    """x (fp32, normalised when asked) of the weight that trit digit ``i`` (most significant first) of
    byte ``bb`` of t3 word ``w`` encodes; 0 for padding slots and words past the row."""
    byte = 4 * w + bb
    g = byte // NBG
    j = 5 * (byte - g * NBG) + (4 - i)
    kk = tl.where((j < G) & (w < KW3), g * G + j, K)
    return _load_x(x_row, nw_ptr, kk, K, inv, norm_offset, NORM, NORM_QWEN3)


@triton.jit
def _quant_x3_kernel(x_ptr, stride_xm, nw_ptr, q_ptr, K, KW3, eps, norm_offset, G: tl.constexpr,
                     NBG: tl.constexpr, BLOCK_W: tl.constexpr, NORM: tl.constexpr, NORM_QWEN3: tl.constexpr,
                     NORM_BLOCK: tl.constexpr, USE_GDC: tl.constexpr):
    """One x row (RMS-normalised when asked) to int8 in the order a t3 int32 weight word (4 bytes,
    20 trit slots) is decoded, one fp32 scale per word. Output row of ``13 * KW3`` int32 planes:
    ``5 p + i`` (p = 0: bytes 0,1; p = 1: bytes 2,3; i = digit, most significant first) the pair
    ``(q[byte 2p, i] & 0xFFFF) | (q[byte 2p + 1, i] << 16)`` that one ``dp2a`` multiplies with the
    digits; plane 10 the scale bits (absmax / 127 over the word's real activations); 11 + p the sum
    of pair p's ten int8 values (codes are t + 1: ``sum t q = sum c q - sum q``). Padding slots
    (trits past G in a group's last byte) get x = 0."""
    gdc_wait(USE_GDC)
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_xm
    q_row = q_ptr + row * 13 * KW3
    inv = 1.0
    if NORM:
        inv = row_inv_rms(x_row, K, eps, NORM_BLOCK)
    w = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    amax = tl.zeros([BLOCK_W], tl.float32)
    for bb in tl.static_range(4):
        for i in tl.static_range(5):
            xf = _q3_slot_x(x_row, nw_ptr, w, bb, i, KW3, K, inv, norm_offset, G, NBG, NORM, NORM_QWEN3)
            amax = tl.maximum(amax, tl.abs(xf))
    scale = amax / 127.0
    rcp = tl.where(amax > 0, 127.0 / tl.maximum(amax, 1e-30), 0.0)
    wm = w < KW3
    tl.store(q_row + 10 * KW3 + w, scale.to(tl.int32, bitcast=True), mask=wm)
    for p in tl.static_range(2):
        xsum = tl.zeros([BLOCK_W], tl.int32)
        for i in tl.static_range(5):
            xa = _q3_slot_x(x_row, nw_ptr, w, 2 * p, i, KW3, K, inv, norm_offset, G, NBG, NORM, NORM_QWEN3)
            xb = _q3_slot_x(x_row, nw_ptr, w, 2 * p + 1, i, KW3, K, inv, norm_offset, G, NBG, NORM, NORM_QWEN3)
            qa = tl.minimum(tl.maximum(tl.floor(xa * rcp + 0.5), -127.0), 127.0).to(tl.int32)
            qb = tl.minimum(tl.maximum(tl.floor(xb * rcp + 0.5), -127.0), 127.0).to(tl.int32)
            xsum += qa + qb
            tl.store(q_row + (5 * p + i) * KW3 + w, (qa & 0xFFFF) | (qb << 16), mask=wm)
        tl.store(q_row + (11 + p) * KW3 + w, xsum, mask=wm)


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
def _gemv_dot_kernel(
    x_ptr, stride_xm, nw_ptr,
    w_ptr, s_ptr, w2_ptr, s2_ptr,
    r_ptr, stride_rm, y_ptr, stride_ym,
    part_ptr, cnt_ptr,
    M, N, K, KW, NG, eps, norm_offset,
    G: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
    NORM: tl.constexpr, NORM_QWEN3: tl.constexpr, DUAL: tl.constexpr, RESIDUAL: tl.constexpr,
    IEEE: tl.constexpr,
):
    """Mat-vec on tensor cores: all (<= 16) activation rows x BLOCK_N weight rows per program,
    one scale group per step: words -> shift/mask -> magic-float (c - 1) -> tl.dot."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    offs_g = tl.arange(0, G)
    xdt = x_ptr.dtype.element_ty
    inv_rms = tl.full([BLOCK_M], 1.0, tl.float32)
    if NORM:
        ss = tl.zeros([BLOCK_M, G], tl.float32)
        for k0 in range(0, K, G):
            xv = tl.load(x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_g)[None, :], mask=m_mask[:, None],
                         other=0.0).to(tl.float32)
            ss += xv * xv
        inv_rms = tl.rsqrt(tl.sum(ss, axis=1) / K + eps)
    n_groups = NG
    kw_total = KW
    per_split = tl.cdiv(n_groups, SPLIT_K)
    g0 = pid_k * per_split
    g1 = tl.minimum(g0 + per_split, n_groups)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc2 = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    sh = tl.arange(0, 16) * 2
    wcol = tl.arange(0, G // 16)
    for g in range(g0, g1):
        kk = g * G + offs_g
        xv = tl.load(x_ptr + offs_m[:, None] * stride_xm + kk[None, :], mask=m_mask[:, None], other=0.0)
        if NORM:
            h = xv.to(tl.float32) * inv_rms[:, None]
            nwv = tl.load(nw_ptr + kk).to(tl.float32)[None, :]
            if NORM_QWEN3:
                xv = (h.to(xdt).to(tl.float32) * nwv).to(xdt)
            else:
                xv = (h * (nwv + norm_offset)).to(xdt)
        widx = offs_n[:, None] * kw_total + (g * (G // 16) + wcol)[None, :]
        words = tl.load(w_ptr + widx, mask=n_mask[:, None], other=0, eviction_policy="evict_first")
        c = (words[:, :, None] >> sh[None, None, :]) & 3
        wf = (c | 0x4B000000).to(tl.float32, bitcast=True) - 8388609.0  # c - 1, exact
        wt = tl.trans(tl.reshape(wf, [BLOCK_N, G])).to(xdt)
        if IEEE:
            part = tl.dot(xv, wt, input_precision="ieee")
        else:
            part = tl.dot(xv, wt)
        sc = tl.load(s_ptr + offs_n * n_groups + g, mask=n_mask, other=0.0).to(tl.float32)
        acc += part * sc[None, :]
        if DUAL:
            words2 = tl.load(w2_ptr + widx, mask=n_mask[:, None], other=0, eviction_policy="evict_first")
            c2 = (words2[:, :, None] >> sh[None, None, :]) & 3
            wf2 = (c2 | 0x4B000000).to(tl.float32, bitcast=True) - 8388609.0
            wt2 = tl.trans(tl.reshape(wf2, [BLOCK_N, G])).to(xdt)
            if IEEE:
                part2 = tl.dot(xv, wt2, input_precision="ieee")
            else:
                part2 = tl.dot(xv, wt2)
            sc2 = tl.load(s2_ptr + offs_n * n_groups + g, mask=n_mask, other=0.0).to(tl.float32)
            acc2 += part2 * sc2[None, :]

    mask = m_mask[:, None] & n_mask[None, :]
    ydt = y_ptr.dtype.element_ty
    NP = 2 * N if DUAL else N
    if SPLIT_K > 1:
        pbase = part_ptr + pid_k * M * NP + offs_m[:, None] * NP + offs_n[None, :]
        tl.store(pbase, acc, mask=mask)
        if DUAL:
            tl.store(pbase + N, acc2, mask=mask)
        tl.debug_barrier()
        arrived = tl.atomic_add(cnt_ptr + pid_n, 1)
        if arrived == SPLIT_K - 1:
            acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            acc2 = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            for s in tl.static_range(SPLIT_K):
                pb = part_ptr + s * M * NP + offs_m[:, None] * NP + offs_n[None, :]
                acc += tl.load(pb, mask=mask, other=0.0, cache_modifier=".cg")
                if DUAL:
                    acc2 += tl.load(pb + N, mask=mask, other=0.0, cache_modifier=".cg")
            out = acc
            if DUAL:
                gg = acc.to(ydt).to(tl.float32)
                out = gg / (1.0 + tl.exp(-gg)) * acc2.to(ydt).to(tl.float32)
            if RESIDUAL:
                rr = tl.load(r_ptr + offs_m[:, None] * stride_rm + offs_n[None, :], mask=mask, other=0.0)
                out = out.to(ydt).to(tl.float32) + rr.to(tl.float32)
            tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], out.to(ydt), mask=mask)
            tl.atomic_xchg(cnt_ptr + pid_n, 0)
    else:
        out = acc
        if DUAL:
            gg = acc.to(ydt).to(tl.float32)
            out = gg / (1.0 + tl.exp(-gg)) * acc2.to(ydt).to(tl.float32)
        if RESIDUAL:
            rr = tl.load(r_ptr + offs_m[:, None] * stride_rm + offs_n[None, :], mask=mask, other=0.0)
            out = out.to(ydt).to(tl.float32) + rr.to(tl.float32)
        tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], out.to(ydt), mask=mask)


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


# ---------------------------------------------------------------------------------------------
# launch configuration: measured once per shape on the GPU, cached (and loadable from JSON)
# ---------------------------------------------------------------------------------------------

# (BLOCK_N, BLOCK_K, SPLIT_K, num_warps)
_GEMV_CANDIDATES = [(8, 1024, 1, 4), (8, 1024, 4, 4)]
# prepared-x variant (one tiny permute/normalise launch first): ("xp", BLOCK_N, BLOCK_K, SPLIT_K, warps)
_XP_CANDIDATES = [("xp", 8, 1024, 1, 4), ("xp", 16, 1024, 1, 8), ("xp", 16, 512, 1, 4)]
# same with 4^-j pre-scaled x (3 instructions per weight); not yet timed on a GPU when written
# (long BLOCK_K: a 4096-wide row is one iteration, so no program waits on its own next load)
_X3_CANDIDATES = [("x3", 8, 1024, 1, 4), ("x3", 16, 1024, 1, 8), ("x3", 16, 512, 1, 4), ("x3", 32, 512, 1, 8),
                  ("x3", 8, 1024, 4, 4), ("x3", 16, 1024, 4, 8), ("x3", 4, 4096, 1, 4), ("x3", 8, 4096, 1, 8),
                  ("x3", 8, 2048, 1, 4)]
# tensor-core mat-vec: ("dot", BLOCK_N, 0, SPLIT_K, num_warps); t2 only, any M <= 16
_DOT_CANDIDATES = [("dot", 64, 0, 1, 4), ("dot", 128, 0, 1, 4)]
# default tuning set (each candidate costs a compile on a machine's first run); TERNARY_KERNELS_TUNE=full
# (the bench) times every candidate above
_QUICK_GEMV = [(8, 1024, 1, 4), ("xp", 8, 1024, 1, 4), ("xp", 16, 512, 1, 4), ("x3", 8, 1024, 1, 4),
               ("x3", 4, 4096, 1, 4), ("dot", 128, 0, 1, 4)]
# int8 activations + dp4a (W2A8): ("q8", BLOCK_N, BLOCK_K, SPLIT_K, warps); used only when decode
# activations are "int8" (see set_decode_activations)
_Q8_CANDIDATES = [("q8", 2, 4096, 1, 2), ("q8", 4, 4096, 1, 2), ("q8", 4, 4096, 1, 4), ("q8", 8, 2048, 1, 4),
                  ("q8", 8, 1024, 1, 4), ("q8", 16, 1024, 1, 8), ("q8", 16, 512, 1, 4), ("q8", 4, 2048, 1, 2),
                  ("q8", 8, 4096, 1, 8), ("q8", 32, 512, 1, 8), ("q8", 8, 1024, 4, 4), ("q8", 4, 1024, 3, 4),
                  ("q8", 16, 256, 1, 4)]
# the same with 4-word chunks (scale per chunk, convert-free offset; G >= 64): ("q8c", BLOCK_N, BLOCK_K, ...)
_Q8C_CANDIDATES = [("q8c", 4, 4096, 1, 2), ("q8c", 2, 4096, 1, 2), ("q8c", 8, 1024, 1, 4), ("q8c", 4, 2048, 1, 2),
                   ("q8c", 8, 2048, 1, 4), ("q8c", 4, 4096, 1, 4), ("q8c", 8, 4096, 1, 4), ("q8c", 16, 512, 1, 4),
                   ("q8c", 16, 1024, 1, 8), ("q8c", 2, 8192, 1, 2), ("q8c", 4, 8192, 1, 4), ("q8c", 8, 1024, 4, 4),
                   ("q8c", 4, 1024, 3, 4)]
# persistent (a few programs per SM walk the row tiles, next tile loaded while computing this one):
# ("q8p", BLOCK_N, BLOCK_K, programs per SM, warps); BLOCK_K 0 = a whole row per step, as a power-of-two block
# of words plus a power-of-two tail (K = 5120: 256 + 64 words). One-warp programs (the last two) reduce each row
# inside a warp (no shared-memory step) and spend fewer instructions per weight word: measured in the 8B and 27B
# decode steps on the H200 (2026-12-03) they won for the SwiGLU and normalised-input projections
_Q8P_CANDIDATES = [("q8p", 2, 4096, 8, 2), ("q8p", 4, 4096, 4, 2), ("q8p", 4, 4096, 8, 2), ("q8p", 2, 4096, 16, 2),
                   ("q8p", 8, 2048, 4, 4), ("q8p", 4, 2048, 8, 2), ("q8p", 8, 1024, 4, 4), ("q8p", 4, 4096, 4, 4),
                   ("q8p", 8, 4096, 2, 4), ("q8p", 8, 4096, 4, 8), ("q8p", 2, 8192, 8, 4), ("q8p", 4, 8192, 4, 4),
                   ("q8p", 16, 1024, 4, 8), ("q8p", 2, 2048, 16, 2), ("q8p", 8, 1024, 4, 2),
                   ("q8p", 2, 0, 8, 2), ("q8p", 4, 0, 8, 2), ("q8p", 4, 0, 4, 2), ("q8p", 2, 0, 8, 4),
                   ("q8p", 4, 0, 4, 4), ("q8p", 8, 0, 4, 4), ("q8p", 2, 0, 16, 1), ("q8p", 2, 0, 8, 1)]
# the same quantising x itself in every program (no quantisation launch; whole rows): ("q8px", BLOCK_N, 0, ...).
# Full tuning only: on the H200 (2026-12-03) the re-measured 8B and 27B steps picked it for none of their shapes
# (every program redoing the quantisation costs more than the launch it saves there)
_Q8PX_CANDIDATES = [("q8px", 2, 0, 8, 2), ("q8px", 4, 0, 8, 2), ("q8px", 4, 0, 4, 4), ("q8px", 2, 0, 8, 4),
                    ("q8px", 2, 0, 4, 2), ("q8px", 8, 0, 4, 4), ("q8px", 4, 0, 4, 2), ("q8px", 2, 0, 16, 2)]
# (the full-tune winners on the H200 for Bonsai-8B shapes come first: small programs, many loads in flight)
_QUICK_Q8 = [("q8", 2, 4096, 1, 2), ("q8", 4, 4096, 1, 2), ("q8", 4, 2048, 1, 2), ("q8", 8, 1024, 1, 4),
             ("q8", 4, 4096, 1, 4), ("q8", 16, 512, 1, 4), ("q8c", 4, 4096, 1, 2), ("q8c", 2, 4096, 1, 2),
             ("q8c", 8, 1024, 1, 4), ("q8c", 4, 2048, 1, 2), ("q8p", 2, 4096, 8, 2), ("q8p", 4, 4096, 4, 2),
             ("q8p", 4, 4096, 8, 2), ("q8p", 8, 2048, 4, 4), ("q8p", 8, 1024, 4, 2), ("q8p", 2, 0, 8, 2),
             ("q8p", 4, 0, 8, 2), ("q8p", 2, 0, 8, 4), ("q8p", 4, 0, 4, 4), ("q8p", 2, 0, 16, 1), ("q8p", 2, 0, 8, 1)]
Q8_PLANES = 7  # int32 rows per x row written by _quant_x_kernel (the kernels spell it out as 7)
# int8 activation values per scale: a word pair, whose integer dots _q8p_dot adds before one float step (the kernels
# spell it out as pairs); the pair must lie inside one weight group, and every word block the launchers pick is pairs
INT8_ACT_BLOCK = 32
_ACT_WORDS = INT8_ACT_BLOCK // 16
# int8 activations for t3 weights (dp2a on in-register base-3 digits): ("q3", BLOCK_N, BLOCK_W, SPLIT_K,
# warps) with BLOCK_W in int32 words of codes (20 weights each); int8 mode, t3 layouts that _q3_ok accepts
_Q3_CANDIDATES = [("q3", 2, 256, 1, 2), ("q3", 4, 128, 1, 2), ("q3", 4, 256, 1, 4), ("q3", 8, 64, 1, 4),
                  ("q3", 8, 128, 1, 4), ("q3", 16, 64, 1, 4), ("q3", 2, 512, 1, 4), ("q3", 2, 128, 2, 2),
                  ("q3", 4, 128, 2, 4), ("q3", 8, 128, 4, 4), ("q3", 16, 128, 1, 8), ("q3", 4, 64, 3, 2),
                  ("q3", 16, 64, 2, 4), ("q3", 32, 32, 1, 4), ("q3", 32, 32, 2, 4)]
_QUICK_Q3 = [("q3", 2, 256, 1, 2), ("q3", 4, 128, 1, 2), ("q3", 8, 64, 1, 4), ("q3", 2, 128, 2, 2),
             ("q3", 16, 64, 1, 4)]
_INTERPRET_GEMV = (16, 64, 1, 4)
_INTERPRET_Q3 = ("q3", 16, 16, 2, 4)  # small tiles for the interpreter tests (split-K exercised)
ACTIVATION_MODES = ("int8", "exact")
_decode_activations = os.environ.get("TERNARY_DECODE_ACTIVATIONS", "int8")
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
_MM_CANDIDATES = [(64, 64, 4), (128, 64, 8), (64, 128, 8), (128, 128, 8)]  # (BLOCK_M, BLOCK_N, warps)

_tuned: dict[str, tuple] = {}
_lock = threading.Lock()
_counters: dict[tuple[torch.device, str], torch.Tensor] = {}


def _key(*parts: object) -> str:
    return "|".join(str(p) for p in parts)


def load_tuned(path: str | os.PathLike) -> int:
    """Merge launch configs measured earlier (``dump_tuned``) so the first call needs no tuning."""
    data = json.loads(Path(path).read_text())
    with _lock:
        for k, v in data.items():
            _tuned.setdefault(k, tuple(v) if isinstance(v, list) else v)
    return len(data)


def dump_tuned() -> dict[str, object]:
    with _lock:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in _tuned.items()}


TUNE_CACHE_ENV = "TERNARY_KERNELS_CACHE"  # folder for this machine's measured configs; "off" disables


def tuned_cache_file(gpu_name: str, root: str | os.PathLike | None = None) -> Path:
    """This machine's measured launch configs for one GPU model and Triton version.

    Why: timing every new shape costs about a minute on a 27B's first answer; remembering the
    winners makes every later start as fast as a GPU with a shipped file. The folder is
    ``$TERNARY_KERNELS_CACHE``, else ``$TERNARY_CHAT_HOME/cache/kernels``, else the OS cache folder.
    """
    if root is None:
        root = os.environ.get(TUNE_CACHE_ENV)
    if root is None:
        home = os.environ.get("TERNARY_CHAT_HOME")
        if home:
            root = Path(home).expanduser() / "cache" / "kernels"
        else:
            try:
                import platformdirs

                root = Path(platformdirs.user_cache_dir("ternary-chat", appauthor=False)) / "kernels"
            except ImportError:  # the runtime alone (no app dependencies installed)
                root = Path.home() / ".cache" / "ternary-chat" / "kernels"
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in gpu_name.lower().replace(" ", "-"))
    return Path(root) / f"{slug}-triton{triton.__version__}.json"


def _user_tuned_file() -> Path | None:
    if INTERPRET or not torch.cuda.is_available() or os.environ.get(TUNE_CACHE_ENV) == "off":
        return None
    return tuned_cache_file(torch.cuda.get_device_name())


def save_tuned(path: str | os.PathLike) -> None:
    """Write every known config to ``path`` atomically (a crash never leaves half a file)."""
    from runtime.atomic import write_json_atomic

    write_json_atomic(path, dump_tuned())


def _remember(key: str, value: tuple) -> None:
    """Keep a freshly measured config and add it to this machine's cache file (best effort)."""
    with _lock:
        _tuned[key] = value
    try:
        f = _user_tuned_file()
        if f is not None:
            save_tuned(f)
    except OSError:  # a read-only or full cache folder only costs re-tuning next time
        pass


def _device_tuned_file() -> Path | None:
    """Shipped launch configs for this GPU model, unless ``TERNARY_KERNELS_RETUNE=1`` asks to measure."""
    if INTERPRET or not torch.cuda.is_available() or os.environ.get("TERNARY_KERNELS_RETUNE") == "1":
        return None
    name = torch.cuda.get_device_name().lower().replace(" ", "-")
    p = TUNED_DIR / f"{name}.json"
    return p if p.exists() else None


def _counter_buffer(device: torch.device, n: int, owner: str = "gemv") -> torch.Tensor:
    """Zeroed int32 arrival counters for in-launch split reductions; kernels reset what they use."""
    buf = _counters.get((device, owner))
    if buf is None or buf.numel() < n:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("Triton kernels: call each shape once before CUDA-graph capture (warm-up)")
        buf = torch.zeros(max(n, 1 << 20 if owner == "gemv" else 1024), dtype=torch.int32, device=device)
        _counters[(device, owner)] = buf
    return buf


def _flush_bytes(dev: torch.device) -> int:
    """Twice the L2 (16..96 MiB): enough writes to evict whatever the timed kernel left there."""
    l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 48 << 20) or (48 << 20)
    return max(16 << 20, min(96 << 20, 2 * l2))


def _bench(fn) -> float:
    """ms per call of ``fn`` with a cold L2, without Python launch cost: CUDA graphs of
    (flush, fn) x R minus flush x R. Plain do_bench would time the ~10 us Triton launch.
    The flush buffer lives only for the measurement, so tuning leaves no VRAM behind."""
    dev = torch.device("cuda", torch.cuda.current_device())
    with torch.inference_mode(False):  # tuned inside inference_mode, zeroed inside the graphs
        buf = torch.empty(_flush_bytes(dev), dtype=torch.uint8, device=dev)
    fn()
    torch.cuda.synchronize()
    reps = 8
    graphs = []
    for with_fn in (True, False):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                buf.zero_()
                if with_fn:
                    fn()
        graphs.append(g)
    times = []
    for g in graphs:
        g.replay()
        ts = []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        times.append(sorted(ts)[2])
    return max(times[0] - times[1], 1e-6) / reps


# ---------------------------------------------------------------------------------------------
# functional API
# ---------------------------------------------------------------------------------------------

def _check(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, group_size: int, encoding: str) -> tuple[int, int]:
    n, groups = scales.shape
    k = groups * group_size
    if x.shape[-1] != k:
        raise ValueError(f"x has {x.shape[-1]} features, weight expects {k}")
    if encoding == T2:
        if group_size % 16 or codes.shape != (n, k // 4):
            raise ValueError(f"t2 codes must be uint8[{n}, {k // 4}] with group size % 16 == 0")
    elif encoding == T3:
        if codes.shape != (n, groups * t3_bytes_per_group(group_size)):
            raise ValueError("t3 codes have the wrong shape")
    else:
        raise ValueError(f"unknown encoding {encoding!r}")
    if codes.dtype != torch.uint8 or scales.dtype != torch.float16:
        raise ValueError("codes must be uint8 and scales float16")
    if not (codes.is_contiguous() and scales.is_contiguous()):
        raise ValueError("codes and scales must be contiguous")
    if group_size & (group_size - 1):
        raise ValueError("group size must be a power of two for the Triton kernels")
    return n, k


def is_mapped(t: torch.Tensor) -> bool:
    """A weight outside device memory, i.e. pinned host memory the kernels read over the bus
    (``runtime.offload`` mapped mode); in the interpreter every tensor is on the CPU, none mapped."""
    return not INTERPRET and t.device.type != "cuda"


def _device_copies(device: torch.device, *tensors: torch.Tensor | None) -> list[torch.Tensor | None] | None:
    """Device copies of the mapped ones among ``tensors`` (others as given), for tuning only: a
    launch config is timed once per shape, so the copy lives for a few milliseconds. ``None`` when
    the device has no room for it (e.g. a mapped LM head larger than what the plan keeps free)."""
    try:
        return [t.to(device) if t is not None and is_mapped(t) else t for t in tensors]
    except torch.cuda.OutOfMemoryError:
        return None


def _tensors_to_time(device: torch.device, *tensors: torch.Tensor | None) -> list[torch.Tensor | None] | None:
    """What a launch config is timed on, or ``None`` when it cannot be timed: inside a graph capture
    (the graph's eager warm-up has tuned it), or a mapped matrix without room for a device copy. A
    mapped weight is timed on a copy: timed in place it would time PCIe, and a config picked for the
    bus could round differently from the one the same shape gets when resident, so the output would
    depend on the VRAM cap."""
    if torch.cuda.is_current_stream_capturing():
        return None
    return _device_copies(device, *tensors)


def _as_rows(x: torch.Tensor) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


def _splitk_buffers(sk: int, m: int, n: int, dual: bool, tiles: int, y2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 partials and arrival counters for an in-launch split-K reduction (``y2`` stands in,
    unused, when there is a single split)."""
    if sk == 1:
        return y2, y2
    part = torch.empty(sk * m * n * (2 if dual else 1), dtype=torch.float32, device=y2.device)
    return part, _counter_buffer(y2.device, tiles)


def _gemv_q8_launch(x2, nw, w, s, w2, s2, r2, y2, n, k, g, eps, norm_offset, dual, cfg, qx=None):
    kind, bn, bk, sk, warps = cfg
    m = x2.shape[0]
    kw = k // 16
    gdc = pdl.launch_options(x2.device)
    norm = dict(NORM=nw is not None, NORM_QWEN3=norm_offset == 0.0, NORM_BLOCK=min(4096, triton.next_power_of_2(k)))
    if kind == "q8px":  # the mat-vec quantises x itself: no buffer, no launch
        qx = y2
    elif qx is not None and nw is None:  # x's producer wrote its int8 planes already (quant_x_planes)
        if qx.dtype != torch.int32 or qx.numel() < m * Q8_PLANES * kw:
            raise ValueError(f"pre-quantised x must be int32 [{m}, {Q8_PLANES} * K/16]")
    else:
        qx = torch.empty(m, Q8_PLANES * kw, dtype=torch.int32, device=x2.device)
        qw = min(64, triton.next_power_of_2(kw))  # >= _ACT_WORDS (kw is): whole activation blocks
        _quant_x_kernel[(m, triton.cdiv(kw, qw))](
            x2, x2.stride(0), nw if nw is not None else x2, qx, k, kw, float(eps), float(norm_offset),
            BLOCK_W=qw, num_warps=4, **norm, **gdc)
    n_tiles = triton.cdiv(n, bn)
    persistent = kind in ("q8p", "q8px")
    part, cnt = _splitk_buffers(1 if persistent else sk, m, n, dual, m * n_tiles, y2)
    wv = w.view(torch.int32)
    args = (qx, wv, s, w2.view(torch.int32) if dual else wv, s2 if dual else s,
            r2 if r2 is not None else y2, r2.stride(0) if r2 is not None else 0, y2, y2.stride(0),
            part, cnt, m, n, kw, k // g)
    common = dict(WPG=g // 16, BLOCK_N=bn, SPLIT_K=sk, DUAL=dual, RESIDUAL=r2 is not None,
                  USE_ASM=not INTERPRET, num_warps=warps, **gdc)
    if kind == "q8c":  # chunks of 4 words (64 weights)
        bc = max(1, bk // 64)
        _gemv_q8c_kernel[(n_tiles, m, sk)](*args, BLOCK_C=bc, EVEN_K=(kw // 4) % bc == 0, **common)
    elif persistent:  # the third field is programs per SM, not a K split
        common.pop("SPLIT_K")
        progs = min(n_tiles, _sm_count(x2.device) * sk)
        xargs = (x2, x2.stride(0), nw if nw is not None else x2, k, float(eps), float(norm_offset))
        whole = bk == 0 or kind == "q8px"
        # whole rows: a power of two of words, then the rest rounded up to a power of two; else BLOCK_K blocks
        bw = 1 << (kw.bit_length() - 1) if whole else max(_ACT_WORDS, bk // 16)
        tail = triton.next_power_of_2(kw - bw) if whole and kw > bw else 0
        _gemv_q8p_kernel[(progs, m)](*args[:9], *args[11:], *xargs, BLOCK_W=bw, TAIL=tail, ONE_K=whole or bw >= kw,
                                     EVEN_K=whole or kw % bw == 0, EVEN_T=not tail or tail == kw - bw, QUANT_X=kind == "q8px",
                                     **norm, **common)
    else:
        bw = max(_ACT_WORDS, bk // 16)
        _gemv_q8_kernel[(n_tiles, m, sk)](*args, BLOCK_W=bw, EVEN_K=kw % bw == 0, **common)


_SM_COUNT: dict[int, int] = {}


def _sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (the persistent mat-vec sizes its grid by them); 3 under
    the interpreter, so its tests walk several tiles per program with an uneven last round."""
    if device.type != "cuda":
        return 3
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNT[index]


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
    if cfg[0] in ("q8", "q8c", "q8p", "q8px"):
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
    if cfg[0] == "dot":
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
    _, bn, _, sk, warps = cfg
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
        IEEE=x2.dtype == torch.float32, num_warps=warps,
    )


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
    cfg = _tuned.get(key)
    if cfg is not None:
        return cfg
    m = x2.shape[0]
    cands: list[tuple] = []

    def fits(c: tuple) -> bool:
        if c[0] in ("q8p", "q8px"):  # at least one tile per program
            return m * triton.cdiv(n, c[1]) >= 64
        return c[3] <= triton.cdiv(k, c[2]) and m * triton.cdiv(n, c[1]) * c[3] >= 64

    if int8:
        cands += [c for c in _Q8_CANDIDATES + (_Q8C_CANDIDATES if g >= 64 else []) + _Q8P_CANDIDATES
                  + _Q8PX_CANDIDATES if fits(c)]
    if q3:
        kw3 = (k // g) * t3_bytes_per_group(g) // 4
        cands += [c for c in _Q3_CANDIDATES if c[3] <= triton.cdiv(kw3, c[2]) and m * triton.cdiv(n, c[1]) * c[3] >= 64]
    if encoding == T2 and g >= 16:
        # prepared-x variants only: the plain FMA kernel (x re-read and converted per weight word)
        # measured 4x slower inside a real decode step than alone (o_proj 38 vs 9 us, H200)
        cands += [c for c in _XP_CANDIDATES + _X3_CANDIDATES if fits(c)]
        cands += [c for c in _DOT_CANDIDATES if c[3] <= k // g]
    else:
        for bn, bk, sk, warps in _GEMV_CANDIDATES:
            n_kb = triton.cdiv(k, bk)
            if sk > n_kb or m * triton.cdiv(n, bn) * sk < 64:
                continue
            cands.append((bn, bk, sk, warps))
    if os.environ.get("TERNARY_KERNELS_TUNE") != "full":
        cands = [c for c in cands if c in _QUICK_GEMV or c in _QUICK_Q8 or c in _QUICK_Q3] or cands
    if not cands:
        cands = [(16, 256, 1, 4)]
    copies = _tensors_to_time(x2.device, w, s, w2, s2)
    if copies is None:  # the first candidate, not remembered (a resident twin of this shape still tunes)
        return cands[0]
    w, s, w2, s2 = copies
    y = torch.empty(m, n, dtype=x2.dtype, device=x2.device)
    best, best_t = cands[0], float("inf")
    for cfg in cands:
        def run(cfg=cfg):
            _gemv_launch(x2, nw, w, s, w2, s2, r2, y, n, k, g, encoding, eps, norm_offset, dual, cfg)
        try:
            t = _bench(run)
        except Exception:  # a config the compiler rejects (e.g. out of resources) is skipped
            continue
        if t < best_t:
            best, best_t = cfg, t
    if best_t == float("inf"):  # nothing could be timed (e.g. no room for the L2-flush buffer): not remembered
        return best
    _remember(key, best)
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
    producers that quantise their own output (``triton_attention.decode_attention``'s ``q8_out``)."""
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
    choice = _tuned.get(key)
    if choice is not None:
        return (choice[0], tuple(choice[1]) if choice[1] else None)
    copies = _tensors_to_time(x2.device, codes, scales)
    if copies is None:  # dequantize (a mapped matrix's bytes then cross the bus once); not remembered
        return ("dequant", None)
    codes, scales = copies
    y = torch.empty_like(y2)
    best, best_t = ("dequant", None), _bench(lambda: _dequant_matmul(x2, codes, scales, group_size, encoding, y, None))
    for cfg in _MM_CANDIDATES:
        try:
            t = _bench(lambda cfg=cfg: _mm_launch(x2, codes, scales, group_size, encoding, y, None, cfg))
        except Exception:
            continue
        if t < best_t:
            best, best_t = ("mm", cfg), t
    _remember(key, (best[0], list(best[1]) if best[1] else None))
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


# ---------------------------------------------------------------------------------------------
# backend registration
# ---------------------------------------------------------------------------------------------

class TritonLinear(linear.LinearWeight):
    """Packed codes + fp16 scales on the GPU exactly as stored; every call reads them directly."""

    backend = "triton"

    def __init__(self, t: TernaryTensor, device: torch.device | str = "cuda") -> None:
        super().__init__(t)
        self.encoding = t.encoding
        self.register_buffer("codes", t.codes.to(device).contiguous(), persistent=False)
        self.register_buffer("scales", t.scales.to(device).contiguous(), persistent=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        return ternary_matmul(x, self.codes, self.scales, self.group_size, self.encoding, residual=residual)


def _register() -> None:
    if INTERPRET or torch.cuda.is_available():
        linear.BACKENDS.setdefault("triton", TritonLinear)
    try:
        files = [_device_tuned_file(), _user_tuned_file()]  # shipped configs win over this machine's quick ones
    except Exception:  # noqa: BLE001 - no cache location: kernels still work, they only re-tune
        files = [_device_tuned_file()]
    for f in files:
        if f is not None and f.exists():
            try:
                load_tuned(f)
            except (OSError, ValueError):  # a damaged cache file is ignored and rewritten by the next tuning
                pass


_register()
