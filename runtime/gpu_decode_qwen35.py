"""A fused one-token decode step for the Qwen3.5-family hybrid (``Qwen35Model``), for CUDA graphs.

Why: ``Qwen35Model.forward`` is the readable reference and serves prefill, but for one token it is
hundreds of small torch ops (masks over the whole cache, RoPE via cat/index, SDPA over every cache
position, the DeltaNet glue). At batch 1 that launch count, not the weights, sets the speed. This
step reads the model's own buffers (weights, KV cache, :class:`~runtime.model.qwen35.HybridState`)
and does per layer

* DeltaNet layer: RMSNorm + the ternary q|k|v|z in-projection as one mat-vec (unrotated: the norm fused
  into its activation quantisation), the conv window step + SiLU (``deltanet_triton.conv_step``), then
  **one** kernel for the rest of the mixer (:func:`gdn_decode`: the input RMSNorm again for the dense
  ``a``/``b`` dot products, the decay / beta gates, L2-normalised q/k, the gated delta rule on the fp32
  state *in place*, and the gated RMSNorm with ``silu(z)``), ``out_proj`` + residual;
* attention layer: RMSNorm + q|gate/k/v mat-vec in one launch (unrotated, row-fused weights),
  q/k norm + partial RoPE + KV write, split-KV decode attention over the live length with the
  ``* sigmoid(gate)`` in the same launch, ``o_proj`` + residual;
* MLP: RMSNorm + gate/up + SiLU*up in one launch (unrotated), ``down`` + residual.

Bonsai 2 rotation: a folded matmul reads ``R(norm(x))``, so there the norm is its own launch and
the model's :class:`~runtime.model.hadamard.HadamardRotation` (one GEMM on CUDA, cached casts -
graph-safe after the first call) sits between norm and mat-vec.

Because the DeltaNet state advances at every call, a step is **not idempotent** (Qwen3's is: it
rewrites the same KV slot). :class:`StatefulGraphDecoder` therefore saves the state to host memory
around :class:`~runtime.gpu_decode.GraphDecoder`'s warm-up runs; use :func:`graph_decoder_for`.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from runtime.gpu_decode import GraphDecoder, StepFn, graph_safe_embedding

try:
    import triton
    import triton.language as tl

    from runtime.kernels import pdl
    from runtime.kernels.pdl import gdc_wait
    from runtime.kernels.triton_linear import row_inv_rms
except ImportError:  # CPU-only install: the step is simply not available
    triton = None  # type: ignore[assignment]


# ----------------------------------------------------------------------------------------------
# the DeltaNet mixer after the conv, one launch per layer
# ----------------------------------------------------------------------------------------------

# Value-column block of one program: the delta rule is independent per value column (o[:, v] and
# S[:, v] need column v of S plus the whole q, k and the scalar gates), so a head's DV columns are
# split over DV / block programs. One program per head is only HV programs (48 on the 27B, on a
# 132-SM GPU); block 32 gives 4 per head. TERNARY_GDN_BLOCK_DV overrides it (a power of two; a
# block >= DV is the one-program-per-head kernel).
GDN_BLOCK_DV = int(os.environ.get("TERNARY_GDN_BLOCK_DV", "32"))

if triton is not None:
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
        e = tl.exp(-tl.abs(av))  # softplus = max(a, 0) + log1p(exp(-|a|)) (as deltanet_triton.gates)
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


# ----------------------------------------------------------------------------------------------
# the step
# ----------------------------------------------------------------------------------------------


def _minus_one(weight: torch.Tensor) -> torch.Tensor:
    """Norm weights are stored with the offset applied; the kernels take ``w - 1`` with offset 1.0,
    which reproduces Qwen3.5's ``(x * rsqrt * (1 + w)).to(dtype)`` rounding order."""
    return (weight.to(torch.float32) - 1.0).contiguous()


def _views_only(block: torch.nn.Module, dtype: torch.dtype) -> bool:
    """True when every per-layer tensor the step needs exists as is (no derived copy needed)."""
    norms = [block.input_norm, block.post_norm]
    mixer = block.mixer
    if hasattr(mixer, "q_norm"):
        norms += [mixer.q_norm, mixer.k_norm]
    if any(getattr(n, "weight_m1", None) is None for n in norms):
        return False
    dense = [m for m in mixer.modules() if type(m).__name__ == "DenseLinear"]
    if any(m.weight.dtype != dtype for m in dense):
        return False
    return getattr(mixer, "norm_act", torch.empty(0, dtype=dtype)).dtype == dtype


def fused_hybrid_enabled() -> bool:
    """Engine and bench decode the hybrid with :func:`fused_qwen35_step` (measured on the H200: 106
    tok/s for the 27B PTQ1_0 shapes against 7.5 through ``Qwen35Model.forward``);
    ``TERNARY_FUSED_HYBRID=0`` falls back to the graph-captured ``forward``."""
    return os.environ.get("TERNARY_FUSED_HYBRID", "1") == "1"


def fused_decode_step(model: torch.nn.Module) -> StepFn | None:
    """The fused one-token step the engine and the bench decode with: Qwen3's, or (opt-in) the
    hybrid's; ``None`` when neither applies (the caller then steps ``model.forward``)."""
    from runtime.gpu_decode import fused_qwen3_step

    return fused_qwen3_step(model) or (fused_qwen35_step(model) if fused_hybrid_enabled() else None)


def fused_qwen35_step(model: torch.nn.Module) -> StepFn | None:
    """A graph-safe ``step(tok [1], pos [1]) -> logits [V]`` (model dtype) for a ``Qwen35Model``, or ``None``.

    ``None`` when the model is another architecture, Triton is missing, or a linear is neither a
    Triton ternary matrix (t2 or t3) nor a dense one (e.g. the CPU reference backend). Equal to
    ``model.forward`` for one token up to float rounding order; the DeltaNet conv and recurrent
    state and the KV cache are updated in place, so prefill by ``forward`` and decode by this
    share them. Streamed and mapped (offloaded) layers and a mapped LM head are supported like in
    ``fused_qwen3_step``.
    """
    if triton is None or getattr(getattr(model, "config", None), "arch", None) != "qwen35":
        return None
    try:
        from runtime.kernels import triton_attention as ta
        from runtime.kernels import triton_linear as tlin
        from runtime.kernels import triton_norm as tn
        from runtime.kernels import triton_rope as tr
        from runtime.model import deltanet_triton as dtk
        from runtime.model.qwen3 import DenseLinear
        from runtime.model.qwen35 import GatedDeltaNetBlock, _Act, _Projections
        from runtime.offload import StreamedLayer
    except ImportError:
        return None
    cfg = model.config
    cache = model.cache
    if cache.k.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.int8):
        return None
    lin_types = (tlin.TritonLinear, DenseLinear)

    def ok(m: torch.nn.Module | None) -> bool:
        return isinstance(m, lin_types)

    def proj_ok(p: _Projections) -> bool:
        return all(ok(g.fused) if g.fused is not None else all(ok(m) for m in g.parts) for g in p.groups)

    eps = cfg.rms_norm_eps
    rotation = model.rotation
    dtype = model.dtype
    int8 = cache.k.dtype == torch.int8

    def norm_m1(n: torch.nn.Module) -> torch.Tensor:
        m1 = getattr(n, "weight_m1", None)
        return m1.contiguous() if m1 is not None else _minus_one(n.weight)

    def single_fused(p: _Projections) -> torch.nn.Module | None:
        """The one unrotated row-fused Triton matrix of a projection (norm fuses into its mat-vec)."""
        if len(p.groups) == 1 and not p.group_folded[0] and isinstance(p.groups[0].fused, tlin.TritonLinear):
            return p.groups[0].fused
        return None

    def project(p: _Projections, x: torch.Tensor, nw: torch.Tensor, skip: frozenset[int] = frozenset(),
                act: _Act | None = None) -> list[torch.Tensor | None]:
        """Outputs of ``p`` on ``rmsnorm(x)`` (rotated per group as the model does; ``act``: that
        norm already computed); ``skip``: parts (original indices) computed elsewhere."""
        fused = single_fused(p)
        if fused is not None and not skip and act is None:
            y = tlin.fused_rmsnorm_matvec(x, nw, eps, fused.codes, fused.scales, fused.group_size, fused.encoding,
                                          weight_offset=1.0)
            parts = y.split(p.groups[0].sizes, dim=-1)
            return [parts[j] for _, j in p.order]
        if act is None:
            act = _Act(tn.rmsnorm(x, nw, eps, weight_offset=1.0), rotation)
        outs: list[list[torch.Tensor | None]] = []
        skip_at = {p.order[i] for i in skip}
        for gi, (g, folded) in enumerate(zip(p.groups, p.group_folded, strict=True)):
            if g.fused is not None:
                if all((gi, j) in skip_at for j in range(len(g.sizes))):  # e.g. the fused dense a|b rows
                    outs.append([None] * len(g.sizes))
                    continue
                outs.append(list(g.fused(act.get(folded)).split(g.sizes, dim=-1)))
            else:
                outs.append([None if (gi, j) in skip_at else m(act.get(folded)) for j, m in enumerate(g.parts)])
        return [outs[gi][j] for gi, j in p.order]

    def part_module(p: _Projections, i: int) -> torch.nn.Module | None:
        gi, j = p.order[i]
        g = p.groups[gi]
        return None if g.fused is not None else g.parts[j]

    def dense_rows(p: _Projections, i: int) -> torch.Tensor | None:
        """Part ``i``'s rows of a dense matrix (its own or a row-fused one), for in-kernel dots."""
        gi, j = p.order[i]
        g = p.groups[gi]
        m = g.fused if g.fused is not None else g.parts[j]
        if not isinstance(m, DenseLinear):
            return None
        r0 = sum(g.sizes[:j]) if g.fused is not None else 0
        w = m.weight[r0:r0 + g.sizes[j]]
        return w.contiguous() if w.dtype == dtype else w.to(dtype).contiguous()

    def residual_linear(m: torch.nn.Module, a: torch.Tensor, folded: bool, x: torch.Tensor) -> torch.Tensor:
        if folded:
            assert rotation is not None
            a = rotation(a)
        if isinstance(m, tlin.TritonLinear):
            return tlin.ternary_matvec(a, m.codes, m.scales, m.group_size, m.encoding, residual=x)
        return x + m(a)

    plans = []
    for layer in model.layers:
        block, streamed = (layer.block, layer) if isinstance(layer, StreamedLayer) else (layer, None)
        mixer = block.mixer
        if streamed is not None and not _views_only(block, dtype):
            # a streamed layer's tensors are views into a staging slot that other layers reuse: the
            # step may only hold views of them (taken here, valid whenever the layer is staged),
            # never copies computed now (those would freeze whatever layer the slot held)
            return None
        if not (proj_ok(block.gate_up) and ok(block.down_proj)):
            return None
        plan: dict = {"block": block, "streamed": streamed, "in_m1": norm_m1(block.input_norm),
                      "post_m1": norm_m1(block.post_norm)}
        if isinstance(mixer, GatedDeltaNetBlock):
            if not (proj_ok(mixer.in_proj) and ok(mixer.out_proj)):
                return None
            wb, wa = dense_rows(mixer.in_proj, 2), dense_rows(mixer.in_proj, 3)
            dense_ab = wb is not None and wa is not None and \
                mixer.in_proj.order[2][0] == mixer.in_proj.order[3][0]  # same input (rotated or not)
            plan["ab"] = (wb, wa) if dense_ab else None
            # the dot products read the same activation as the dense rows (rotated only if folded)
            plan["ab_folded"] = mixer.in_proj.group_folded[mixer.in_proj.order[2][0]]
            # q|k|v and z as one unrotated Triton matrix beside dense a/b: RMSNorm fused into its activation
            # quantisation, and the gates' dot products normalise x themselves (no norm launch)
            (gq, jq), (gz, jz) = mixer.in_proj.order[0], mixer.in_proj.order[1]
            grp = mixer.in_proj.groups[gq]
            if dense_ab and gq == gz and len(grp.sizes) == 2 and not plan["ab_folded"] \
                    and not mixer.in_proj.group_folded[gq] and isinstance(grp.fused, tlin.TritonLinear):
                plan["in_fused"] = (grp.fused, grp.sizes, jq, jz)
            plan["norm_w"] = mixer.norm_act if mixer.norm_act.dtype == dtype else mixer.norm.to(dtype)
        else:
            if not (proj_ok(mixer.qkv) and ok(mixer.o_proj)):
                return None
            plan["q_m1"], plan["k_m1"] = norm_m1(mixer.q_norm), norm_m1(mixer.k_norm)
        plans.append(plan)
    head = model.lm_head
    if not ok(head):
        return None
    head_fused = isinstance(head, tlin.TritonLinear) and not model.lm_head_folded
    final_m1 = _minus_one(model.final_norm)
    embed = graph_safe_embedding(model.embed)
    state = model.state
    nh, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    sm_scale = hd ** -0.5
    rot = int(hd * cfg.partial_rotary_factor)

    def gdn(plan: dict, x: torch.Tensor) -> torch.Tensor:
        mx = plan["block"].mixer
        if "in_fused" in plan:  # norm inside the mat-vec's quantisation and inside the gates kernel
            lin, sizes, jq, jz = plan["in_fused"]
            y = tlin.fused_rmsnorm_matvec(x, plan["in_m1"], eps, lin.codes, lin.scales, lin.group_size,
                                          lin.encoding, weight_offset=1.0).split(sizes, dim=-1)
            qkv, z = y[jq], y[jz]
            wb, wa = plan["ab"]
            gates: dict = dict(x=x, wa=wa, wb=wb, x_norm_weight=plan["in_m1"], x_norm_eps=eps)
        else:
            dense_ab = plan["ab"] is not None
            act = _Act(tn.rmsnorm(x, plan["in_m1"], eps, weight_offset=1.0), rotation) if dense_ab else None
            qkv, z, b, a = project(mx.in_proj, x, plan["in_m1"], frozenset((2, 3)) if dense_ab else frozenset(), act)
            if act is not None:
                wb, wa = plan["ab"]
                gates = dict(x=act.get(plan["ab_folded"]), wa=wa, wb=wb)
            else:
                assert a is not None and b is not None
                gates = dict(a=a, b=b)
        assert qkv is not None and z is not None
        mixed = dtk.conv_step(qkv, state.conv[mx.slot], mx.conv_weight)
        o = gdn_decode(mixed, z, state.recurrent[mx.slot], mx.A, mx.dt_bias, plan["norm_w"], mx.eps, mx.nk, **gates)
        if mx.out_perm is not None:
            o = o.index_select(1, mx.out_perm)
        return residual_linear(mx.out_proj, o, mx.out_folded, x)

    def attention(plan: dict, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        mx = plan["block"].mixer
        q, k, v = project(mx.qkv, x, plan["in_m1"])
        assert q is not None and k is not None and v is not None
        gate = None
        if mx.gated:
            qg = q.view(1, nh, 2 * hd)
            q, gate = qg[..., :hd], qg[..., hd:]
        else:
            q = q.view(1, nh, hd)
        k, v = k.view(1, nkv, hd), v.view(1, nkv, hd)
        cos, sin = model.rope.cos, model.rope.sin
        kc, vc = cache.k[mx.slot], cache.v[mx.slot]
        ks = cache.k_scale[mx.slot] if int8 else None
        vs = cache.v_scale[mx.slot] if int8 else None
        qr = tr.qk_norm_rope_kv_write(q, k, v, plan["q_m1"], plan["k_m1"], cos, sin, pos, kc, vc, eps,
                                      weight_offset=1.0, k_scale=ks, v_scale=vs)
        # the output gate (sigmoid) is applied inside the attention launch
        att = ta.decode_attention(qr[0], kc, vc, pos, sm_scale, k_scale=ks, v_scale=vs,  # keys [0, pos + 1)
                                  gate=gate[0] if gate is not None else None, len_offset=1)
        return residual_linear(mx.o_proj, att.reshape(1, nh * hd), mx.o_folded, x)

    def mlp(plan: dict, x: torch.Tensor) -> torch.Tensor:
        blk = plan["block"]
        gu = blk.gate_up
        fused = single_fused(gu)
        if fused is not None:
            m = tlin.swiglu_matvec(x, fused.codes, fused.scales, fused.group_size, fused.encoding,
                                   norm_weight=plan["post_m1"], eps=eps, weight_offset=1.0)
        else:
            act = _Act(tn.rmsnorm(x, plan["post_m1"], eps, weight_offset=1.0), rotation)
            only = gu.groups[0].fused if len(gu.groups) == 1 else None
            g_mod, u_mod = part_module(gu, 0), part_module(gu, 1)
            same_in = gu.group_folded[gu.order[0][0]] == gu.group_folded[gu.order[1][0]]
            if isinstance(only, tlin.TritonLinear):  # rotated: R(norm(x)), then the fused gate|up matrix
                m = tlin.swiglu_matvec(act.get(gu.group_folded[0]), only.codes, only.scales, only.group_size,
                                       only.encoding)
            elif isinstance(g_mod, tlin.TritonLinear) and isinstance(u_mod, tlin.TritonLinear) and same_in \
                    and g_mod.encoding == u_mod.encoding and g_mod.group_size == u_mod.group_size:
                xin = act.get(gu.group_folded[gu.order[0][0]])
                m = tlin.swiglu_matvec(xin, g_mod.codes, g_mod.scales, g_mod.group_size, g_mod.encoding,
                                       up_codes=u_mod.codes, up_scales=u_mod.scales)
            else:
                gate, up = gu(act)
                m = torch.nn.functional.silu(gate) * up
        return residual_linear(blk.down_proj, m, blk.down_folded, x)

    def step(tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        x = embed(tok, dtype)  # [1, H]
        if model.embed_rotated:
            assert rotation is not None
            x = rotation.inverse(x)
        for plan in plans:
            streamed = plan["streamed"]
            if streamed is not None:
                streamed._streamer.before(streamed.index)
            if "ab" in plan:
                x = gdn(plan, x)
            else:
                x = attention(plan, x, pos)
            x = mlp(plan, x)
            if streamed is not None:
                streamed._streamer.after(streamed.index)
        if head_fused:
            logits = tlin.fused_rmsnorm_matvec(x, final_m1, eps, head.codes, head.scales, head.group_size,
                                               head.encoding, weight_offset=1.0)
        else:
            h = tn.rmsnorm(x, final_m1, eps, weight_offset=1.0)
            if model.lm_head_folded:
                assert rotation is not None
                h = rotation(h)
            logits = head(h)
        return logits.reshape(-1)  # the model's dtype: the decoder's sampler reads it as fp32 (no cast launch)

    step.state_buffers = (state.conv, state.recurrent)  # type: ignore[attr-defined]
    # DeltaNet layers whose input norm is fused into the in-projection and the gates (for tests)
    step.norm_fused_deltanet_layers = sum("in_fused" in p for p in plans)  # type: ignore[attr-defined]
    step.rotary_dim = rot  # type: ignore[attr-defined]
    return step


# ----------------------------------------------------------------------------------------------
# graph capture without advancing the recurrent state
# ----------------------------------------------------------------------------------------------


class StatefulGraphDecoder(GraphDecoder):
    """:class:`GraphDecoder` for steps with recurrent state (the hybrid's DeltaNet conv/recurrent).

    ``GraphDecoder`` warms a step up by running it twice at the current token before capturing,
    which is harmless for a KV cache (same slot rewritten) but would advance a recurrent state two
    extra tokens. Here the state is copied to host memory before and restored after the capture
    (host, not device: a device copy of the 27B's 150 MB state would raise the VRAM peak).
    """

    def __init__(self, step: StepFn, vocab_size: int, device: torch.device | str,
                 state_buffers: tuple[torch.Tensor, ...], use_graph: bool | None = None, warmup: int = 2) -> None:
        super().__init__(step, vocab_size, device, use_graph=use_graph, warmup=warmup)
        self.state_buffers = tuple(state_buffers)

    def _capture(self) -> torch.cuda.CUDAGraph:
        saved = [b.to("cpu", copy=True) for b in self.state_buffers]
        try:
            return super()._capture()
        finally:
            for b, s in zip(self.state_buffers, saved, strict=True):
                b.copy_(s)


def graph_decoder_for(model: torch.nn.Module, step: StepFn, device: torch.device | str,
                      use_graph: bool | None = None) -> GraphDecoder:
    """The right decoder for ``model``: stateful models (``model.state`` buffers) get
    :class:`StatefulGraphDecoder`, everything else the plain :class:`GraphDecoder`."""
    st = getattr(model, "state", None)
    buffers = tuple(getattr(st, n) for n in ("conv", "recurrent")) if st is not None and hasattr(st, "recurrent") \
        else ()
    if buffers:
        return StatefulGraphDecoder(step, model.vocab_size, device, buffers, use_graph=use_graph)
    return GraphDecoder(step, model.vocab_size, device, use_graph=use_graph)


def snapshot_state(model: torch.nn.Module) -> Callable[[], None]:
    """Save the hybrid's recurrent state (to host); the returned function puts it back. For
    comparing two steps at the same position (e.g. a fused-vs-forward self-check)."""
    st = getattr(model, "state", None)
    if st is None or not hasattr(st, "recurrent"):
        return lambda: None
    saved = [(b, b.to("cpu", copy=True)) for b in (st.conv, st.recurrent)]

    def restore() -> None:
        for b, s in saved:
            b.copy_(s)
    return restore


__all__ = ["StatefulGraphDecoder", "fused_decode_step", "fused_hybrid_enabled", "fused_qwen35_step", "gdn_decode", "graph_decoder_for", "snapshot_state"]
