"""Decode attention (one query token) over a static KV cache, split-KV flash-decoding style.

Why: at batch 1 a layer's attention has only ``kv_heads`` independent problems, far too few for
132 SMs, and its length changes every step. Each of ``NUM_SPLITS`` programs per KV head takes a
slice of the *live* length (read from a device tensor, so one captured CUDA graph serves every
step and the cost follows the live length, not the cache size); the last program of each head
to finish merges the partial (max, sum, acc) in a fixed order - one launch, deterministic.
All query heads of a GQA group share each K/V tile load (``tl.dot`` with the group padded to 16).
Optional int8 cache: per-token-per-head fp32 scales folded into scores and probabilities.
Batched decode (``slots``, continuous batching): B sequences in one launch, B * kv_heads programs per split,
each row reading its own slot's heads of a cache that stacks S slots and its own live length.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime import flags
from runtime.kernels.triton import pdl
from runtime.kernels.triton.launch import INTERPRET, _counter_buffer
from runtime.kernels.triton.packing import Q8_PLANES, store_quant_words
from runtime.kernels.triton.pdl import gdc_wait, prefetch_l2


@triton.jit
def _store_out(out, o_ptr, so_h, g_ptr, sg_h, qh, d, omask, GATED: tl.constexpr):
    """Store the attention output, times ``sigmoid(gate)`` for gated attention (Qwen3.5), rounded as the
    eager ``o * torch.sigmoid(gate)`` rounds: output, sigmoid and product each to the output dtype. Returns
    what it stored."""
    odt = o_ptr.dtype.element_ty
    out = out.to(odt)
    if GATED:
        g = tl.load(g_ptr + qh[:, None] * sg_h + d[None, :], mask=omask, other=0.0).to(tl.float32)
        sig = (1.0 / (1.0 + tl.exp(-g))).to(odt)
        out = (out.to(tl.float32) * sig.to(tl.float32)).to(odt)
    tl.store(o_ptr + qh[:, None] * so_h + d[None, :], out, mask=omask)
    return out


@triton.jit
def _split_keys(L, sp, NUM_SPLITS: tl.constexpr, BLOCK_S: tl.constexpr, MIN_PER: tl.constexpr):
    """Split ``sp``'s share of the live length ``L``: whole BLOCK_S tiles, at least MIN_PER keys per split
    (a short context then uses fewer splits: less to merge, and the programs past the end return at once).
    Returns (keys per split, first key, end key)."""
    per = tl.maximum(tl.cdiv(tl.cdiv(L, NUM_SPLITS), BLOCK_S) * BLOCK_S, MIN_PER)
    s_begin = sp * per
    return per, s_begin, tl.minimum(s_begin + per, L)


@triton.jit
def _prefetch_kv_l2(kc_ptr, vc_ptr, sc_h, sc_s, len_ptr, slot_ptr, D, NUM_SPLITS: tl.constexpr,
                    BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, MIN_PER: tl.constexpr, TILES: tl.constexpr,
                    LEN_OFFSET: tl.constexpr, ROWS: tl.constexpr, HKV: tl.constexpr):
    """Prefetch into L2 the K/V lines of the first ``TILES`` tiles of this split (the kernel's own share of the
    live length; read before the PDL wait, a length - or, batched, a slot - not yet final only prefetches other
    lines)."""
    hk = tl.program_id(0)
    if ROWS:  # the kernel's cache head and length of this program's row
        row = hk // HKV
        ch = tl.load(slot_ptr + row).to(tl.int64) * HKV + (hk - row * HKV)
        len_ptr += row
    else:
        ch = hk
    kbase = kc_ptr + ch * sc_h
    vbase = vc_ptr + ch * sc_h
    L = tl.load(len_ptr).to(tl.int32) + LEN_OFFSET
    per, s_begin, s_end = _split_keys(L, tl.program_id(1), NUM_SPLITS, BLOCK_S, MIN_PER)
    EPL: tl.constexpr = 1024 // kbase.dtype.element_ty.primitive_bitwidth  # elements per 128-byte line
    LINES: tl.constexpr = (BLOCK_D + EPL - 1) // EPL
    col = tl.arange(0, LINES) * EPL
    for t in tl.static_range(TILES):
        rows = s_begin + t * BLOCK_S + tl.arange(0, BLOCK_S)
        m = (rows < s_end)[:, None] & (col < D)[None, :]
        off = rows[:, None] * sc_s + col[None, :]
        prefetch_l2(kbase + off, m)
        prefetch_l2(vbase + off, m)


@triton.jit
def _decode_attn_kernel(
    q_ptr, sq_h, kc_ptr, vc_ptr, sc_h, sc_s, ks_ptr, vs_ptr, ss_h, len_ptr,
    o_ptr, so_h, g_ptr, sg_h, part_ptr, ml_ptr, cnt_ptr, slot_ptr, sm_scale, D, GROUP,
    NUM_SPLITS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
    MIN_PER: tl.constexpr, INT8: tl.constexpr, IEEE: tl.constexpr, GATED: tl.constexpr, USE_GDC: tl.constexpr,
    PREFETCH_TILES: tl.constexpr, GROUP_P2: tl.constexpr, LEN_OFFSET: tl.constexpr, DEFER: tl.constexpr,
    ROWS: tl.constexpr = False, HKV: tl.constexpr = 0,
):
    """ROWS (batched): program hk = row * HKV + j takes the row's query heads hk * GROUP.. (as unbatched), cache
    head ``slot_ptr[row] * HKV + j`` and length ``len_ptr[row]``. Off, ``slot_ptr`` is None (a constexpr): the
    unbatched program, unchanged."""
    hk = tl.program_id(0)
    sp = tl.program_id(1)
    if USE_GDC and PREFETCH_TILES > 0:  # launched early (PDL): this split's first K/V tiles into L2 meanwhile
        _prefetch_kv_l2(kc_ptr, vc_ptr, sc_h, sc_s, len_ptr, slot_ptr, D, NUM_SPLITS, BLOCK_D, BLOCK_S, MIN_PER,
                        PREFETCH_TILES, LEN_OFFSET, ROWS, HKV)
    gdc_wait(USE_GDC)
    if ROWS:
        row = hk // HKV
        ch = tl.load(slot_ptr + row).to(tl.int64) * HKV + (hk - row * HKV)
        lp = len_ptr + row
    else:
        ch = hk
        lp = len_ptr
    L = tl.load(lp).to(tl.int32) + LEN_OFFSET
    hs = tl.arange(0, BLOCK_H)
    hmask = hs < GROUP
    d = tl.arange(0, BLOCK_D)
    dmask = d < D
    qh = hk * GROUP + hs
    q = tl.load(q_ptr + qh[:, None] * sq_h + d[None, :], mask=hmask[:, None] & dmask[None, :], other=0.0)
    cdt = q.dtype
    per, s_begin, s_end = _split_keys(L, sp, NUM_SPLITS, BLOCK_S, MIN_PER)  # the same split the prefetch used
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    kbase = kc_ptr + ch * sc_h
    vbase = vc_ptr + ch * sc_h
    for s0 in range(s_begin, s_end, BLOCK_S):
        offs = s0 + tl.arange(0, BLOCK_S)
        smask = offs < s_end
        kvmask = smask[:, None] & dmask[None, :]
        k = tl.load(kbase + offs[:, None] * sc_s + d[None, :], mask=kvmask, other=0.0)
        v = tl.load(vbase + offs[:, None] * sc_s + d[None, :], mask=kvmask, other=0.0)
        if IEEE:
            sc = tl.dot(q, tl.trans(k.to(cdt)), input_precision="ieee")
        else:
            sc = tl.dot(q, tl.trans(k.to(cdt)))
        if INT8:
            sc = sc * tl.load(ks_ptr + ch * ss_h + offs, mask=smask, other=0.0)[None, :]
        sc = tl.where(smask[None, :], sc * sm_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(sc, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(sc - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if INT8:
            p = p * tl.load(vs_ptr + ch * ss_h + offs, mask=smask, other=0.0)[None, :]
        if IEEE:
            pv = tl.dot(p, v.to(tl.float32), input_precision="ieee")
        else:
            pv = tl.dot(p.to(cdt), v.to(cdt))
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    omask = hmask[:, None] & dmask[None, :]
    if NUM_SPLITS == 1 and not DEFER:
        out = acc / l_i[:, None]
        _store_out(out, o_ptr, so_h, g_ptr, sg_h, qh, d, omask, GATED)
    else:  # this split's partial (max, sum, acc); DEFER: _merge_splits_kernel merges (no atomic, no merge here)
        pidx = hk * NUM_SPLITS + sp
        tl.store(part_ptr + pidx * BLOCK_H * BLOCK_D + hs[:, None] * BLOCK_D + d[None, :], acc, mask=omask)
        tl.store(ml_ptr + pidx * 2 * BLOCK_H + hs, m_i, mask=hmask)
        tl.store(ml_ptr + pidx * 2 * BLOCK_H + BLOCK_H + hs, l_i, mask=hmask)
    if NUM_SPLITS > 1 and not DEFER:
        tl.debug_barrier()
        arrived = tl.atomic_add(cnt_ptr + hk, 1)
        if arrived == NUM_SPLITS - 1:
            # the merge reads only the GROUP real query rows (GROUP_P2 of them, not the BLOCK_H the dots pad to):
            # its unrolled loads then fit in registers instead of spilling (27B: 1.7 KB of stack before)
            n_active = tl.cdiv(L, per)
            hr = tl.arange(0, GROUP_P2)
            rmask = hr < GROUP
            rdmask = rmask[:, None] & dmask[None, :]
            mx = tl.full([GROUP_P2], float("-inf"), tl.float32)
            for s in tl.static_range(NUM_SPLITS):
                ok = (hr * 0 + s) < n_active
                ms = tl.load(ml_ptr + (hk * NUM_SPLITS + s) * 2 * BLOCK_H + hr, mask=ok & rmask,
                             other=float("-inf"), cache_modifier=".cg")
                mx = tl.maximum(mx, ms)
            mx = tl.where(rmask, mx, 0.0)
            tot_l = tl.zeros([GROUP_P2], tl.float32)
            tot = tl.zeros([GROUP_P2, BLOCK_D], tl.float32)
            for s in tl.static_range(NUM_SPLITS):
                ok = (hr * 0 + s) < n_active
                base = (hk * NUM_SPLITS + s) * 2 * BLOCK_H
                ms = tl.load(ml_ptr + base + hr, mask=ok & rmask, other=float("-inf"), cache_modifier=".cg")
                ls = tl.load(ml_ptr + base + BLOCK_H + hr, mask=ok & rmask, other=0.0, cache_modifier=".cg")
                a = tl.load(part_ptr + (hk * NUM_SPLITS + s) * BLOCK_H * BLOCK_D + hr[:, None] * BLOCK_D + d[None, :],
                            mask=ok[:, None] & rdmask, other=0.0, cache_modifier=".cg")
                f = tl.exp(ms - mx)
                tot_l += ls * f
                tot += a * f[:, None]
            out = tot / tl.where(rmask, tot_l, 1.0)[:, None]
            _store_out(out, o_ptr, so_h, g_ptr, sg_h, hk * GROUP + hr, d, rdmask, GATED)
            tl.atomic_xchg(cnt_ptr + hk, 0)


@triton.jit
def _merge_splits_kernel(
    part_ptr, ml_ptr, len_ptr, o_ptr, so_h, g_ptr, sg_h, q8_ptr, D, GROUP,
    NUM_SPLITS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
    MIN_PER: tl.constexpr, GATED: tl.constexpr, USE_GDC: tl.constexpr,
    LEN_OFFSET: tl.constexpr, ROWS: tl.constexpr = False, HKV: tl.constexpr = 0,
):
    """One query head per program: merge the split programs' partials (the same arithmetic, in the same order,
    as the attention's in-launch merge), store the output and its int8 planes for the o_proj
    (``store_quant_words``: the bits ``_quant_x_kernel`` makes of the stored row).

    Why a launch of its own: the in-launch merge waits for the last split program (an atomic round trip to L2)
    and then re-reads every partial — two dependent memory trips at the end of the attention, on the step's
    critical path. Here the attention ends with plain stores, and this launch takes the place of the o_proj's
    quantisation launch, which the step needs anyway; its programs wait (PDL) while the attention drains.
    ROWS (batched): query head qh belongs to row ``qh // (HKV * GROUP)``, whose length it reads and whose own
    planes it writes (``_quant_x_kernel``'s per-row layout, for the o_proj of B rows)."""
    qh = tl.program_id(0)
    hk = qh // GROUP
    r = qh - hk * GROUP
    gdc_wait(USE_GDC)
    if ROWS:
        row = hk // HKV
        lp = len_ptr + row
    else:
        lp = len_ptr
    L = tl.load(lp).to(tl.int32) + LEN_OFFSET
    per, _, _ = _split_keys(L, 0, NUM_SPLITS, BLOCK_S, MIN_PER)
    n_active = tl.cdiv(L, per)
    d = tl.arange(0, BLOCK_D)
    dmask = d < D
    one = tl.arange(0, 1)
    mx = tl.full([1], float("-inf"), tl.float32)
    for s in tl.static_range(NUM_SPLITS):
        ok = (one * 0 + s) < n_active
        ms = tl.load(ml_ptr + (hk * NUM_SPLITS + s) * 2 * BLOCK_H + r + one, mask=ok, other=float("-inf"))
        mx = tl.maximum(mx, ms)
    tot_l = tl.zeros([1], tl.float32)
    tot = tl.zeros([1, BLOCK_D], tl.float32)
    for s in tl.static_range(NUM_SPLITS):
        ok = (one * 0 + s) < n_active
        base = (hk * NUM_SPLITS + s) * 2 * BLOCK_H + r
        ms = tl.load(ml_ptr + base + one, mask=ok, other=float("-inf"))
        ls = tl.load(ml_ptr + base + BLOCK_H + one, mask=ok, other=0.0)
        a = tl.load(part_ptr + (hk * NUM_SPLITS + s) * BLOCK_H * BLOCK_D + r * BLOCK_D + d[None, :],
                    mask=ok[:, None] & dmask[None, :], other=0.0)
        f = tl.exp(ms - mx)
        tot_l += ls * f
        tot += a * f[:, None]
    out = _store_out(tot / tot_l[:, None], o_ptr, so_h, g_ptr, sg_h, qh + one, d, dmask[None, :], GATED)
    WPH: tl.constexpr = BLOCK_D // 16  # weight words per head (even: one activation scale per word pair)
    if ROWS:  # row's planes at q8_ptr + row * 7 * KW, KW = Hq * D / 16 words a plane
        kw = HKV * GROUP * WPH
        w = (qh - row * HKV * GROUP) * WPH + tl.arange(0, WPH)
        store_quant_words(q8_ptr + row * 7 * kw, kw, w, w >= 0, tl.reshape(out.to(tl.float32), [WPH, 16]), WPH)
    else:
        w = qh * WPH + tl.arange(0, WPH)
        store_quant_words(q8_ptr, tl.num_programs(0) * WPH, w, w >= 0, tl.reshape(out.to(tl.float32), [WPH, 16]),
                          WPH)


def _env_config(default: tuple[int, int, int | None, int], var: str) -> tuple[int, int, int | None, int]:
    env = flags.value(var)  # a dict lookup: cheap next to the launch, and a graph captures it once
    if env:
        v = [int(x) for x in env.split(":")]
        return v[0], v[1], v[2] or None, v[3] if len(v) > 3 else default[3]
    return default


MIN_SPLIT_KEYS = flags.integer("TERNARY_ATTN_MIN_SPLIT")
# K/V tiles per split program pulled into L2 before the PDL wait (0: none); read once at import
PREFETCH_TILES = flags.integer("TERNARY_ATTN_PREFETCH")

def _merge_warps() -> int:
    """Warps per program of the split merge (one query head: D values, a few loads each)."""
    return flags.integer("TERNARY_ATTN_MERGE_WARPS")


def _launch_defaults(dim: int) -> tuple[int, int, int | None, int]:
    """(block_s, num_warps, num_splits or None for :func:`default_num_splits`, min keys per split)
    for a head size.

    Why per head size: a [64 keys x 256] K tile plus its V tile is 64 KB of registers for four
    warps. Measured on the H200 (27B shape: 24 q / 4 KV heads x 256, 4000 keys, 32 splits,
    ``scripts/gpu/bench_attention.py``): 64 keys x 4 warps 19.6 us, 32 x 4 19.1 us, 32 x 8 15.8 us
    (64 splits: 31-54 us, the merge dominates). ``TERNARY_ATTN_CONFIG=block_s:warps:splits[:min_keys]``
    overrides it for head sizes above 128 (measurements; splits 0 = the default count), and
    ``TERNARY_ATTN_CONFIG_NARROW`` for head sizes up to 128;
    ``TERNARY_ATTN_MIN_SPLIT`` sets the minimum keys per split for every head size.
    """
    if dim <= 128:
        return _env_config((64, 4, None, MIN_SPLIT_KEYS), "TERNARY_ATTN_CONFIG_NARROW")
    return _env_config((32, 8, None, MIN_SPLIT_KEYS), "TERNARY_ATTN_CONFIG")


def default_num_splits(kv_heads: int, max_positions: int, block_s: int = 64) -> int:
    """About one program per SM of a 132-SM GPU (more splits make the merge the bottleneck)."""
    if INTERPRET:
        return 4
    target = triton.next_power_of_2(max(1, 132 // max(kv_heads, 1)) + 1) // 2
    return max(1, min(64, target, triton.cdiv(max_positions, block_s)))


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, seq_len: torch.Tensor,
                     sm_scale: float, *, k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None,
                     out: torch.Tensor | None = None, num_splits: int | None = None,
                     block_s: int | None = None, num_warps: int | None = None,
                     min_split_keys: int | None = None, gate: torch.Tensor | None = None,
                     len_offset: int = 0, q8_out: torch.Tensor | None = None, slots: torch.Tensor | None = None,
                     kv_heads: int | None = None) -> torch.Tensor:
    """``softmax(q Kᵀ · sm_scale) V`` for ``q [Hq, D]`` over cache positions ``[0, seq_len[0] + len_offset)``
    (``len_offset=1`` with the step's position tensor itself saves the step a ``pos + 1`` launch).

    ``q8_out`` (int32 ``[Q8_PLANES * Hq * D / 16]``, from ``matvec.quant_x_planes``): the splits' partials
    are merged by a second launch (``_merge_splits_kernel``) that also writes the output's int8 planes there, for
    the o_proj mat-vec's ``x_int8`` — it replaces that mat-vec's quantisation launch, and the attention launch
    then ends without an atomic and a re-read of the partials. Needs a power-of-two head size of at least 32.

    ``min_split_keys``: each split program takes at least this many keys (rounded up to whole
    tiles), so short contexts use fewer of the ``num_splits`` programs. ``gate [Hq, D]`` (any head
    stride): the output is multiplied by ``sigmoid(gate)`` (Qwen3.5's gated attention) in the same launch.

    Batched decode, ``slots`` (int ``[B]``) with ``kv_heads`` (Hkv per sequence): q, gate and the output are
    ``[B * Hq, D]`` (row b's heads at ``b * Hq``), the caches ``[S * Hkv, max_pos, D]``; row b attends over heads
    ``slots[b] * Hkv + j`` for ``seq_len[b] + len_offset`` positions (``seq_len [B]``); ``q8_out`` gets each row's
    planes in ``matvec.quant_x_planes(B, Hq * D, ...)``'s layout."""
    hq, dim = q.shape  # batched: all rows' query heads
    if (slots is None) != (kv_heads is None):
        raise ValueError("batched decode attention needs both slots and kv_heads")
    if slots is not None:
        rows, hkv, max_pos = slots.numel(), int(kv_heads), k_cache.shape[1]
        if slots.shape != (rows,) or slots.dtype not in (torch.int32, torch.int64) or seq_len.shape != (rows,):
            raise ValueError("slots (int32/int64) and seq_len must both be [B]")
        if hkv < 1 or k_cache.shape[0] % hkv or hq % (rows * hkv):
            raise ValueError("batched: q [B * Hq, D] with Hq % kv_heads == 0 and caches [S * kv_heads, max_pos, D]")
        if k_cache.shape[2] != dim or v_cache.shape != k_cache.shape or k_cache.stride() != v_cache.stride():
            raise ValueError("caches [S * kv_heads, max_pos, D] with equal shapes and strides")
    else:
        rows = 1
        hkv, max_pos, _ = k_cache.shape
        if hq % hkv or k_cache.shape[2] != dim or v_cache.shape != k_cache.shape \
                or k_cache.stride() != v_cache.stride():
            raise ValueError("q [Hq, D] and caches [Hkv, max_pos, D] with Hq % Hkv == 0 and equal strides")
    progs = rows * hkv  # one program per (row, KV head) and split
    if q.stride(-1) != 1 or k_cache.stride(-1) != 1:
        raise ValueError("q and caches need a contiguous last dimension")
    int8 = k_cache.dtype == torch.int8
    if int8 and (k_scale is None or v_scale is None):
        raise ValueError("an int8 KV cache needs k_scale and v_scale")
    group = hq // progs
    block_h = max(16, triton.next_power_of_2(group))
    block_d = triton.next_power_of_2(dim)
    d_bs, d_warps, d_splits, d_min = _launch_defaults(block_d)
    block_s = block_s or (16 if INTERPRET else d_bs)
    splits = num_splits or d_splits or default_num_splits(progs, max_pos, block_s)
    num_warps = num_warps or d_warps
    min_keys = d_min if min_split_keys is None else min_split_keys
    min_per = triton.cdiv(max(min_keys, 1), block_s) * block_s
    if gate is not None and (gate.shape != (hq, dim) or gate.stride(-1) != 1):
        raise ValueError("the attention gate must be [Hq, D] with a contiguous last dimension")
    if out is None:
        out = torch.empty(hq, dim, dtype=q.dtype, device=q.device)
    defer = q8_out is not None
    if defer and (block_d != dim or dim % 32 or out.stride() != (dim, 1) or q8_out.dtype != torch.int32
                  or q8_out.numel() < Q8_PLANES * hq * dim // 16):
        raise ValueError("q8_out needs a power-of-two head size >= 32, a contiguous output and an int32 buffer "
                         "of Q8_PLANES * Hq * D / 16")
    if defer or splits > 1:  # the splits' partials (max, sum, acc), merged in this launch or by the merge launch
        part = torch.empty(progs * splits * block_h * block_d, dtype=torch.float32, device=q.device)
        ml = torch.empty(progs * splits * 2 * block_h, dtype=torch.float32, device=q.device)
        cnt = out if defer else _counter_buffer(q.device, progs, owner="attention")  # no arrival counter when deferred
    else:
        part = ml = cnt = out
    ks = k_scale if int8 else k_cache
    vs = v_scale if int8 else v_cache
    batched = dict(ROWS=slots is not None, HKV=hkv if slots is not None else 0)
    _decode_attn_kernel[(progs, splits)](
        q, q.stride(0), k_cache, v_cache, k_cache.stride(0), k_cache.stride(1), ks, vs,
        ks.stride(0) if int8 else 0, seq_len, out, out.stride(0), gate if gate is not None else out,
        gate.stride(0) if gate is not None else 0, part, ml, cnt, slots, float(sm_scale), dim, group,
        NUM_SPLITS=splits, BLOCK_H=block_h, BLOCK_D=block_d, BLOCK_S=block_s, MIN_PER=min_per, INT8=int8,
        IEEE=q.dtype == torch.float32, GATED=gate is not None, PREFETCH_TILES=PREFETCH_TILES,
        GROUP_P2=triton.next_power_of_2(group), LEN_OFFSET=int(len_offset), DEFER=defer, num_warps=num_warps,
        **batched, **pdl.launch_options(q.device),
    )
    if defer:
        _merge_splits_kernel[(hq,)](
            part, ml, seq_len, out, out.stride(0), gate if gate is not None else out,
            gate.stride(0) if gate is not None else 0, q8_out, dim, group,
            NUM_SPLITS=splits, BLOCK_H=block_h, BLOCK_D=block_d, BLOCK_S=block_s, MIN_PER=min_per,
            GATED=gate is not None, LEN_OFFSET=int(len_offset),
            num_warps=_merge_warps(), **batched, **pdl.launch_options(q.device))
    return out
