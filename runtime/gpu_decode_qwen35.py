"""A fused one-token decode step for the Qwen3.5-family hybrid (``Qwen35Model``), for CUDA graphs.

Why: ``Qwen35Model.forward`` is the readable reference and serves prefill, but for one token it is
hundreds of small torch ops (masks over the whole cache, RoPE via cat/index, SDPA over every cache
position, the DeltaNet glue). At batch 1 that launch count, not the weights, sets the speed. This
step reads the model's own buffers (weights, KV cache, :class:`~runtime.model.qwen35.Qwen35State`)
and does per layer

* DeltaNet layer: RMSNorm + the ternary q|k|v|z in-projection as one mat-vec (unrotated: the norm fused
  into its activation quantisation), the conv window step + SiLU (``runtime.kernels.triton.deltanet.conv_step``), then
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

from collections.abc import Callable

import torch

from runtime import flags
from runtime.gpu_decode import GraphDecoder, StepFn

try:
    import triton

    from runtime.kernels.triton.deltanet import gdn_decode
except ImportError:  # CPU-only install: the step is simply not available
    triton = None  # type: ignore[assignment]


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
    return flags.value("TERNARY_FUSED_HYBRID") == "1"


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
        from runtime.kernels.triton import attention as ta
        from runtime.kernels.triton import deltanet as dtk
        from runtime.kernels.triton import matvec as tlin
        from runtime.kernels.triton import norm as tn
        from runtime.kernels.triton import rope as tr
        from runtime.kernels.triton.backend import TritonLinear
        from runtime.model.qwen3 import DenseLinear
        from runtime.model.qwen35 import GatedDeltaNetBlock, _Act, _Projections
        from runtime.offload import StreamedLayer
    except ImportError:
        return None
    cfg = model.config
    cache = model.cache
    if cache.k.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.int8):
        return None
    lin_types = (TritonLinear, DenseLinear)

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
        if len(p.groups) == 1 and not p.group_folded[0] and isinstance(p.groups[0].fused, TritonLinear):
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
        if isinstance(m, TritonLinear):
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
                    and not mixer.in_proj.group_folded[gq] and isinstance(grp.fused, TritonLinear):
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
    head_fused = isinstance(head, TritonLinear) and not model.lm_head_folded
    final_m1 = _minus_one(model.final_norm)
    embed = model.embed  # TernaryEmbedding keeps its constants on the device: graph-capturable
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
            if isinstance(only, TritonLinear):  # rotated: R(norm(x)), then the fused gate|up matrix
                m = tlin.swiglu_matvec(act.get(gu.group_folded[0]), only.codes, only.scales, only.group_size,
                                       only.encoding)
            elif isinstance(g_mod, TritonLinear) and isinstance(u_mod, TritonLinear) and same_in \
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


__all__ = ["StatefulGraphDecoder", "fused_decode_step", "fused_hybrid_enabled", "fused_qwen35_step", "graph_decoder_for", "snapshot_state"]
