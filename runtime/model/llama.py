"""Llama 3 (dense): HF ``LlamaForCausalLM`` / GGUF ``llama`` — its ArchSpec and its model.

Llama's forward is Qwen3's without the per-head q/k RMSNorm, so :class:`LlamaModel` is
:class:`runtime.model.qwen3.Qwen3Model` over a tensor list without ``q_norm``/``k_norm`` (the
block runs q/k norm only when the architecture has those tensors). The ``llama3`` RoPE scaling is
one of the variants :mod:`runtime.model.rope` computes for any architecture.

One GGUF convention differs: llama.cpp runs Llama with interleaved ("GPT-J") RoPE, so its converter
permutes the rows of ``attn_q`` / ``attn_k`` within each head; :func:`tensor_from_gguf` undoes that
on read and :func:`tensor_to_gguf` applies it on write, so files match llama.cpp's. llama.cpp also
stores llama3 RoPE scaling as a ``rope_freqs.weight`` tensor of per-frequency divisors rather than
metadata; that optional tensor is read and applied by the rotary tables.
"""

from __future__ import annotations

import torch

from runtime.formats.arch import dense_spec, register_arch
from runtime.formats.model_data import DenseTensor, Tensor, TernaryTensor
from runtime.model.config import ModelConfig
from runtime.model.qwen3 import Qwen3Model


class LlamaModel(Qwen3Model):
    """Llama 3 dense model (GQA, RoPE with optional ``llama3`` scaling, tied or untied head)."""

    ARCHES = ("llama",)


def _gguf_row_order(heads: int, head_dim: int) -> torch.Tensor:
    """GGUF row i holds HF row order[i]: per head, HF halves [2, d/2] become interleaved [d/2, 2]."""
    return torch.arange(heads * head_dim).view(heads, 2, head_dim // 2).transpose(1, 2).reshape(-1)


def _rows(t: Tensor, order: torch.Tensor) -> Tensor:
    if isinstance(t, TernaryTensor):  # codes and scales are per row: reorder both
        return TernaryTensor(t.shape, t.group_size, t.codes.index_select(0, order),
                             t.scales.index_select(0, order), t.encoding)
    return DenseTensor(t.data.index_select(0, order))


def _qk_heads(name: str, c: ModelConfig) -> int | None:
    if name.endswith("self_attn.q_proj.weight"):
        return c.num_heads
    if name.endswith("self_attn.k_proj.weight"):
        return c.num_kv_heads
    return None


def tensor_from_gguf(name: str, t: Tensor, c: ModelConfig) -> Tensor:
    heads = _qk_heads(name, c)
    if heads is None:
        return t
    return _rows(t, torch.argsort(_gguf_row_order(heads, c.head_dim)))


def tensor_to_gguf(name: str, t: Tensor, c: ModelConfig) -> tuple[str, Tensor]:
    gguf_name = SPEC.hf_to_gguf(name)
    if gguf_name is None:
        raise ValueError(f"no GGUF name for tensor {name}")
    heads = _qk_heads(name, c)
    return gguf_name, t if heads is None else _rows(t, _gguf_row_order(heads, c.head_dim))


SPEC = register_arch(dense_spec("llama", model_class="runtime.model.llama:LlamaModel", qk_norm=False,
                                hf_model_types=["llama"], hf_architectures=["LlamaForCausalLM"]))
SPEC.tensor_from_gguf, SPEC.tensor_to_gguf = tensor_from_gguf, tensor_to_gguf
# llama.cpp's converter stores llama3 RoPE scaling as per-frequency divisors (an optional tensor)
SPEC.gguf_global_names["rope_freqs.weight"] = "rope_freqs.weight"
