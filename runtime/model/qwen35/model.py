"""Qwen3.5-family hybrid (Ternary Bonsai 27B, Bonsai 2): Gated DeltaNet + gated full attention.

Text only (the vision tower and the MTP head are not loaded). Same interface as
:class:`runtime.model.qwen3.Qwen3Model` so the engine dispatches on ``config.arch``:
``from_model_data(data, device, dtype, max_positions, backend=..., kv_dtype=...)`` and
``forward(tokens [T], input_pos [T], kv_len=None, last_only=False) -> fp32 logits``.

Numerics follow HF ``Qwen3_5ForCausalLM``:

* RMSNorm ``norm(x) * (w + norm_weight_offset)`` in fp32 (HF stores ``w`` zero-centred and adds 1;
  a GGUF has the 1 folded in) - except the DeltaNet gated norm, which is always ``w * norm(x)``.
* Full attention (every ``full_attention_interval``-th layer): ``q_proj`` gives ``[q | gate]`` per
  head, per-head q/k RMSNorm, RoPE on the first ``partial_rotary_factor * head_dim`` dims (MRoPE
  sections collapse to plain RoPE for text: all three position streams are equal), GQA softmax
  attention, output times ``sigmoid(gate)``, ``o_proj``. Only these layers have a KV cache.
* Gated DeltaNet layers: see :mod:`runtime.model.qwen35.deltanet`; their conv + recurrent state is a
  fixed-size static buffer (:class:`Qwen35State`), independent of context length.

State rule: the recurrent state cannot be rewound. A forward at ``input_pos[0] == 0`` starts a new
sequence (the state is zeroed automatically in eager mode; a CUDA-graph caller calls
:meth:`Qwen35Model.reset_state`). Reusing a cached prefix is only valid when the new tokens extend
exactly what was processed (``supports_prefix_rewind`` is False).

Bonsai 2 rotation (``config.hadamard``): every folded matmul receives ``R(x)``, computed once per
distinct input (q/k/v share one, gate/up share one, GDN qkv/z share one); the embedding output
gets ``R^T``. See :mod:`runtime.model.qwen35.hadamard`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from runtime import flags
from runtime.errors import CancelledError, ModelFormatError, UnsupportedModelError
from runtime.formats.arch import get_arch
from runtime.formats.model_data import DenseTensor, ModelData, TernaryTensor
from runtime.generation import CancelToken
from runtime.kernels.ternary_embedding import model_embedding
from runtime.kv_cache import KVCache
from runtime.model.base import PreparedModel, StepFn
from runtime.model.config import ModelConfig
from runtime.model.qwen3 import linear_factory, register_optional_backends
from runtime.model.qwen35 import deltanet
from runtime.model.qwen35.hadamard import (
    HadamardRotation,
    refuse_if_rotated_without_metadata,
    validate_rotation,
)
from runtime.model.qwen35.names import v_head_permutation
from runtime.model.qwen35.projections import Activation, Projections
from runtime.model.rope import RotaryTables, apply_rope

ARCH = "qwen35"


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF ``Qwen3_5RMSNorm``: normalise and scale in fp32, then cast (``weight`` already has the offset)."""
    xf = x.to(torch.float32)
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)


def _residual_linear(mod: torch.nn.Module, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """``residual + mod(x)``; one launch when the backend fuses the residual add (Triton)."""
    if getattr(mod, "backend", "") == "triton":
        return mod(x, residual=residual)
    return residual + mod(x)


class _Norm(torch.nn.Module):
    """Qwen3.5 RMSNorm with the offset already added to ``weight``; one Triton launch on CUDA."""

    def __init__(self, weight: torch.Tensor, eps: float, fused: bool) -> None:
        super().__init__()
        self.eps, self.fused = eps, fused
        self.register_buffer("weight", weight, persistent=False)
        # the kernel computes x * rsqrt * (w + offset) in fp32: pass w - 1 with offset 1 (HF order)
        self.register_buffer("weight_m1", weight - 1.0 if fused else None, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            from runtime.kernels.triton.norm import rmsnorm
            return rmsnorm(x, self.weight_m1, self.eps, weight_offset=1.0)
        return rms_norm(x, self.weight, self.eps)


class Qwen35State(torch.nn.Module):
    """Static per-sequence state: DeltaNet conv windows and recurrent matrices (fp32)."""

    def __init__(self, layers: int, conv_dim: int, kernel: int, v_heads: int, k_dim: int, v_dim: int,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        super().__init__()
        self.register_buffer("conv", torch.zeros(layers, conv_dim, max(kernel - 1, 0), dtype=dtype, device=device),
                             persistent=False)
        self.register_buffer("recurrent", torch.zeros(layers, v_heads, k_dim, v_dim, dtype=torch.float32,
                                                      device=device), persistent=False)

    @property
    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in (self.conv, self.recurrent))

    def reset(self) -> None:
        self.conv.zero_()
        self.recurrent.zero_()


def state_bytes(config: ModelConfig, conv_dtype_bytes: int = 2) -> int:
    """Bytes of :class:`Qwen35State` for one sequence (independent of context length)."""
    n = sum(1 for t in (config.layer_types or []) if t == "linear_attention")
    conv_dim = 2 * config.linear_num_key_heads * config.linear_key_head_dim + \
        config.linear_num_value_heads * config.linear_value_head_dim
    rec = n * config.linear_num_value_heads * config.linear_key_head_dim * config.linear_value_head_dim * 4
    return rec + n * (config.linear_conv_kernel_dim - 1) * conv_dim * conv_dtype_bytes


class GatedDeltaNetBlock(torch.nn.Module):
    """Token mixer of a linear-attention layer (HF ``Qwen3_5GatedDeltaNet``)."""

    def __init__(self, config: ModelConfig, layer: int, slot: int, tensors: dict, make: Callable[..., torch.nn.Module],
                 dense: Callable[[str], torch.Tensor], folded: set[str], use_fla: bool,
                 act_dtype: torch.dtype = torch.float32, fused: bool = False) -> None:
        super().__init__()
        p = f"model.layers.{layer}.linear_attn."
        self.slot = slot
        self.nk, self.nv = config.linear_num_key_heads, config.linear_num_value_heads
        self.dk, self.dv = config.linear_key_head_dim, config.linear_value_head_dim
        self.key_dim, self.value_dim = self.nk * self.dk, self.nv * self.dv
        self.eps = config.rms_norm_eps
        self.use_fla = use_fla
        self.fused = fused  # Triton conv step / gates / gated norm (runtime.kernels.triton.deltanet)
        names = [p + "in_proj_qkv.weight", p + "in_proj_z.weight", p + "in_proj_b.weight", p + "in_proj_a.weight"]
        self.in_proj = Projections([tensors[n] for n in names], [n in folded for n in names], make)
        self.out_name = p + "out_proj.weight"
        self.out_folded = self.out_name in folded
        self.out_proj = make(tensors[self.out_name])
        conv = dense(p + "conv1d.weight")
        self.register_buffer("conv_weight", conv.reshape(conv.shape[0], -1).to(torch.float32), persistent=False)
        if p + "A_log" in tensors:
            a = -torch.exp(dense(p + "A_log").to(torch.float32))
        elif p + "A" in tensors:
            a = dense(p + "A").to(torch.float32)
        else:
            raise ModelFormatError(f"layer {layer}: missing {p}A_log (or the GGUF ssm_a)")
        self.register_buffer("A", a, persistent=False)
        self.register_buffer("dt_bias", dense(p + "dt_bias").to(torch.float32), persistent=False)
        self.register_buffer("norm", dense(p + "norm.weight").to(torch.float32), persistent=False)
        self.register_buffer("norm_act", self.norm.to(act_dtype), persistent=False)
        hc = config.hadamard
        perm = None
        if self.out_folded and hc is not None and not hc.gdn_v_grouped and self.nk != self.nv:
            # out_proj was folded over the tiled V-head order: feed it that order before rotating
            perm = v_head_permutation(self.nk, self.nv, self.dv, to_grouped=False).to(conv.device)
        self.register_buffer("out_perm", perm, persistent=False)

    def forward(self, h: torch.Tensor, state: Qwen35State, rotation: HadamardRotation | None,
                residual: torch.Tensor) -> torch.Tensor:
        """``residual + out_proj(mixer(h))``."""
        t = h.shape[0]
        qkv, z, b, a = self.in_proj(Activation(h, rotation))
        if self.fused:
            from runtime.kernels.triton import deltanet as dtk
        if self.fused and t == 1:
            mixed = dtk.conv_step(qkv, state.conv[self.slot], self.conv_weight)
        else:
            mixed = deltanet.causal_conv1d(qkv, state.conv[self.slot], self.conv_weight)
        q, k, v = mixed.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = q.reshape(t, self.nk, self.dk)
        k = k.reshape(t, self.nk, self.dk)
        v = v.reshape(t, self.nv, self.dv)
        if self.fused:
            g, beta = dtk.gates(a, b, self.A, self.dt_bias)
        else:
            beta = torch.sigmoid(b)
            g = self.A * F.softplus(a.to(torch.float32) + self.dt_bias)
        o = deltanet.gated_delta_rule(q, k, v, g, beta, state.recurrent[self.slot], self.use_fla)
        norm_w = self.norm_act if self.norm_act.dtype == h.dtype else self.norm.to(h.dtype)
        gated_norm = dtk.gated_rms_norm if self.fused else deltanet.gated_rms_norm
        o = gated_norm(o.to(h.dtype), z.reshape(t, self.nv, self.dv), norm_w, self.eps)
        o = o.reshape(t, self.value_dim)
        if self.out_perm is not None:
            o = o.index_select(1, self.out_perm)
        return _residual_linear(self.out_proj, Activation(o, rotation).get(self.out_folded), residual)


class GatedAttentionBlock(torch.nn.Module):
    """Token mixer of a full-attention layer (HF ``Qwen3_5Attention`` with the output gate)."""

    def __init__(self, config: ModelConfig, layer: int, slot: int, tensors: dict, make: Callable[..., torch.nn.Module],
                 norm: Callable[[str], torch.Tensor], folded: set[str], fused: bool = False) -> None:
        super().__init__()
        p = f"model.layers.{layer}.self_attn."
        self.slot = slot
        self.nh, self.nkv, self.hd = config.num_heads, config.num_kv_heads, config.head_dim
        self.rot_dim = int(config.head_dim * config.partial_rotary_factor)
        self.eps = config.rms_norm_eps
        self.gated = config.attn_output_gate
        names = [p + f"{n}_proj.weight" for n in "qkv"]
        q_rows = tensors[names[0]].shape[0]
        expect = self.nh * self.hd * (2 if self.gated else 1)
        if q_rows != expect:
            raise ModelFormatError(f"{names[0]} has {q_rows} rows, expected {expect}")
        self.qkv = Projections([tensors[n] for n in names], [n in folded for n in names], make)
        self.o_name = p + "o_proj.weight"
        self.o_folded = self.o_name in folded
        self.o_proj = make(tensors[self.o_name])
        self.q_norm = _Norm(norm(p + "q_norm.weight"), self.eps, fused)
        self.k_norm = _Norm(norm(p + "k_norm.weight"), self.eps, fused)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, input_pos: torch.Tensor,
                cache: KVCache, kv_len: int | None, mask: torch.Tensor | None,
                rotation: HadamardRotation | None, residual: torch.Tensor) -> torch.Tensor:
        """``residual + o_proj(attention(h))``."""
        t = h.shape[0]
        q, k, v = self.qkv(Activation(h, rotation))
        gate = None
        if self.gated:
            qg = q.view(t, self.nh, 2 * self.hd)
            q, gate = qg[..., :self.hd], qg[..., self.hd:].reshape(t, self.nh * self.hd)
        q = self.q_norm(q.reshape(t, self.nh, self.hd))
        k = self.k_norm(k.view(t, self.nkv, self.hd))
        v = v.view(t, self.nkv, self.hd)
        r = self.rot_dim
        q = torch.cat([apply_rope(q[..., :r], cos, sin), q[..., r:]], dim=-1)
        k = torch.cat([apply_rope(k[..., :r], cos, sin), k[..., r:]], dim=-1)
        kc, vc = cache.update(self.slot, input_pos, k, v, kv_len)
        attn = F.scaled_dot_product_attention(
            q.transpose(0, 1).unsqueeze(0), kc.unsqueeze(0).to(q.dtype), vc.unsqueeze(0).to(q.dtype),
            attn_mask=mask, enable_gqa=self.nh != self.nkv,
        )
        o = attn[0].transpose(0, 1).reshape(t, self.nh * self.hd)
        if gate is not None:
            o = o * torch.sigmoid(gate)
        return _residual_linear(self.o_proj, Activation(o, rotation).get(self.o_folded), residual)


class Qwen35Layer(torch.nn.Module):
    def __init__(self, config: ModelConfig, layer: int, mixer: torch.nn.Module, tensors: dict,
                 make: Callable[..., torch.nn.Module], norm: Callable[[str], torch.Tensor], folded: set[str],
                 fused: bool = False) -> None:
        super().__init__()
        p = f"model.layers.{layer}."
        self.eps = config.rms_norm_eps
        self.mixer = mixer
        self.linear = isinstance(mixer, GatedDeltaNetBlock)
        self.input_norm = _Norm(norm(p + "input_layernorm.weight"), self.eps, fused)
        self.post_norm = _Norm(norm(p + "post_attention_layernorm.weight"), self.eps, fused)
        names = [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"]
        self.gate_up = Projections([tensors[n] for n in names], [n in folded for n in names], make)
        self.down_name = p + "mlp.down_proj.weight"
        self.down_folded = self.down_name in folded
        self.down_proj = make(tensors[self.down_name])
        # decode: silu(gate) * up in the same launch as the matvec, when gate/up are one Triton matrix
        only = self.gate_up.groups[0] if len(self.gate_up.groups) == 1 else None
        self.swiglu = only.fused if fused and only is not None and getattr(only.fused, "backend", "") == "triton" \
            else None
        self.gate_up_folded = self.gate_up.group_folded[0]

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, input_pos: torch.Tensor,
                cache: KVCache, state: Qwen35State, kv_len: int | None, mask: torch.Tensor | None,
                rotation: HadamardRotation | None) -> torch.Tensor:
        h = self.input_norm(x)
        if self.linear:
            x = self.mixer(h, state, rotation, x)
        else:
            x = self.mixer(h, cos, sin, input_pos, cache, kv_len, mask, rotation, x)
        act = Activation(self.post_norm(x), rotation)
        if self.swiglu is not None and x.shape[0] <= 8:
            from runtime.kernels.triton.matvec import swiglu_matvec
            sw = self.swiglu
            m = swiglu_matvec(act.get(self.gate_up_folded), sw.codes, sw.scales, sw.group_size, sw.encoding)
        else:
            gate, up = self.gate_up(act)
            m = F.silu(gate) * up
        return _residual_linear(self.down_proj, Activation(m, rotation).get(self.down_folded), x)


class Qwen35Model(PreparedModel):
    """The whole hybrid model plus its caches. Build with :meth:`from_model_data`."""

    STATE_PREFIXES = ("cache.", "rope.", "state.")

    supports_prefix_rewind = False

    def __init__(self, config: ModelConfig, data: ModelData, device: torch.device, dtype: torch.dtype,
                 max_positions: int, backend: str = "auto", kv_dtype: torch.dtype | None = None,
                 progress: Callable[[str, float], None] | None = None, cancel: CancelToken | None = None,
                 fused_kernels: bool | None = None, placement: Any = None, use_fla: bool | None = None) -> None:
        """``placement`` (a :class:`runtime.offload.Placement`): streamed or mapped layers and a
        host-side embedding / LM head are supported; CPU-computed layers are not (the DeltaNet state
        and the rotation live on the GPU), and are refused."""
        super().__init__()
        if config.arch != ARCH:
            raise UnsupportedModelError(f"architecture {config.arch!r} is not a Qwen3.5-family hybrid")
        if not config.layer_types or len(config.layer_types) != config.num_layers:
            raise ModelFormatError("qwen35 config must list a layer type for every layer")
        bad = {t for t in config.layer_types} - {"linear_attention", "full_attention"}
        if bad:
            raise UnsupportedModelError(f"unsupported qwen35 layer type(s): {', '.join(sorted(bad))}")
        if config.linear_num_value_heads % max(config.linear_num_key_heads, 1):
            raise ModelFormatError("DeltaNet value heads must be a multiple of key heads")
        self.config, self.device, self.dtype = config, device, dtype
        tensors = data.tensors
        refuse_if_rotated_without_metadata(config.hadamard, data.name, data.provenance.source_name)
        # the ArchSpec's list; a GGUF-convention A may stand in for an HF-convention A_log and back
        missing = [n for n in get_arch(ARCH).expected_shapes(config) if n not in tensors
                   and not n.endswith(("linear_attn.A", "linear_attn.A_log"))]
        if missing:
            raise ModelFormatError(f"model is missing tensor {missing[0]!r} ({len(missing)} missing in total)")
        register_optional_backends(device)

        hc = config.hadamard
        self.rotation: HadamardRotation | None = None
        folded: set[str] = set()
        inverse: set[str] = set()
        if hc is not None:
            validate_rotation(hc, {n: tuple(t.shape) for n, t in tensors.items()})
            self.rotation = HadamardRotation.from_config(hc, device)
            folded, inverse = set(hc.weight_names), set(hc.inverse_weight_names)
            unknown = inverse - {"model.embed_tokens.weight"}
            if unknown:
                raise UnsupportedModelError(f"inverse rotation is only supported on the embedding, not {sorted(unknown)}")

        def make_for(dev: torch.device) -> Callable[[TernaryTensor | DenseTensor], torch.nn.Module]:
            return linear_factory(dev, backend if dev.type == device.type else "auto", dtype)

        make = make_for(device)

        def dense(name: str) -> torch.Tensor:
            t = tensors[name]
            if not isinstance(t, DenseTensor):
                raise ModelFormatError(f"{name!r} must be a dense tensor")
            return t.data.to(device=device)

        offset = config.norm_weight_offset

        def norm(name: str) -> torch.Tensor:
            return dense(name).to(torch.float32) + offset

        embed = tensors["model.embed_tokens.weight"]
        self.embed, self.vocab_size = model_embedding(tensors, config.hidden_size, device, dtype, placement)
        self.embed_rotated = "model.embed_tokens.weight" in inverse
        # fla-core Triton kernels for the recurrence on CUDA when installed (None = auto). Not for
        # fp32 activations by default: fla's chunked kernels use tl.dot's default precision, which is
        # TF32 for fp32 inputs (10-bit mantissa; ~0.05-0.1 nats after 80 tokens of a tiny model), and
        # fp32 on CUDA exists to verify against the CPU, where the torch path is exact fp32.
        if use_fla is None:
            use_fla = dtype != torch.float32 and deltanet.fla_available()
        use_fla = device.type == "cuda" and use_fla
        # Triton RMSNorm / fused residual / SwiGLU epilogues: default on CUDA (fewer launches per step)
        fused = device.type == "cuda" if fused_kernels is None else fused_kernels
        if fused:
            try:
                import runtime.kernels.triton.deltanet  # noqa: F401
                import runtime.kernels.triton.norm  # noqa: F401
            except ImportError:
                fused = False
        self.fused_kernels = fused
        self.uses_fla = use_fla
        layers = []
        n_lin = n_full = 0
        for i, kind in enumerate(config.layer_types):
            if cancel is not None and cancel.cancelled:
                raise CancelledError("model loading was cancelled")
            mixer: torch.nn.Module
            if kind == "linear_attention":
                mixer = GatedDeltaNetBlock(config, i, n_lin, tensors, make, dense, folded, use_fla, dtype, fused)
                n_lin += 1
            else:
                mixer = GatedAttentionBlock(config, i, n_full, tensors, make, norm, folded, fused)
                n_full += 1
            layer: torch.nn.Module = Qwen35Layer(config, i, mixer, tensors, make, norm, folded, fused)
            if placement is not None:
                if placement.layer_device(i) != device:
                    raise UnsupportedModelError(
                        "this plan computes some layers on the CPU, which the hybrid (qwen35) model does not "
                        "support; use streamed or mapped offload or --device cpu")
                layer = placement.wrap_layer(i, layer)
            layers.append(layer)
            if progress is not None:
                progress("preparing weights", (i + 1) / (config.num_layers + 1))
        self.layers = torch.nn.ModuleList(layers)
        self.n_linear, self.n_full = n_lin, n_full
        self.register_buffer("final_norm", norm("model.norm.weight"), persistent=False)
        self.tied = config.tie_word_embeddings
        head_dev = placement.lm_head_device() if placement is not None else device
        self.lm_head = make_for(head_dev)(embed if self.tied else tensors["lm_head.weight"])
        if placement is not None:
            self.lm_head = placement.wrap_lm_head(self.lm_head)
        self.lm_head_folded = ("lm_head.weight" in folded) or (self.tied and self.embed_rotated)
        self.kv_dtype = kv_dtype or dtype
        self.rope = RotaryTables(config, max_positions, device)
        self.cache = KVCache(n_full, config.num_kv_heads, max_positions, config.head_dim, self.kv_dtype, device)
        self.state = self._new_state()
        if placement is not None:
            placement.finish()
        if progress is not None:
            progress("preparing weights", 1.0)

    def _new_state(self) -> Qwen35State:
        c = self.config
        conv_dim = 2 * c.linear_num_key_heads * c.linear_key_head_dim + c.linear_num_value_heads * c.linear_value_head_dim
        return Qwen35State(self.n_linear, conv_dim, c.linear_conv_kernel_dim, c.linear_num_value_heads,
                           c.linear_key_head_dim, c.linear_value_head_dim, self.dtype, self.device)

    def setup_cache(self, max_positions: int, dtype: torch.dtype | None = None) -> None:
        """Reallocate the KV cache and RoPE tables for a new context length (drops the sequence)."""
        dtype = dtype or self.cache.k.dtype
        c = self.config
        self.cache = KVCache(0, 0, 0, 0, dtype, self.device)
        self.cache = KVCache(self.n_full, c.num_kv_heads, max_positions, c.head_dim, dtype, self.device)
        self.rope = RotaryTables(c, max_positions, self.device)
        self.state.reset()

    def reset_state(self) -> None:
        """Start a new sequence: zero the DeltaNet conv and recurrent state (KV needs no reset)."""
        self.state.reset()

    def state_bytes(self) -> int:
        return self.state.nbytes

    def sequence_state(self) -> tuple[torch.Tensor, ...]:
        """The DeltaNet conv windows and recurrent matrices: a step advances them (not idempotent)."""
        return (self.state.conv, self.state.recurrent)

    def decode_step(self) -> StepFn | None:
        """The fused Triton step (:mod:`runtime.model.qwen35.step`; measured on the H200: 106 tok/s for
        the 27B PTQ1_0 shapes against 7.5 through ``forward``) when this build can run it;
        ``TERNARY_FUSED_HYBRID=0`` turns it off (the decoder then steps the graph-captured ``forward``)."""
        if flags.value("TERNARY_FUSED_HYBRID") != "1":
            return None
        try:
            from runtime.model.qwen35.step import qwen35_decode_step
        except ImportError:  # no Triton
            return None
        return qwen35_decode_step(self)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor, kv_len: int | None = None,
                last_only: bool = False) -> torch.Tensor:
        """Logits (fp32) for ``tokens [T]`` at positions ``input_pos [T]`` (consecutive).

        Writes K/V of the attention layers and advances the DeltaNet state. ``kv_len`` and
        ``last_only`` as in :meth:`runtime.model.qwen3.Qwen3Model.forward`.
        """
        if not _capturing_or_compiling(tokens) and int(input_pos[0]) == 0:
            self.state.reset()
        x = self.embed(tokens, self.dtype)
        if self.embed_rotated:
            assert self.rotation is not None
            x = self.rotation.inverse(x)
        cos, sin = self.rope(input_pos, self.dtype)
        length = kv_len if kv_len is not None else self.cache.max_positions
        mask = None
        if kv_len is None or tokens.shape[0] > 1:
            mask = torch.arange(length, device=tokens.device)[None, :] <= input_pos[:, None]
        for layer in self.layers:
            x = layer(x, cos, sin, input_pos, self.cache, self.state, kv_len, mask, self.rotation)
        if last_only:
            x = x[-1:]
        x = rms_norm(x, self.final_norm, self.config.rms_norm_eps)
        if self.lm_head_folded:
            assert self.rotation is not None
            x = self.rotation(x)
        return self.lm_head(x).to(torch.float32)


def _capturing_or_compiling(t: torch.Tensor) -> bool:
    """True inside CUDA-graph capture or torch.compile, where the caller owns :meth:`reset_state`."""
    if torch.compiler.is_compiling():
        return True
    return t.is_cuda and torch.cuda.is_current_stream_capturing()
