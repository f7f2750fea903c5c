"""In-kernel building blocks for the packed ternary layouts and the int8 activation planes.

Weights are never repacked: the GPU buffers are the file's bytes. ``t2`` codes uint8 ``[N, K/4]`` are read as
int32 ``[N, K/16]`` (weight k at bits 2k of its word) and decoded with shift/mask and the "magic float" trick
``bitcast(c | 0x4B000000) - (2^23 + 1) == c - 1`` (no int->float convert); ``t3`` stores 5 trits per byte
(base 3) per group, decoded with exact float floor/div tricks or, for the int8 mat-vec, as int32 words whose
bytes are prescaled so that multiplying by 3 yields one trit per step (TQ1_0's trick). Scales fp16
``[N, K/G]``. This module also holds the x prologue (RMSNorm of x, fused into a mat-vec) and the kernels that
quantise x to int8 planes for ``dp4a`` / ``dp2a``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from runtime.kernels.triton.pdl import gdc_wait


@triton.jit
def _words_in_row(wk, KW, EVEN: tl.constexpr):
    """Which word indices ``wk`` lie in a row of KW words (all of them when the block is known to fit: EVEN)."""
    if EVEN:
        return wk >= 0
    return wk < KW


@triton.jit
def row_inv_rms(x_row, K, eps, BLOCK: tl.constexpr):
    """1 / RMS of one row from BLOCK-wide fp32 partial sums of squares (kernels that normalise the same row
    with the same BLOCK get the same bits)."""
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
def _quant_x_input(x_row, nw, kk, K, eps, norm_offset, NORM: tl.constexpr, NORM_QWEN3: tl.constexpr,
                   NORM_BLOCK: tl.constexpr):
    """The x values ``[kk]`` an int8 quantiser packs (after its PDL wait): fp32, RMS-normalised with weights ``nw``
    when NORM. Every program reduces the whole (small, L2-resident) row itself: no second launch."""
    xv = tl.load(x_row + kk, mask=kk < K, other=0.0)  # issued before the row reduction's loads
    inv = 1.0
    if NORM:
        inv = row_inv_rms(x_row, K, eps, NORM_BLOCK)
    return _norm_x(xv, nw, inv, norm_offset, NORM, NORM_QWEN3)


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
    xf = _quant_x_input(x_row, nw, kk, K, eps, norm_offset, NORM, NORM_QWEN3, NORM_BLOCK)  # [BLOCK_W, 16]
    store_quant_words(q_row, KW, w, w < KW, xf, BLOCK_W)


@triton.jit
def _quant_x_frag_kernel(x_ptr, stride_xm, nw_ptr, q_ptr, K, KW, R, eps, norm_offset, BLOCK_W: tl.constexpr,
                         NORM: tl.constexpr, NORM_QWEN3: tl.constexpr, NORM_BLOCK: tl.constexpr,
                         USE_GDC: tl.constexpr):
    """``_quant_x_kernel``'s int8 x (same values, bit for bit), stored in the order the ``mma.sync`` mat-vec
    (``_gemv_q8w_kernel``) reads its B fragments: per 32-value block kb and x row r (R rows a block), 8 words
    ``[plane j][word v of the block]`` at ``(kb * R + r) * 8 + 2 j + v``, then after all blocks' words, per (kb, r),
    the MMA's initial value (int32 bits of 1.5 * 2^23 minus the block's int8 sum) and the block's fp32 scale.

    Why: a warp's B fragment is 8 x rows at once; in the row-major planes each row is another cache line, so one
    fragment load cost ~16 L1 wavefronts, and the x side of a block ~56 against the weights' 16 (1.3-1.6x slower
    than ``q8m`` on the H100). In this order a fragment load spans 256 contiguous bytes."""
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_xm
    w = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    kk = w[:, None] * 16 + tl.arange(0, 16)[None, :]
    nw = _norm_weights(nw_ptr, kk, K, NORM)
    gdc_wait(USE_GDC)
    xf = _quant_x_input(x_row, nw, kk, K, eps, norm_offset, NORM, NORM_QWEN3, NORM_BLOCK)  # [BLOCK_W, 16]
    packed, scale, qsum = _quant_words(xf, BLOCK_W)  # [w, plane j]
    wm = w < KW
    kb = w // 2
    base = (kb * R + row) * 8 + w % 2
    tl.store(q_ptr + base[:, None] + 2 * tl.arange(0, 4)[None, :], packed, mask=wm[:, None])
    bq = tl.sum(tl.reshape(qsum, [BLOCK_W // 2, 2]), axis=1)  # per block
    bs, _ = tl.split(tl.reshape(scale, [BLOCK_W // 2, 2]))
    b = tl.program_id(1) * (BLOCK_W // 2) + tl.arange(0, BLOCK_W // 2)
    bm = b < KW // 2
    tail = (KW // 2) * R * 8 + (b * R + row) * 2
    tl.store(q_ptr + tail, 0x4B400000 - bq, mask=bm)
    tl.store(q_ptr + tail + 1, bs.to(tl.int32, bitcast=True), mask=bm)


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


Q8_PLANES = 7  # int32 rows per x row written by _quant_x_kernel (the kernels spell it out as 7)
# int8 activation values per scale: a word pair, whose integer dots _q8p_dot adds before one float step (the kernels
# spell it out as pairs); the pair must lie inside one weight group, and every word block the launchers pick is pairs
INT8_ACT_BLOCK = 32
_ACT_WORDS = INT8_ACT_BLOCK // 16
