"""Triton kernels for the Gated DeltaNet layers of the Qwen3.5 hybrid (CUDA decode path).

Why: at batch 1 a Gated-DeltaNet layer's glue (conv window update + SiLU, the decay / beta gates,
the gated RMSNorm) is ~25 tiny torch kernels per layer, 48 layers per token: launch-bound. Each of
these kernels replaces one group of them with one launch; the torch versions in
:mod:`runtime.model.qwen35.deltanet` stay the reference (tests compare the two under TRITON_INTERPRET=1).
:func:`gdn_decode` is the fused decode step's whole mixer after the conv in one launch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from runtime import flags
from runtime.kernels.triton import pdl
from runtime.kernels.triton.packing import row_inv_rms
from runtime.kernels.triton.pdl import gdc_wait


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


# the DeltaNet mixer after the conv, one launch per layer (the fused Qwen3.5 decode step's core)

# Value-column block of one program: the delta rule is independent per value column (o[:, v] and
# S[:, v] need column v of S plus the whole q, k and the scalar gates), so a head's DV columns are
# split over DV / block programs. One program per head is only HV programs (48 on the 27B, on a
# 132-SM GPU); block 32 gives 4 per head. TERNARY_GDN_BLOCK_DV overrides it (a power of two; a
# block >= DV is the one-program-per-head kernel).
GDN_BLOCK_DV = flags.integer("TERNARY_GDN_BLOCK_DV")

@triton.jit
def _gdn_gated_norm(od, dv, mv, hv, z_ptr, nw_ptr, o_ptr, eps, DV: tl.constexpr):
    """Gated RMSNorm (HF Qwen3_5RMSNormGated, plain weight) of a whole head's pre-norm ``od``
    (already rounded to the model dtype, 0 in padding lanes): w * norm(o).to(dt), times silu(z).
    ``o`` has the model dtype (``dt``)."""
    dt = o_ptr.dtype.element_ty
    inv = tl.rsqrt(tl.sum(od * od, axis=0) / DV + eps)
    w = tl.load(nw_ptr + dv, mask=mv, other=0.0).to(tl.float32)
    y = (w * (od * inv).to(dt).to(tl.float32)).to(dt).to(tl.float32)
    zf = tl.load(z_ptr + hv * DV + dv, mask=mv, other=0.0).to(tl.float32)
    y = y * (zf / (1.0 + tl.exp(-zf)))
    tl.store(o_ptr + hv * DV + dv, y.to(o_ptr.dtype.element_ty), mask=mv)

@triton.jit
def _gdn_decode_kernel(mixed_ptr, z_ptr, a_ptr, b_ptr, x_ptr, xw_ptr, wa_ptr, wb_ptr, A_ptr, dt_ptr, s_ptr,
                       nw_ptr, o_ptr, cnt_ptr, HID, eps, x_eps, q_scale,
                       H: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
                       BK: tl.constexpr, BDK: tl.constexpr, BDV: tl.constexpr, BDVS: tl.constexpr,
                       NSPLIT: tl.constexpr, BH: tl.constexpr, AB_DOT: tl.constexpr, NORM_X: tl.constexpr,
                       USE_GDC: tl.constexpr):
    """Program (hv, j): value head hv, value columns [j*BDVS, (j+1)*BDVS). Every program
    computes the (cheap) gates and l2 norms itself; the gated RMSNorm needs all DV columns of
    o, so with NSPLIT > 1 each program writes its pre-norm o block (in the model dtype, which
    is what the norm reads anyway) and the last program of the head to arrive (arrival
    counter, reset by that program) normalises the whole row."""
    gdc_wait(USE_GDC)
    hv = tl.program_id(0)
    j = tl.program_id(1)
    kh = hv // (HV // H)  # HF grouped order: value head hv reads key head hv // (HV / H)
    dk = tl.arange(0, BDK)
    mk = dk < DK
    dv = j * BDVS + tl.arange(0, BDVS)
    mv = dv < DV
    q_base = mixed_ptr + kh * DK
    k_base = mixed_ptr + H * DK + kh * DK
    vraw = tl.load(mixed_ptr + 2 * H * DK + hv * DV + dv, mask=mv, other=0.0)
    dt = vraw.dtype
    vf = vraw.to(tl.float32)
    qf = tl.load(q_base + dk, mask=mk, other=0.0).to(tl.float32)
    kf = tl.load(k_base + dk, mask=mk, other=0.0).to(tl.float32)
    q_r = tl.rsqrt(tl.sum(qf * qf, axis=0) + 1e-6)  # l2norm: x * rsqrt(sum x^2 + 1e-6)
    k_r = tl.rsqrt(tl.sum(kf * kf, axis=0) + 1e-6)
    qk = tl.sum(((qf * q_r) * q_scale) * (kf * k_r), axis=0)
    # gates: a, b from the dense keep-list rows (dot products here) or from the mat-vec output
    if AB_DOT:
        acc_a = tl.zeros([BH], tl.float32)
        acc_b = tl.zeros([BH], tl.float32)
        inv_x = 1.0
        if NORM_X:  # x is the residual stream: the layer's input RMSNorm (Qwen3.5 rounding) first
            inv_x = row_inv_rms(x_ptr, HID, x_eps, BH)
        for h0 in range(0, HID, BH):
            hh = h0 + tl.arange(0, BH)
            mh = hh < HID
            xv = tl.load(x_ptr + hh, mask=mh, other=0.0).to(tl.float32)
            if NORM_X:
                xw = tl.load(xw_ptr + hh, mask=mh, other=0.0).to(tl.float32)
                xv = (xv * inv_x * (xw + 1.0)).to(dt).to(tl.float32)
            acc_a += xv * tl.load(wa_ptr + hv * HID + hh, mask=mh, other=0.0).to(tl.float32)
            acc_b += xv * tl.load(wb_ptr + hv * HID + hh, mask=mh, other=0.0).to(tl.float32)
        a_v = tl.sum(acc_a, axis=0).to(dt).to(tl.float32)  # F.linear output in the model dtype
        b_v = tl.sum(acc_b, axis=0).to(dt).to(tl.float32)
    else:
        a_v = tl.load(a_ptr + hv).to(tl.float32)
        b_v = tl.load(b_ptr + hv).to(tl.float32)
    av = a_v + tl.load(dt_ptr + hv)
    e = tl.exp(-tl.abs(av))  # softplus = max(a, 0) + log1p(exp(-|a|)) (as gates)
    sp = tl.maximum(av, 0.0) + tl.where(e < 1e-4, e - 0.5 * e * e, tl.log(1.0 + e))
    decay = tl.exp(tl.load(A_ptr + hv) * sp)
    beta = (1.0 / (1.0 + tl.exp(-b_v))).to(dt).to(tl.float32)  # sigmoid(b) in b's dtype
    # o = q^T (d S + k delta^T) = d q^T S + (q.k) delta,  delta = beta (v - d k^T S)
    s_base = s_ptr + hv * DK * DV
    k_s = tl.zeros([BDVS], tl.float32)
    q_s = tl.zeros([BDVS], tl.float32)
    for k0 in tl.static_range(0, DK, BK):
        kk = k0 + tl.arange(0, BK)
        mkk = kk < DK
        qb = (tl.load(q_base + kk, mask=mkk, other=0.0).to(tl.float32) * q_r) * q_scale
        kb = tl.load(k_base + kk, mask=mkk, other=0.0).to(tl.float32) * k_r
        st = tl.load(s_base + kk[:, None] * DV + dv[None, :], mask=mkk[:, None] & mv[None, :], other=0.0)
        k_s += tl.sum(kb[:, None] * st, axis=0)
        q_s += tl.sum(qb[:, None] * st, axis=0)
    delta = beta * (vf - decay * k_s)
    o = decay * q_s + qk * delta
    for k0 in tl.static_range(0, DK, BK):
        kk = k0 + tl.arange(0, BK)
        mkk = kk < DK
        kb = tl.load(k_base + kk, mask=mkk, other=0.0).to(tl.float32) * k_r
        sm = mkk[:, None] & mv[None, :]
        st = tl.load(s_base + kk[:, None] * DV + dv[None, :], mask=sm, other=0.0)
        tl.store(s_base + kk[:, None] * DV + dv[None, :], st * decay + kb[:, None] * delta[None, :], mask=sm)
    if NSPLIT == 1:
        _gdn_gated_norm(tl.where(mv, o.to(dt).to(tl.float32), 0.0), dv, mv, hv, z_ptr, nw_ptr, o_ptr,
                        eps, DV)
    else:
        tl.store(o_ptr + hv * DV + dv, o.to(o_ptr.dtype.element_ty), mask=mv)  # pre-norm, model dtype
        tl.debug_barrier()  # every thread's o block is written before the release below
        arrived = tl.atomic_add(cnt_ptr + hv, 1)  # acq_rel, gpu scope
        if arrived == NSPLIT - 1:  # last program of this head: the norm over all DV columns
            fv = tl.arange(0, BDV)
            mf = fv < DV
            od = tl.load(o_ptr + hv * DV + fv, mask=mf, other=0.0, cache_modifier=".cg").to(tl.float32)
            _gdn_gated_norm(od, fv, mf, hv, z_ptr, nw_ptr, o_ptr, eps, DV)
            tl.atomic_xchg(cnt_ptr + hv, 0)  # leave the counter ready for the next launch

_gdn_counters: dict[torch.device, torch.Tensor] = {}


def _gdn_counter_buffer(device: torch.device, n: int) -> torch.Tensor:
    """Zeroed int32 per-head arrival counters, cached per device (the kernel resets what it uses,
    so launches - layers, graph replays - share them)."""
    buf = _gdn_counters.get(device)
    if buf is None or buf.numel() < n:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("gdn_decode: call once before CUDA-graph capture (warm-up)")
        buf = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
        _gdn_counters[device] = buf
    return buf


def gdn_decode(mixed: torch.Tensor, z: torch.Tensor, state: torch.Tensor, A: torch.Tensor, dt_bias: torch.Tensor,
               norm_weight: torch.Tensor, eps: float, key_heads: int, *, a: torch.Tensor | None = None,
               b: torch.Tensor | None = None, x: torch.Tensor | None = None, wa: torch.Tensor | None = None,
               wb: torch.Tensor | None = None, block_dv: int | None = None,
               x_norm_weight: torch.Tensor | None = None, x_norm_eps: float = 1e-6) -> torch.Tensor:
    """One token of the Gated DeltaNet mixer after the conv: returns the gated-normed ``o [1, HV*DV]``.

    ``mixed [1, 2*H*DK + HV*DV]`` (conv + SiLU output: q | k | v), ``z [1, HV*DV]``,
    ``state [HV, DK, DV]`` fp32 (updated in place), ``A`` (= -exp(A_log)) and ``dt_bias`` fp32
    ``[HV]``, ``norm_weight [DV]``. Gates from ``a, b [1, HV]`` or, for dense keep-list
    projections, from ``x [1, HID]`` and the rows ``wa, wb [HV, HID]`` (dot products in-kernel);
    with ``x_norm_weight`` (``w - 1``, Qwen3.5's offset form) ``x`` is the raw residual stream and every
    program applies the layer's input RMSNorm to it first (no separate norm launch).
    ``block_dv`` (default :data:`GDN_BLOCK_DV`): value columns per program, grid
    ``(HV, ceil(DV / block_dv))``.
    """
    hv, dk, dv = state.shape
    if not state.is_contiguous() or state.dtype != torch.float32:
        raise ValueError("the DeltaNet state must be a contiguous fp32 [HV, DK, DV] tensor")
    if hv % key_heads or mixed.shape[-1] != 2 * key_heads * dk + hv * dv or z.shape[-1] != hv * dv:
        raise ValueError("mixed / z widths do not match the state and head counts")
    ab_dot = a is None
    if ab_dot:
        if x is None or wa is None or wb is None:
            raise ValueError("pass either a and b or x, wa and wb")
        hid = x.shape[-1]
        if wa.shape != (hv, hid) or wb.shape != (hv, hid) or not (wa.is_contiguous() and wb.is_contiguous()):
            raise ValueError("wa / wb must be contiguous [HV, HID]")
        xs = x.reshape(hid)
        a_arg = b_arg = xs
        if x_norm_weight is not None and x_norm_weight.shape != (hid,):
            raise ValueError("x_norm_weight must be [HID]")
    else:
        assert b is not None
        hid = 1
        xs, wa, wb = a, a, a  # unused
        a_arg, b_arg = a.reshape(-1), b.reshape(-1)
    for t in (mixed, z, xs, a_arg, b_arg):
        if t.stride(-1) != 1:
            raise ValueError("inputs need a contiguous last dimension")
    out = torch.empty(1, hv * dv, dtype=mixed.dtype, device=mixed.device)
    bdv = triton.next_power_of_2(dv)
    bdvs = min(bdv, triton.next_power_of_2(max(1, block_dv or GDN_BLOCK_DV)))
    nsplit = triton.cdiv(dv, bdvs)
    if nsplit == 1:
        bdvs = bdv
    cnt = _gdn_counter_buffer(mixed.device, hv) if nsplit > 1 else out  # unused when not split
    bdk = triton.next_power_of_2(dk)
    _gdn_decode_kernel[(hv, nsplit)](
        mixed, z, a_arg, b_arg, xs, x_norm_weight if x_norm_weight is not None else xs, wa, wb, A, dt_bias, state,
        norm_weight, out, cnt, hid, float(eps), float(x_norm_eps), dk ** -0.5,
        H=key_heads, HV=hv, DK=dk, DV=dv, BK=min(bdk, max(32, 4096 // bdvs)), BDK=bdk, BDV=bdv, BDVS=bdvs,
        NSPLIT=nsplit, BH=min(1024, triton.next_power_of_2(hid)), AB_DOT=ab_dot,
        NORM_X=ab_dot and x_norm_weight is not None, num_warps=4,
        **pdl.launch_options(mixed.device),
    )
    return out
