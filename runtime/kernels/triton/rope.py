"""q/k per-head RMSNorm + RoPE + KV-cache write, one Triton launch per attention layer and step.

Why: after the fused qkv mat-vec these are five tiny elementwise ops (two norms, two rotations,
a cache scatter); fused they cost one launch and one read of q/k/v. The write position comes from
a device tensor so the launch can be replayed from a CUDA graph at every step.
RoPE is HF's rotate-half form on the first ``rotary_dim`` dims (partial rotary for Qwen3.5);
the YaRN attention factor is already folded into the cos/sin tables (``RotaryTables``).
Batched decode (``slots``): each of the T rows is one token of its own sequence, at its own position, written
to its slot's heads of a cache that stacks S slots' KV heads (continuous batching: one launch per step).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime.kernels.triton import pdl
from runtime.kernels.triton.pdl import gdc_wait


@triton.jit
def _quant_store_int8(val, dst_ptr, scale_ptr, mask):
    amax = tl.max(tl.where(mask, tl.abs(val), 0.0), axis=0)
    scale = amax / 127.0
    safe = tl.where(scale > 0, scale, 1.0)
    qf = val / safe
    qi = tl.where(qf >= 0, tl.floor(qf + 0.5), -tl.floor(-qf + 0.5))
    qi = tl.minimum(tl.maximum(qi, -127.0), 127.0)
    tl.store(dst_ptr, qi.to(tl.int8), mask=mask)
    tl.store(scale_ptr, scale)


@triton.jit
def _qk_norm_rope_kernel(
    q_ptr, sq_t, sq_h, k_ptr, sk_t, sk_h, v_ptr, sv_t, sv_h, qw_ptr, kw_ptr,
    cos_ptr, sin_ptr, stride_cs, pos_ptr,
    kc_ptr, vc_ptr, sc_h, sc_s, ks_ptr, vs_ptr, ss_h,
    qo_ptr, so_t, so_h, slot_ptr,
    Hq, D, R, eps, offset,
    BLOCK_D: tl.constexpr, QWEN3: tl.constexpr, INT8: tl.constexpr, USE_GDC: tl.constexpr,
    ROWS: tl.constexpr = False,
):
    """ROWS: row t is its own sequence at ``pos_ptr[t]``, its K/V in cache heads ``slot_ptr[t] * Hkv + h``
    (off: ``slot_ptr`` is None, a constexpr, so that program is the unbatched one, unchanged)."""
    gdc_wait(USE_GDC)
    t = tl.program_id(0)
    h = tl.program_id(1)
    if ROWS:
        pos = tl.load(pos_ptr + t).to(tl.int64)
    else:
        pos = tl.load(pos_ptr).to(tl.int64) + t
    d = tl.arange(0, BLOCK_D)
    m = d < D
    half = R // 2
    rot = d < R
    partner = tl.where(d < half, d + half, tl.where(rot, d - half, d))
    sign = tl.where(d < half, -1.0, 1.0)
    cidx = tl.where(rot, d, 0)
    c = tl.load(cos_ptr + pos * stride_cs + cidx, mask=m & rot, other=1.0)
    s = tl.load(sin_ptr + pos * stride_cs + cidx, mask=m & rot, other=0.0)
    is_q = h < Hq
    hk = h - Hq
    if is_q:
        src = q_ptr + t * sq_t + h * sq_h
        w_ptr = qw_ptr
    else:
        src = k_ptr + t * sk_t + hk * sk_h
        w_ptr = kw_ptr
    xv = tl.load(src + d, mask=m, other=0.0)
    dt = xv.dtype
    xf = xv.to(tl.float32)
    xp = tl.load(src + partner, mask=m, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(xf * xf, axis=0) / D + eps)
    w = tl.load(w_ptr + d, mask=m, other=0.0).to(tl.float32)
    wp = tl.load(w_ptr + partner, mask=m, other=0.0).to(tl.float32)
    if QWEN3:
        xn = ((xf * inv).to(dt).to(tl.float32) * w).to(dt).to(tl.float32)
        xpn = ((xp * inv).to(dt).to(tl.float32) * wp).to(dt).to(tl.float32)
    else:
        xn = (xf * inv * (w + offset)).to(dt).to(tl.float32)
        xpn = (xp * inv * (wp + offset)).to(dt).to(tl.float32)
    out = tl.where(rot, xn * c + sign * xpn * s, xn)
    if is_q:
        tl.store(qo_ptr + t * so_t + h * so_h + d, out.to(qo_ptr.dtype.element_ty), mask=m)
    else:
        if ROWS:  # the slot's heads; Hkv from the grid (Hq + Hkv programs per row)
            ch = tl.load(slot_ptr + t).to(tl.int64) * (tl.num_programs(1) - Hq) + hk
        else:
            ch = hk
        dst = ch * sc_h + pos * sc_s + d
        vv = tl.load(v_ptr + t * sv_t + hk * sv_h + d, mask=m, other=0.0)
        if INT8:
            _quant_store_int8(out.to(dt).to(tl.float32), kc_ptr + dst, ks_ptr + ch * ss_h + pos, m)
            _quant_store_int8(vv.to(tl.float32), vc_ptr + dst, vs_ptr + ch * ss_h + pos, m)
        else:
            tl.store(kc_ptr + dst, out.to(kc_ptr.dtype.element_ty), mask=m)
            tl.store(vc_ptr + dst, vv.to(vc_ptr.dtype.element_ty), mask=m)


def qk_norm_rope_kv_write(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_norm_weight: torch.Tensor,
                          k_norm_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                          start_pos: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, eps: float,
                          *, weight_offset: float = 0.0, k_scale: torch.Tensor | None = None,
                          v_scale: torch.Tensor | None = None, q_out: torch.Tensor | None = None,
                          slots: torch.Tensor | None = None) -> torch.Tensor:
    """Normalise + rotate q/k ``[T, heads, D]`` at ``start_pos[0] + t``, write k/v to the caches.

    ``slots`` (int ``[T]``, batched decode): row t is one token of its own sequence, at ``start_pos[t]``, and its
    k/v go to cache heads ``slots[t] * kv_heads + h`` of caches ``[S * kv_heads, max_positions, head_dim]``
    (scales ``[S * kv_heads, max_positions]``). Returns the rotated q (``q_out`` if given). See docs/kernels.md
    for layouts.
    """
    t, hq, dim = q.shape
    hkv = k.shape[1]
    if k.shape != (t, hkv, dim) or v.shape != (t, hkv, dim):
        raise ValueError("k and v must be [T, kv_heads, head_dim] matching q")
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("q, k, v need a contiguous last dimension")
    if slots is not None:
        if k_cache.shape[0] % hkv or k_cache.shape[2] != dim or k_cache.stride() != v_cache.stride():
            raise ValueError("batched caches must be [slots * kv_heads, max_positions, head_dim] with equal strides")
        if slots.shape != (t,) or start_pos.shape != (t,):
            raise ValueError(f"slots and start_pos must both be [T] = [{t}] (one sequence per row)")
        if slots.dtype not in (torch.int32, torch.int64):
            raise ValueError("slots must be int32 or int64")
        if k_cache.dtype == torch.int8 and k_scale is not None and v_scale is not None and (
                k_scale.shape != k_cache.shape[:2] or v_scale.shape != k_cache.shape[:2]):
            raise ValueError("batched int8 scales must be [slots * kv_heads, max_positions] like the caches")
    elif k_cache.shape[0] != hkv or k_cache.shape[2] != dim or k_cache.stride() != v_cache.stride():
        raise ValueError("caches must be [kv_heads, max_positions, head_dim] with equal strides")
    rot = cos.shape[-1]
    if rot % 2 or rot > dim or cos.stride() != sin.stride():
        raise ValueError("cos/sin must be [max_positions, rotary_dim] with an even rotary_dim <= head_dim")
    int8 = k_cache.dtype == torch.int8
    if int8 and (k_scale is None or v_scale is None):
        raise ValueError("an int8 KV cache needs k_scale and v_scale [kv_heads, max_positions]")
    if q_out is None:
        q_out = torch.empty(t, hq, dim, dtype=q.dtype, device=q.device)
    ks = k_scale if int8 else k_cache
    vs = v_scale if int8 else v_cache
    _qk_norm_rope_kernel[(t, hq + hkv)](
        q, q.stride(0), q.stride(1), k, k.stride(0), k.stride(1), v, v.stride(0), v.stride(1),
        q_norm_weight, k_norm_weight, cos, sin, cos.stride(0), start_pos,
        k_cache, v_cache, k_cache.stride(0), k_cache.stride(1), ks, vs, ks.stride(0) if int8 else 0,
        q_out, q_out.stride(0), q_out.stride(1), slots,
        hq, dim, rot, float(eps), float(weight_offset),
        BLOCK_D=triton.next_power_of_2(dim), QWEN3=weight_offset == 0.0, INT8=int8, ROWS=slots is not None,
        num_warps=1 if dim <= 128 else 2,
        **pdl.launch_options(q.device),
    )
    return q_out
