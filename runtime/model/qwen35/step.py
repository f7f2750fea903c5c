"""The Qwen3.5 hybrid's fused one-token decode step (what :meth:`Qwen35Model.decode_step` returns).

Why: ``Qwen35Model.forward`` is the readable reference and serves prefill, but for one token it is
hundreds of small torch ops (masks over the whole cache, RoPE via cat/index, SDPA over every cache
position, the DeltaNet glue). At batch 1 that launch count, not the weights, sets the speed. This
step reads the model's own buffers (weights, KV cache, :class:`~runtime.model.qwen35.model.Qwen35State`)
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
the model's :class:`~runtime.model.qwen35.hadamard.HadamardRotation` (one GEMM on CUDA, cached casts -
graph-safe after the first call) sits between norm and mat-vec.

Because the DeltaNet state advances at every call, a step is **not idempotent** (Qwen3's is: it
rewrites the same KV slot): the model lists that state in :meth:`Qwen35Model.sequence_state`, which
:func:`runtime.gpu_decode.graph_decoder_for` saves around the decoder's warm-up runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from runtime.kernels.triton import attention as ta
from runtime.kernels.triton import deltanet as dtk
from runtime.kernels.triton import matvec as tlin
from runtime.kernels.triton import norm as tn
from runtime.kernels.triton import rope as tr
from runtime.kernels.triton.backend import TritonLinear
from runtime.model.qwen3 import DenseLinear
from runtime.model.qwen3_step import KV_DTYPES
from runtime.model.qwen35.projections import Activation, Projections
from runtime.offload import StreamedLayer, unwrap_streamed

if TYPE_CHECKING:
    from runtime.model.qwen35.model import GatedAttentionBlock, GatedDeltaNetBlock, Qwen35Layer, Qwen35Model


def _minus_one(weight: torch.Tensor) -> torch.Tensor:
    """Norm weights are stored with the offset applied; the kernels take ``w - 1`` with offset 1.0,
    which reproduces Qwen3.5's ``(x * rsqrt * (1 + w)).to(dtype)`` rounding order."""
    return (weight.to(torch.float32) - 1.0).contiguous()


def _norm_m1(n: torch.nn.Module) -> torch.Tensor:
    """A Qwen3.5 norm's weight minus one: its own ``weight_m1`` (built with the fused kernels) or computed."""
    return n.weight_m1.contiguous() if n.weight_m1 is not None else _minus_one(n.weight)


def _views_only(block: Qwen35Layer, dtype: torch.dtype) -> bool:
    """True when every per-layer tensor the step needs exists as is (no derived copy needed)."""
    norms = [block.input_norm, block.post_norm]
    mixer = block.mixer
    if not block.linear:  # attention: its q/k norms too
        norms += [mixer.q_norm, mixer.k_norm]
    if any(n.weight_m1 is None for n in norms):
        return False
    dense = [m for m in mixer.modules() if isinstance(m, DenseLinear)]
    if any(m.weight.dtype != dtype for m in dense):
        return False
    return not block.linear or mixer.norm_act.dtype == dtype


def _runnable(m: torch.nn.Module | None) -> bool:
    """A matrix the step can run: a Triton ternary one (t2 or t3) or a dense one."""
    return isinstance(m, (TritonLinear, DenseLinear))


def _projections_runnable(p: Projections) -> bool:
    return all(_runnable(g.fused) if g.fused is not None else all(_runnable(m) for m in g.parts) for g in p.groups)


def _single_fused(p: Projections) -> TritonLinear | None:
    """The one unrotated row-fused Triton matrix of a projection (norm fuses into its mat-vec)."""
    if len(p.groups) == 1 and not p.group_folded[0] and isinstance(p.groups[0].fused, TritonLinear):
        return p.groups[0].fused
    return None


def _part_module(p: Projections, i: int) -> torch.nn.Module | None:
    gi, j = p.order[i]
    g = p.groups[gi]
    return None if g.fused is not None else g.parts[j]


def _dense_rows(p: Projections, i: int, dtype: torch.dtype) -> torch.Tensor | None:
    """Part ``i``'s rows of a dense matrix (its own or a row-fused one), for in-kernel dots."""
    gi, j = p.order[i]
    g = p.groups[gi]
    m = g.fused if g.fused is not None else g.parts[j]
    if not isinstance(m, DenseLinear):
        return None
    r0 = sum(g.sizes[:j]) if g.fused is not None else 0
    w = m.weight[r0:r0 + g.sizes[j]]
    return w.contiguous() if w.dtype == dtype else w.to(dtype).contiguous()


@dataclass(frozen=True)
class FusedInProjection:
    """A DeltaNet in-projection whose q|k|v and z rows are one unrotated Triton matrix."""

    matrix: TritonLinear
    sizes: list[int]  # rows of each part in ``matrix``
    qkv_index: int  # which part is q|k|v
    z_index: int  # which part is z


@dataclass(frozen=True)
class DeltaNetPlan:
    mixer: GatedDeltaNetBlock
    # dense b and a rows for the gates' in-kernel dot products (same input), or None: a and b projected
    ab: tuple[torch.Tensor, torch.Tensor] | None
    ab_folded: bool  # the dot products read the rotated activation
    in_fused: FusedInProjection | None  # set: the input norm runs inside the mat-vec and the gates kernel
    norm_w: torch.Tensor  # the gated RMSNorm's weight in the model dtype


@dataclass(frozen=True)
class AttentionPlan:
    mixer: GatedAttentionBlock
    q_m1: torch.Tensor  # q/k norm weights minus one (offset form)
    k_m1: torch.Tensor


@dataclass(frozen=True)
class LayerPlan:
    block: Qwen35Layer
    streamed: StreamedLayer | None  # the offload wrapper whose slot holds the weights, if streamed
    in_m1: torch.Tensor  # input / post-attention norm weights minus one (offset form)
    post_m1: torch.Tensor
    mixer: DeltaNetPlan | AttentionPlan


class Qwen35Step:
    """``step(tokens [1], positions [1]) -> logits [V]`` (model dtype), graph-safe; advances the model's
    KV cache and DeltaNet state in place. Build with :func:`qwen35_decode_step`."""

    def __init__(self, model: Qwen35Model, plans: list[LayerPlan]) -> None:
        cfg = model.config
        self.model = model
        self.plans = plans
        self.eps = cfg.rms_norm_eps
        self.rotation = model.rotation
        self.dtype = model.dtype
        self.int8 = model.cache.k.dtype == torch.int8
        head = model.lm_head
        self.head = head
        self.head_fused = isinstance(head, TritonLinear) and not model.lm_head_folded
        self.final_m1 = _minus_one(model.final_norm)
        self.nh, self.nkv, self.hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.sm_scale = self.hd ** -0.5

    @property
    def norm_fused_deltanet_layers(self) -> int:
        """DeltaNet layers whose input norm runs inside the in-projection and the gates kernel."""
        return sum(isinstance(p.mixer, DeltaNetPlan) and p.mixer.in_fused is not None for p in self.plans)

    # ---------------------------------------------------------------- pieces of a layer

    def _project(self, p: Projections, x: torch.Tensor, nw: torch.Tensor, skip: frozenset[int] = frozenset(),
                 act: Activation | None = None) -> list[torch.Tensor | None]:
        """Outputs of ``p`` on ``rmsnorm(x)`` (rotated per group as the model does; ``act``: that
        norm already computed); ``skip``: parts (original indices) computed elsewhere."""
        eps = self.eps
        fused = _single_fused(p)
        if fused is not None and not skip and act is None:
            y = tlin.fused_rmsnorm_matvec(x, nw, eps, fused.codes, fused.scales, fused.group_size, fused.encoding,
                                          weight_offset=1.0)
            parts = y.split(p.groups[0].sizes, dim=-1)
            return [parts[j] for _, j in p.order]
        if act is None:
            act = Activation(tn.rmsnorm(x, nw, eps, weight_offset=1.0), self.rotation)
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

    def _residual_linear(self, m: torch.nn.Module, a: torch.Tensor, folded: bool, x: torch.Tensor) -> torch.Tensor:
        if folded:
            assert self.rotation is not None
            a = self.rotation(a)
        if isinstance(m, TritonLinear):
            return tlin.ternary_matvec(a, m.codes, m.scales, m.group_size, m.encoding, residual=x)
        return x + m(a)

    def _deltanet(self, plan: LayerPlan, dp: DeltaNetPlan, x: torch.Tensor) -> torch.Tensor:
        mx, eps = dp.mixer, self.eps
        state = self.model.state
        if dp.in_fused is not None:  # norm inside the mat-vec's quantisation and inside the gates kernel
            f = dp.in_fused
            lin = f.matrix
            y = tlin.fused_rmsnorm_matvec(x, plan.in_m1, eps, lin.codes, lin.scales, lin.group_size,
                                          lin.encoding, weight_offset=1.0).split(f.sizes, dim=-1)
            qkv, z = y[f.qkv_index], y[f.z_index]
            assert dp.ab is not None
            wb, wa = dp.ab
            gates: dict = dict(x=x, wa=wa, wb=wb, x_norm_weight=plan.in_m1, x_norm_eps=eps)
        else:
            dense_ab = dp.ab is not None
            act = Activation(tn.rmsnorm(x, plan.in_m1, eps, weight_offset=1.0), self.rotation) if dense_ab else None
            qkv, z, b, a = self._project(mx.in_proj, x, plan.in_m1, frozenset((2, 3)) if dense_ab else frozenset(),
                                         act)
            if act is not None:
                assert dp.ab is not None
                wb, wa = dp.ab
                gates = dict(x=act.get(dp.ab_folded), wa=wa, wb=wb)
            else:
                assert a is not None and b is not None
                gates = dict(a=a, b=b)
        assert qkv is not None and z is not None
        mixed = dtk.conv_step(qkv, state.conv[mx.slot], mx.conv_weight)
        o = dtk.gdn_decode(mixed, z, state.recurrent[mx.slot], mx.A, mx.dt_bias, dp.norm_w, mx.eps, mx.nk, **gates)
        if mx.out_perm is not None:
            o = o.index_select(1, mx.out_perm)
        return self._residual_linear(mx.out_proj, o, mx.out_folded, x)

    def _attention(self, plan: LayerPlan, ap: AttentionPlan, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        mx = ap.mixer
        nh, nkv, hd = self.nh, self.nkv, self.hd
        cache, rope = self.model.cache, self.model.rope
        q, k, v = self._project(mx.qkv, x, plan.in_m1)
        assert q is not None and k is not None and v is not None
        gate = None
        if mx.gated:
            qg = q.view(1, nh, 2 * hd)
            q, gate = qg[..., :hd], qg[..., hd:]
        else:
            q = q.view(1, nh, hd)
        k, v = k.view(1, nkv, hd), v.view(1, nkv, hd)
        cos, sin = rope.cos, rope.sin
        kc, vc = cache.k[mx.slot], cache.v[mx.slot]
        ks = cache.k_scale[mx.slot] if self.int8 else None
        vs = cache.v_scale[mx.slot] if self.int8 else None
        qr = tr.qk_norm_rope_kv_write(q, k, v, ap.q_m1, ap.k_m1, cos, sin, pos, kc, vc, self.eps,
                                      weight_offset=1.0, k_scale=ks, v_scale=vs)
        # the output gate (sigmoid) is applied inside the attention launch
        att = ta.decode_attention(qr[0], kc, vc, pos, self.sm_scale, k_scale=ks, v_scale=vs,  # keys [0, pos + 1)
                                  gate=gate[0] if gate is not None else None, len_offset=1)
        return self._residual_linear(mx.o_proj, att.reshape(1, nh * hd), mx.o_folded, x)

    def _mlp(self, plan: LayerPlan, x: torch.Tensor) -> torch.Tensor:
        blk, eps = plan.block, self.eps
        gu = blk.gate_up
        fused = _single_fused(gu)
        if fused is not None:
            m = tlin.swiglu_matvec(x, fused.codes, fused.scales, fused.group_size, fused.encoding,
                                   norm_weight=plan.post_m1, eps=eps, weight_offset=1.0)
        else:
            act = Activation(tn.rmsnorm(x, plan.post_m1, eps, weight_offset=1.0), self.rotation)
            only = gu.groups[0].fused if len(gu.groups) == 1 else None
            g_mod, u_mod = _part_module(gu, 0), _part_module(gu, 1)
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
        return self._residual_linear(blk.down_proj, m, blk.down_folded, x)

    # ---------------------------------------------------------------- the step

    def __call__(self, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        model, rotation, eps = self.model, self.rotation, self.eps
        x = model.embed(tok, self.dtype)  # [1, H]; TernaryEmbedding keeps its constants on the device
        if model.embed_rotated:
            assert rotation is not None
            x = rotation.inverse(x)
        for plan in self.plans:
            if plan.streamed is not None:
                plan.streamed.before()
            if isinstance(plan.mixer, DeltaNetPlan):
                x = self._deltanet(plan, plan.mixer, x)
            else:
                x = self._attention(plan, plan.mixer, x, pos)
            x = self._mlp(plan, x)
            if plan.streamed is not None:
                plan.streamed.after()
        head = self.head
        if self.head_fused:
            logits = tlin.fused_rmsnorm_matvec(x, self.final_m1, eps, head.codes, head.scales, head.group_size,
                                               head.encoding, weight_offset=1.0)
        else:
            h = tn.rmsnorm(x, self.final_m1, eps, weight_offset=1.0)
            if model.lm_head_folded:
                assert rotation is not None
                h = rotation(h)
            logits = head(h)
        return logits.reshape(-1)  # the model's dtype: the decoder's sampler reads it as fp32 (no cast launch)


def _deltanet_plan(block: Qwen35Layer, dtype: torch.dtype) -> DeltaNetPlan | None:
    mixer = block.mixer
    ip = mixer.in_proj
    if not (_projections_runnable(ip) and _runnable(mixer.out_proj)):
        return None
    wb, wa = _dense_rows(ip, 2, dtype), _dense_rows(ip, 3, dtype)
    dense_ab = wb is not None and wa is not None and ip.order[2][0] == ip.order[3][0]  # same input (rotated or not)
    ab = (wb, wa) if dense_ab else None
    # the dot products read the same activation as the dense rows (rotated only if folded)
    ab_folded = ip.group_folded[ip.order[2][0]]
    # q|k|v and z as one unrotated Triton matrix beside dense a/b: RMSNorm fused into its activation
    # quantisation, and the gates' dot products normalise x themselves (no norm launch)
    in_fused = None
    (gq, jq), (gz, jz) = ip.order[0], ip.order[1]
    grp = ip.groups[gq]
    if dense_ab and gq == gz and len(grp.sizes) == 2 and not ab_folded \
            and not ip.group_folded[gq] and isinstance(grp.fused, TritonLinear):
        in_fused = FusedInProjection(grp.fused, grp.sizes, jq, jz)
    norm_w = mixer.norm_act if mixer.norm_act.dtype == dtype else mixer.norm.to(dtype)
    return DeltaNetPlan(mixer, ab, ab_folded, in_fused, norm_w)


def qwen35_decode_step(model: Qwen35Model) -> Qwen35Step | None:
    """The fused step for ``model``, or ``None`` when a linear is neither a Triton ternary matrix (t2 or t3)
    nor a dense one (e.g. the CPU reference backend), a streamed layer would need a derived copy, or
    the KV cache has a dtype the kernels lack. Equal to ``model.forward`` for one token up to float
    rounding order. Streamed and mapped (offloaded) layers and a mapped LM head are supported."""
    dtype = model.dtype
    if model.cache.k.dtype not in KV_DTYPES:
        return None
    plans = []
    for layer in model.layers:
        block, streamed = unwrap_streamed(layer)
        if streamed is not None and not _views_only(block, dtype):
            # a streamed layer's tensors are views into a staging slot that other layers reuse: the
            # step may only hold views of them (taken here, valid whenever the layer is staged),
            # never copies computed now (those would freeze whatever layer the slot held)
            return None
        if not (_projections_runnable(block.gate_up) and _runnable(block.down_proj)):
            return None
        mixer: DeltaNetPlan | AttentionPlan | None
        if block.linear:
            mixer = _deltanet_plan(block, dtype)
        elif _projections_runnable(block.mixer.qkv) and _runnable(block.mixer.o_proj):
            mixer = AttentionPlan(block.mixer, _norm_m1(block.mixer.q_norm), _norm_m1(block.mixer.k_norm))
        else:
            mixer = None
        if mixer is None:
            return None
        plans.append(LayerPlan(block, streamed, _norm_m1(block.input_norm), _norm_m1(block.post_norm), mixer))
    if not _runnable(model.lm_head):
        return None
    return Qwen35Step(model, plans)
