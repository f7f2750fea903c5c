"""The qwen35 architecture (the Qwen3.5 hybrid: Ternary-Bonsai-27B, Bonsai 2): its ArchSpec.

Names and conventions live in :mod:`runtime.model.qwen35.names`; this module only adapts them to
:class:`runtime.formats.arch.ArchSpec`. Source conventions: a GGUF source keeps the +1-folded norms
and ``ssm_a = -exp(A_log)`` as stored (``norm_weight_offset == 0`` and tensor
``linear_attn.A``); an HF source keeps zero-centred norms and ``linear_attn.A_log``
(``norm_weight_offset == 1``). :func:`tensor_list` (the one list of this architecture's
tensors: readers, planner, synthetic weights and the model all read it) follows the same rule.

Value transforms that a rename cannot express use the ArchSpec hooks: ``gguf_name_fn`` (MTP
tensors dropped), ``shape_from_gguf`` (conv ``[C, K]`` -> ``[C, 1, K]``), ``tensor_from_gguf``
(V-head order tiled -> grouped), ``tensor_to_gguf`` (the inverse, plus ``+1`` on norms and
``A_log -> -exp(A_log)`` for HF-convention sources) and ``hf_name_fn``
(``Qwen3_5ForConditionalGeneration`` stores ``model.language_model.*``; vision tower and MTP head
are dropped).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.formats.arch import DEFAULT_SAMPLING, NORM, TERNARY, ArchSpec, TensorInfo, register_arch
from runtime.formats.config_schema import validate_config
from runtime.formats.gguf_tokenizer import PRE_TOKENIZERS, _split_then_bytelevel
from runtime.formats.model_data import Tensor
from runtime.model.config import ModelConfig
from runtime.model.qwen35 import names as q

Shape = tuple[int, ...]

GGUF_GLOBAL = dict(q._GLOBAL_NAMES)
GGUF_BLOCK = dict(q._LAYER_NAMES)


def tensor_list(c: ModelConfig) -> list[TensorInfo]:
    """The tensors in file order. Roles beyond ternary/norm (the DeltaNet keep-list, stored as
    floats in Bonsai files): ``proj_bf16`` (in_proj_a/b), ``conv``, ``a`` (GGUF convention,
    ``-exp(A_log)``) or ``a_log`` (HF convention), ``dt_bias``, ``gated_norm``."""
    h, hd = c.hidden_size, c.head_dim
    kd = c.linear_num_key_heads * c.linear_key_head_dim
    vd = c.linear_num_value_heads * c.linear_value_head_dim
    nv = c.linear_num_value_heads
    out = [TensorInfo("model.embed_tokens.weight", TERNARY, (c.vocab_size, h))]
    for i, kind in enumerate(c.layer_types or []):
        p = f"model.layers.{i}."
        out.append(TensorInfo(p + "input_layernorm.weight", NORM, (h,)))
        if kind == "linear_attention":
            a = p + "linear_attn."
            out += [
                TensorInfo(a + "in_proj_qkv.weight", TERNARY, (2 * kd + vd, h)),
                TensorInfo(a + "in_proj_z.weight", TERNARY, (vd, h)),
                TensorInfo(a + "in_proj_b.weight", "proj_bf16", (nv, h)),
                TensorInfo(a + "in_proj_a.weight", "proj_bf16", (nv, h)),
                TensorInfo(a + "conv1d.weight", "conv", (2 * kd + vd, 1, c.linear_conv_kernel_dim)),
                TensorInfo(a + ("A_log" if c.norm_weight_offset else "A"),
                           "a_log" if c.norm_weight_offset else "a", (nv,)),
                TensorInfo(a + "dt_bias", "dt_bias", (nv,)),
                TensorInfo(a + "norm.weight", "gated_norm", (c.linear_value_head_dim,)),
                TensorInfo(a + "out_proj.weight", TERNARY, (h, vd)),
            ]
        else:
            s = p + "self_attn."
            out += [
                TensorInfo(s + "q_proj.weight", TERNARY, (c.num_heads * hd * (2 if c.attn_output_gate else 1), h)),
                TensorInfo(s + "k_proj.weight", TERNARY, (c.num_kv_heads * hd, h)),
                TensorInfo(s + "v_proj.weight", TERNARY, (c.num_kv_heads * hd, h)),
                TensorInfo(s + "o_proj.weight", TERNARY, (h, c.num_heads * hd)),
                TensorInfo(s + "q_norm.weight", NORM, (hd,)),
                TensorInfo(s + "k_norm.weight", NORM, (hd,)),
            ]
        out += [
            TensorInfo(p + "post_attention_layernorm.weight", NORM, (h,)),
            TensorInfo(p + "mlp.gate_proj.weight", TERNARY, (c.intermediate_size, h)),
            TensorInfo(p + "mlp.up_proj.weight", TERNARY, (c.intermediate_size, h)),
            TensorInfo(p + "mlp.down_proj.weight", TERNARY, (h, c.intermediate_size)),
        ]
    out.append(TensorInfo("model.norm.weight", NORM, (h,)))
    if not c.tie_word_embeddings:
        out.append(TensorInfo("lm_head.weight", TERNARY, (c.vocab_size, h)))
    return out


def is_ternary(name: str, shape: Shape) -> bool:
    """Ternary in Bonsai files: every 2-D matrix except the DeltaNet a/b projections (BF16 keep-list)."""
    return len(shape) == 2 and name.endswith(".weight") and "norm" not in name and \
        not name.endswith(("in_proj_a.weight", "in_proj_b.weight", "conv1d.weight"))


def gguf_shape(hf_name: str, shape: Shape) -> Shape:
    if hf_name.endswith("linear_attn.conv1d.weight") and len(shape) == 2:
        return (shape[0], 1, shape[1])
    return tuple(shape)


def config_from_gguf(meta: Mapping[str, Any], shapes: Mapping[str, Shape], *,
                     source: str = "qwen35 GGUF") -> ModelConfig:
    """``shapes`` keyed by canonical names (as the GGUF reader passes them); fields checked by
    :mod:`runtime.formats.config_schema` with messages naming ``source``."""
    gguf_shapes = {}
    for name, shape in shapes.items():
        try:
            gguf_shapes[q.canonical_name_to_gguf(name)] = tuple(shape)
        except Exception:
            continue
    return q.config_from_gguf(meta, gguf_shapes, source=source)


def config_from_hf(cfg: Mapping[str, Any], shapes: Mapping[str, Shape], *, source: str = "config.json") -> ModelConfig:
    c = q.config_from_hf(cfg, source=source)
    emb = shapes.get("model.embed_tokens.weight")
    if emb is not None:
        c.vocab_size = int(emb[0])
        validate_config(c, source, {"vocab_size": "model.embed_tokens.weight rows"})
    return c


_TYPES = {bool: "bool", int: "u32", float: "f32", str: "str"}


def gguf_metadata(c: ModelConfig) -> dict[str, Any]:
    """The writer's ``{key: (type, value)}`` form of :func:`runtime.model.qwen35.names.gguf_metadata`."""
    out: dict[str, Any] = {}
    for key, value in q.gguf_metadata(c).items():
        if key == "general.architecture":
            continue
        if isinstance(value, list):
            et = "str" if value and isinstance(value[0], str) else "i32"
            out[key] = (f"arr_{et}", value)
        else:
            out[key] = (_TYPES[type(value)], value)
    return out


def gguf_name_fn(gguf_name: str, n_blocks: int | None) -> str | None:
    """GGUF -> canonical name; None for the MTP head (``*.nextn.*`` and blocks past the text layers)."""
    return q.gguf_name_to_canonical(gguf_name, n_blocks)


def tensor_from_gguf(hf_name: str, t: Tensor, config: ModelConfig) -> Tensor:
    return q.tensor_from_gguf(hf_name, t, config)


def tensor_to_gguf(hf_name: str, t: Tensor, config: ModelConfig) -> tuple[str, Tensor]:
    return q.tensor_to_gguf(hf_name, t, config)


# Qwen3.5's vocabulary splits like Qwen2 but keeps combining marks (\p{M}) with letters; llama.cpp
# names it tokenizer.ggml.pre = "qwen35" (regex from llama.cpp's llama-vocab.cpp, i.e. the original
# tokenizer.json pattern; NFC normaliser as in Qwen2's tokenizer.json).
QWEN35_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_TOKENIZERS.setdefault("qwen35", ({"type": "NFC"}, _split_then_bytelevel(QWEN35_REGEX), False))


# PrismML's sampling for the 27B hybrids (model cards); Bonsai 2 = the files with Hadamard rotation metadata
BONSAI_27B_SAMPLING = dict(DEFAULT_SAMPLING, temperature=0.7, top_p=0.95)
BONSAI2_SAMPLING = dict(DEFAULT_SAMPLING, temperature=1.0, top_p=0.95)


def sampling_defaults(c: ModelConfig) -> dict[str, float]:
    return dict(BONSAI2_SAMPLING if c.hadamard is not None else BONSAI_27B_SAMPLING)


class _Qwen35Spec(ArchSpec):
    """ArchSpec whose name mapping also knows ``linear_attn.A_log`` -> ``ssm_a`` (HF sources)."""

    def hf_to_gguf(self, hf_name: str) -> str | None:
        try:
            return q.canonical_name_to_gguf(hf_name)
        except Exception:
            return None


register_arch(_Qwen35Spec(
    name="qwen35",
    gguf_arch="qwen35",
    hf_model_types=["qwen3_5", "qwen3_5_text"],
    hf_architectures=["Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM"],
    gguf_global_names=GGUF_GLOBAL,
    gguf_block_names=GGUF_BLOCK,
    tensor_list=tensor_list,
    is_ternary=is_ternary,
    config_from_gguf=config_from_gguf,
    config_from_hf=config_from_hf,
    gguf_metadata=gguf_metadata,
    gguf_name_fn=gguf_name_fn,
    hf_name_fn=q.hf_name_to_canonical,
    tensor_from_gguf=tensor_from_gguf,
    tensor_to_gguf=tensor_to_gguf,
    shape_from_gguf=gguf_shape,
    model_class="runtime.model.qwen35.model:Qwen35Model",
    sampling_defaults=sampling_defaults,
    thinking_default=True,  # the hybrids are thinking models
))
