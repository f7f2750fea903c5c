"""Qwen3 dense transformer (Ternary Bonsai 1.7B / 4B / 8B) over ternary weights: its ArchSpec and model.

Reads like gpt-fast's ``model.py``: embedding -> N x (RMSNorm, GQA attention with per-head q/k
RMSNorm and RoPE, RMSNorm, SwiGLU MLP) -> RMSNorm -> LM head. Every matmul goes through
:func:`runtime.kernels.linear.prepare_linear`, so the model never knows which kernel runs it; weights
are prepared (and q/k/v and gate/up fused) once at load. Numerics follow Hugging Face's
``Qwen3ForCausalLM`` (fp32 RMSNorm, rotate-half RoPE applied after q/k norm, softmax attention).

``forward(tokens, input_pos)`` takes positions as a tensor and writes a static
:class:`runtime.kv_cache.KVCache`; with ``kv_len=None`` it attends over the whole cache with a
mask, which is the shape a CUDA-graph decode step wants.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from runtime.errors import CancelledError, ModelFormatError, UnsupportedModelError
from runtime.formats.arch import dense_spec, get_arch, register_arch
from runtime.formats.model_data import DenseTensor, ModelData, TernaryTensor
from runtime.generation import CancelToken
from runtime.kernels.linear import prepare_linear
from runtime.kernels.ternary_embedding import model_embedding
from runtime.kv_cache import KVCache
from runtime.model.base import PreparedModel, StepFn
from runtime.model.config import ModelConfig
from runtime.model.rope import RotaryTables, apply_rope

_OPTIONAL_BACKEND_MODULES = ("runtime.kernels.cpu.int4", "runtime.kernels.triton.backend")


def register_optional_backends(device: torch.device | None = None) -> None:
    """Import backend modules that exist so they add themselves to ``linear.BACKENDS``.

    Missing modules or missing dependencies (no triton on CPU-only installs) are fine: the
    reference backend always remains. For a CPU ``device`` the Triton module is not imported at all.
    """
    for name in _OPTIONAL_BACKEND_MODULES:
        if device is not None and device.type == "cpu" and "triton" in name:
            continue
        try:
            importlib.import_module(name)
        except ImportError:
            continue


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF Qwen3RMSNorm: normalise in fp32, cast back, then scale."""
    xf = x.to(torch.float32)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


class DenseLinear(torch.nn.Module):
    """A plain floating-point weight (for sources that store a matrix densely)."""

    backend = "dense"

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.register_buffer("weight", weight, persistent=False)

    @property
    def nbytes(self) -> int:
        return self.weight.numel() * self.weight.element_size()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.to(x.dtype))


def linear_factory(dev: torch.device, backend: str, dtype: torch.dtype
                   ) -> Callable[[TernaryTensor | DenseTensor], torch.nn.Module]:
    """Prepare one weight for ``dev``: ternary through the kernel backend, dense as a plain linear."""
    def make(t: TernaryTensor | DenseTensor) -> torch.nn.Module:
        if isinstance(t, TernaryTensor):
            return prepare_linear(t, dev, backend)
        return DenseLinear(t.data.to(device=dev, dtype=dtype))
    # On the CPU the kernel reads the (memory-mapped) codes in place: a row-fused copy of
    # q/k/v and gate/up would hold those weights twice in RAM for ~1% speed, so keep them apart.
    make.fuse_rows = dev.type != "cpu"  # type: ignore[attr-defined]
    return make


def _fuse_rows(parts: list[TernaryTensor | DenseTensor]) -> TernaryTensor | DenseTensor | None:
    """Stack matrices that share their input (q/k/v, gate/up) into one; None if layouts differ."""
    first = parts[0]
    if all(isinstance(p, TernaryTensor) for p in parts):
        tparts = [p for p in parts if isinstance(p, TernaryTensor)]
        same = all(p.shape[1] == first.shape[1] and p.group_size == first.group_size
                   and p.encoding == first.encoding for p in tparts)
        if not same:
            return None
        rows = sum(p.shape[0] for p in tparts)
        return TernaryTensor((rows, first.shape[1]), first.group_size,
                             torch.cat([p.codes for p in tparts]), torch.cat([p.scales for p in tparts]),
                             first.encoding)
    if all(isinstance(p, DenseTensor) for p in parts):
        return DenseTensor(torch.cat([p.data for p in parts]))  # type: ignore[union-attr]
    return None


class FusedOrSplit(torch.nn.Module):
    """One matmul over row-stacked weights when possible, otherwise one per part; same output."""

    def __init__(self, parts: list[TernaryTensor | DenseTensor], make: Callable[..., torch.nn.Module]) -> None:
        super().__init__()
        self.sizes = [p.shape[0] for p in parts]
        fused = _fuse_rows(parts) if getattr(make, "fuse_rows", True) else None
        self.fused = make(fused) if fused is not None else None
        self.parts = torch.nn.ModuleList([]) if fused is not None else torch.nn.ModuleList(make(p) for p in parts)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        if self.fused is not None:
            return list(self.fused(x).split(self.sizes, dim=-1))
        return [m(x) for m in self.parts]


class Qwen3Block(torch.nn.Module):
    """One decoder layer. Linear modules are whatever the kernel backend prepared."""

    def __init__(self, config: ModelConfig, layer: int, tensors: dict, make: Callable[..., torch.nn.Module],
                 norm: Callable[[str], torch.Tensor]) -> None:
        super().__init__()
        p = f"model.layers.{layer}."
        self.layer = layer
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.eps = config.rms_norm_eps
        self.qkv = FusedOrSplit([tensors[p + f"self_attn.{n}_proj.weight"] for n in "qkv"], make)
        self.o_proj = make(tensors[p + "self_attn.o_proj.weight"])
        self.gate_up = FusedOrSplit([tensors[p + f"mlp.{n}_proj.weight"] for n in ("gate", "up")], make)
        self.down_proj = make(tensors[p + "mlp.down_proj.weight"])
        self.register_buffer("input_norm", norm(p + "input_layernorm.weight"), persistent=False)
        self.register_buffer("post_norm", norm(p + "post_attention_layernorm.weight"), persistent=False)
        # per-head q/k RMSNorm (Qwen3); architectures without it (Llama) declare no such tensors
        self.qk_norm = p + "self_attn.q_norm.weight" in tensors
        if self.qk_norm:
            self.register_buffer("q_norm", norm(p + "self_attn.q_norm.weight"), persistent=False)
            self.register_buffer("k_norm", norm(p + "self_attn.k_norm.weight"), persistent=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, input_pos: torch.Tensor,
                cache: KVCache | None, kv_len: int | None, mask: torch.Tensor | None) -> torch.Tensor:
        """``cache=None`` attends over this chunk's own keys only (no cache written): the
        embedding path, where ``mask [T, T]`` keeps packed texts apart."""
        t = x.shape[0]
        h = rms_norm(x, self.input_norm, self.eps)
        q, k, v = self.qkv(h)
        q = q.view(t, self.num_heads, self.head_dim)
        k = k.view(t, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = rms_norm(q, self.q_norm, self.eps), rms_norm(k, self.k_norm, self.eps)
        v = v.view(t, self.num_kv_heads, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is None:
            kc, vc = k.transpose(0, 1), v.transpose(0, 1)
        else:
            kc, vc = cache.update(self.layer, input_pos, k, v, kv_len)
        attn = F.scaled_dot_product_attention(
            q.transpose(0, 1).unsqueeze(0), kc.unsqueeze(0).to(q.dtype), vc.unsqueeze(0).to(q.dtype),
            attn_mask=mask, enable_gqa=self.num_heads != self.num_kv_heads,
        )
        x = x + self.o_proj(attn[0].transpose(0, 1).reshape(t, self.num_heads * self.head_dim))
        h = rms_norm(x, self.post_norm, self.eps)
        gate, up = self.gate_up(h)
        return x + self.down_proj(F.silu(gate) * up)


class Qwen3Model(PreparedModel):
    """The whole model plus its KV cache. Build with :meth:`from_model_data`.

    Runs every dense architecture whose spec names this class or a subclass (``ARCHES``)."""

    ARCHES: tuple[str, ...] = ("qwen3",)

    def __init__(self, config: ModelConfig, data: ModelData, device: torch.device, dtype: torch.dtype,
                 max_positions: int, backend: str = "auto", kv_dtype: torch.dtype | None = None,
                 progress: Callable[[str, float], None] | None = None, cancel: CancelToken | None = None,
                 placement: Any = None, embedding_only: bool = False) -> None:
        """``placement`` (a :class:`runtime.offload.Placement`) puts layers / the embedding on other
        devices (offload); without it everything lives on ``device``. ``embedding_only`` builds
        no LM head and no KV cache: the model then serves only :meth:`hidden_states` (embedding
        models such as Qwen3-Embedding, whose tied head would be a second copy of the table)."""
        super().__init__()
        if config.arch not in self.ARCHES:
            raise UnsupportedModelError(f"architecture {config.arch!r} is not run by {type(self).__name__}")
        if config.hadamard is not None:
            raise UnsupportedModelError(
                "this file needs the Bonsai 2 Hadamard rotation, which is only implemented for qwen35")
        self.config, self.device, self.dtype = config, device, dtype
        tensors = data.tensors
        missing = [n for n in get_arch(config.arch).expected_shapes(config) if n not in tensors]
        if missing:
            raise ModelFormatError(f"model is missing tensor {missing[0]!r} ({len(missing)} missing in total)")
        register_optional_backends(device)

        def make_for(dev: torch.device) -> Callable[[TernaryTensor | DenseTensor], torch.nn.Module]:
            return linear_factory(dev, backend if dev.type == device.type else "auto", dtype)

        def norm_for(dev: torch.device) -> Callable[[str], torch.Tensor]:
            def norm(name: str) -> torch.Tensor:
                t = tensors[name]
                if not isinstance(t, DenseTensor):
                    raise ModelFormatError(f"norm weight {name!r} must be a dense tensor")
                return t.data.to(device=dev, dtype=dtype)
            return norm

        norm = norm_for(device)

        embed = tensors["model.embed_tokens.weight"]
        self.embed, self.vocab_size = model_embedding(tensors, config.hidden_size, device, dtype, placement)
        blocks = []
        for i in range(config.num_layers):
            if cancel is not None and cancel.cancelled:
                raise CancelledError("model loading was cancelled")
            dev = placement.layer_device(i) if placement is not None else device
            block: torch.nn.Module = Qwen3Block(config, i, tensors, make_for(dev), norm_for(dev))
            if placement is not None:
                block = placement.wrap_layer(i, block)
            blocks.append(block)
            if progress is not None:
                progress("preparing weights", (i + 1) / (config.num_layers + 1))
        self.layers = torch.nn.ModuleList(blocks)
        self.register_buffer("final_norm", norm("model.norm.weight"), persistent=False)
        self.tied = config.tie_word_embeddings
        self.lm_head: torch.nn.Module | None = None
        if not embedding_only:
            head_dev = placement.lm_head_device() if placement is not None else device
            self.lm_head = make_for(head_dev)(embed if self.tied else tensors["lm_head.weight"])
            if placement is not None:
                self.lm_head = placement.wrap_lm_head(self.lm_head)
        # llama.cpp stores some RoPE scalings (llama3) as per-frequency divisors, not metadata
        freqs = tensors.get("rope_freqs.weight")
        self.rope_freqs = freqs.data if isinstance(freqs, DenseTensor) else None
        self.rope = RotaryTables(config, max_positions, device, self.rope_freqs)
        cache_positions = 0 if embedding_only else max_positions
        self.cache = KVCache(config.num_layers, config.num_kv_heads, cache_positions, config.head_dim,
                             kv_dtype or dtype, device)
        if placement is not None:
            placement.finish()
        if progress is not None:
            progress("preparing weights", 1.0)

    def setup_cache(self, max_positions: int, dtype: torch.dtype | None = None) -> None:
        """Reallocate the KV cache and RoPE tables for a new context length (drops cached tokens)."""
        dtype = dtype or self.cache.k.dtype
        self.cache = KVCache(0, 0, 0, 0, dtype, self.device)  # free the old buffers first
        self.cache = KVCache(self.config.num_layers, self.config.num_kv_heads, max_positions,
                             self.config.head_dim, dtype, self.device)
        self.rope = RotaryTables(self.config, max_positions, self.device, self.rope_freqs)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor, kv_len: int | None = None,
                last_only: bool = False, logits_index: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (fp32) for ``tokens [T]`` at positions ``input_pos [T]``; writes their K/V.

        ``kv_len`` (a Python int, usually ``input_pos[-1] + 1``) limits attention to the filled
        part of the cache; ``None`` attends over all positions with a mask (static shapes).
        ``last_only`` computes the LM head for the last token only (prefill). ``logits_index``
        (a device tensor of row indices) computes it for those rows only: the graph-safe form of
        ``last_only`` for a padded chunk whose last real row varies (:mod:`runtime.prefill`).
        """
        x = self.embed(tokens, self.dtype)
        cos, sin = self.rope(input_pos, self.dtype)
        length = kv_len if kv_len is not None else self.cache.max_positions
        mask = None
        if kv_len is None or tokens.shape[0] > 1:
            mask = torch.arange(length, device=tokens.device)[None, :] <= input_pos[:, None]
        for block in self.layers:
            x = block(x, cos, sin, input_pos, self.cache, kv_len, mask)
        if logits_index is not None:
            x = x.index_select(0, logits_index)
        elif last_only:
            x = x[-1:]
        x = rms_norm(x, self.final_norm, self.config.rms_norm_eps)
        if self.lm_head is None:
            raise UnsupportedModelError("this model was prepared for embeddings only (no LM head)")
        return self.lm_head(x).to(torch.float32)

    def decode_step(self) -> StepFn | None:
        """The fused Triton step (:mod:`runtime.model.qwen3_step`) when this build can run it."""
        try:
            from runtime.model.qwen3_step import qwen3_decode_step
        except ImportError:  # no Triton
            return None
        return qwen3_decode_step(self)

    def hidden_states(self, tokens: torch.Tensor, input_pos: torch.Tensor,
                      mask: torch.Tensor | None = None) -> torch.Tensor:
        """Final-norm hidden states ``[T, hidden]`` of ``tokens [T]`` at ``input_pos [T]``.

        Reads and writes no KV cache, so one call can hold several texts packed end to end
        (each with positions from 0) when ``mask [T, T]`` (bool, True = may attend) keeps them
        apart; ``None`` is plain causal attention over the chunk. What embedding models pool.
        """
        x = self.embed(tokens, self.dtype)
        cos, sin = self.rope(input_pos, self.dtype)
        if mask is None:
            idx = torch.arange(tokens.shape[0], device=tokens.device)
            mask = idx[None, :] <= idx[:, None]
        for block in self.layers:
            x = block(x, cos, sin, input_pos, None, None, mask)
        return rms_norm(x, self.final_norm, self.config.rms_norm_eps)


SPEC = register_arch(dense_spec("qwen3", model_class="runtime.model.qwen3:Qwen3Model", qk_norm=True,
                                hf_model_types=["qwen3"], hf_architectures=["Qwen3ForCausalLM"]))
