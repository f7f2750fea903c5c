"""Qwen3's fused one-token decode step (what :meth:`Qwen3Model.decode_step` returns on CUDA).

Why: at batch 1 ``Qwen3Model.forward`` is dozens of small torch ops per layer and the launch count,
not the weights, sets the speed. This step runs the same layer as a handful of fused Triton kernels,
per layer six launches: RMSNorm+QKV mat-vec, q/k-norm+RoPE+KV write, split-KV decode attention over
the live length only, O mat-vec+residual, RMSNorm+gate/up+SiLU*up, down mat-vec+residual; then final
norm + LM head in one. It reads the model's own buffers (no copies), so prefill through
``forward`` and decode through this share the KV cache. ``forward`` stays the reference: the tests
check this step against it.

Streamed (offloaded) layers are supported, and so are mapped ones and a mapped LM head (their Triton
linears read pinned host memory in place: the same calls, nothing to special-case).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from runtime import flags
from runtime.kernels.triton import attention as ta
from runtime.kernels.triton import matvec as tlin
from runtime.kernels.triton import rope as tr
from runtime.kernels.triton.backend import TritonLinear
from runtime.kv_cache import KVCache
from runtime.offload import StreamedLayer, unwrap_streamed

if TYPE_CHECKING:
    from runtime.model.qwen3 import Qwen3Block, Qwen3Model

KV_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.int8)  # KV caches the step's kernels read


@dataclass(frozen=True)
class Qwen3LayerPlan:
    """One layer's weights as the step reads them (t2 Triton matrices)."""

    block: Qwen3Block
    streamed: StreamedLayer | None  # the offload wrapper whose slot holds the weights, if streamed
    qkv: TritonLinear  # row-fused q|k|v
    gate_up: TritonLinear  # row-fused gate|up
    o_proj: TritonLinear
    down_proj: TritonLinear


class Qwen3Step:
    """``step(tokens [1], positions [1]) -> logits [V]`` (model dtype), graph-safe; batched, several sequences in
    their own KV cache slots (:mod:`runtime.batching`). Build with :func:`qwen3_decode_step`."""

    def __init__(self, model: Qwen3Model, layers: list[Qwen3LayerPlan], head: TritonLinear) -> None:
        cfg = model.config
        self.model = model
        self.layers = layers
        self.head = head
        self.dtype, self.eps = model.dtype, cfg.rms_norm_eps
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        hd = cfg.head_dim
        self.nq, self.nkv = cfg.num_heads * hd, cfg.num_kv_heads * hd
        self.sm_scale = hd ** -0.5
        # the attention's split merge writes o_proj's int8 input (a launch that replaces the quantisation launch)
        self.merge_q8 = hd & (hd - 1) == 0 and hd % 32 == 0 and flags.value("TERNARY_ATTN_MERGE_Q8") != "0"

    batched = True  # takes several sequences at once (runtime.batching)

    def __call__(self, tok: torch.Tensor, pos: torch.Tensor, *, slots: torch.Tensor | None = None,
                 cache: KVCache | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
        """One token of one sequence (``tok``, ``pos`` of shape [1], the model's cache): logits ``[V]``.

        Batched (``slots`` given): row b is its own sequence, token ``tok[b]`` at position ``pos[b]``, its keys
        in slot ``slots[b]`` of ``cache`` (a :class:`KVCache` of ``slots * kv_heads`` heads); logits ``[B, V]``
        (into ``out`` if given)."""
        model, eps, dtype, hd = self.model, self.eps, self.dtype, self.head_dim
        nq, nkv = self.nq, self.nkv
        cache = cache if cache is not None else model.cache
        rows = tok.shape[0]
        hq, hkv = self.num_heads, self.num_kv_heads
        x = model.embed(tok, dtype)  # [B, H]; TernaryEmbedding keeps its constants on the device
        cos, sin = model.rope.cos, model.rope.sin
        for i, p in enumerate(self.layers):
            b = p.block
            if p.streamed is not None:
                p.streamed.before()
            qkv, gu, o, d = p.qkv, p.gate_up, p.o_proj, p.down_proj
            y = tlin.fused_rmsnorm_matvec(x, b.input_norm, eps, qkv.codes, qkv.scales, qkv.group_size)
            q = y[:, :nq].view(rows, hq, hd)
            k = y[:, nq:nq + nkv].view(rows, hkv, hd)
            v = y[:, nq + nkv:].view(rows, hkv, hd)
            kc, vc = cache.k[i], cache.v[i]
            ks = cache.k_scale[i] if cache.k_scale is not None else None  # int8 cache: fp32 [Hkv, max_pos]
            vs = cache.v_scale[i] if cache.v_scale is not None else None
            qr = tr.qk_norm_rope_kv_write(q, k, v, b.q_norm, b.k_norm, cos, sin, pos, kc, vc, eps,
                                          k_scale=ks, v_scale=vs, slots=slots)
            qa = tlin.quant_x_planes(rows, nq, dtype, x.device) if self.merge_q8 else None
            # keys [0, pos + 1): no separate pos + 1 launch
            if slots is None:
                a = ta.decode_attention(qr[0], kc, vc, pos, self.sm_scale, k_scale=ks, v_scale=vs,
                                        len_offset=1, q8_out=qa)
            else:
                a = ta.decode_attention(qr.view(rows * hq, hd), kc, vc, pos, self.sm_scale, k_scale=ks, v_scale=vs,
                                        len_offset=1, q8_out=qa, slots=slots, kv_heads=hkv)
            x = tlin.ternary_matvec(a.view(rows, nq), o.codes, o.scales, o.group_size, residual=x, x_int8=qa)
            h = tlin.swiglu_matvec(x, gu.codes, gu.scales, gu.group_size, norm_weight=b.post_norm, eps=eps)
            x = tlin.ternary_matvec(h, d.codes, d.scales, d.group_size, residual=x)
            if p.streamed is not None:
                p.streamed.after()
        head = self.head
        logits = tlin.fused_rmsnorm_matvec(x, model.final_norm, eps, head.codes, head.scales, head.group_size,
                                           out=out)
        # the model's dtype: the decoder's sampler reads it as fp32 (no cast launch)
        return logits.reshape(-1) if slots is None else logits


def qwen3_decode_step(model: Qwen3Model) -> Qwen3Step | None:
    """The fused step for ``model``, or ``None`` when it is not built from t2 Triton linears (CPU-computed
    layers or LM head, dense weights), has no q/k norm, or its KV cache has a dtype the kernels lack."""
    if model.lm_head is None or model.cache.k.dtype not in KV_DTYPES:
        return None

    def lin(m: torch.nn.Module | None) -> TritonLinear | None:
        return m if isinstance(m, TritonLinear) and m.encoding == "t2" else None

    layers = []
    for layer in model.layers:
        block, streamed = unwrap_streamed(layer)
        if not getattr(block, "qk_norm", False):
            return None
        qkv = lin(getattr(getattr(block, "qkv", None), "fused", None))
        gu = lin(getattr(getattr(block, "gate_up", None), "fused", None))
        o, d = lin(getattr(block, "o_proj", None)), lin(getattr(block, "down_proj", None))
        if None in (qkv, gu, o, d):
            return None
        layers.append(Qwen3LayerPlan(block, streamed, qkv, gu, o, d))
    head = lin(model.lm_head)
    if head is None:
        return None
    return Qwen3Step(model, layers, head)
