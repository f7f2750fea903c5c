"""What each architecture means to the file formats: names, shapes, ternary coverage, metadata.

Why a registry: GGUF, Hugging Face and ``.ternary`` readers all need to know, per architecture,
which tensors must exist (and their shapes), which of them are ternary, how GGUF names map to the
canonical Hugging Face names and how GGUF / ``config.json`` metadata become a :class:`ModelConfig`.
Keeping that in one :class:`ArchSpec` per architecture means a new architecture is one module:
``runtime/formats/arch_<name>.py`` that calls :func:`register_arch` (it is imported on first use
by :func:`get_arch`), e.g. ``arch_qwen35.py`` for the hybrid 27B models.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.errors import ModelFormatError, UnsupportedModelError
from runtime.formats.config_schema import (
    MAX_CONTEXT,
    MAX_FFN,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_LAYERS,
    Fields,
    check_layer_count,
    validate_config,
)
from runtime.formats.model_data import Tensor
from runtime.model.config import ModelConfig, RopeScaling

Shape = tuple[int, ...]


@dataclass
class ArchSpec:
    """Everything format code needs to know about one architecture (see module docstring)."""

    name: str  # ModelConfig.arch
    gguf_arch: str  # general.architecture
    hf_model_types: list[str]  # config.json model_type values
    gguf_global_names: dict[str, str]  # GGUF name -> HF name, for tensors outside blocks
    gguf_block_names: dict[str, str]  # "attn_q.weight" -> "self_attn.q_proj.weight"
    expected_shapes: Callable[[ModelConfig], dict[str, Shape]]  # required tensors and shapes
    is_ternary: Callable[[str, Shape], bool]  # canonical name, shape -> stored as ternary?
    # (metadata, canonical shapes, *, source=file name) -> config, every field checked (config_schema)
    config_from_gguf: Callable[..., ModelConfig]
    config_from_hf: Callable[..., ModelConfig]
    gguf_metadata: Callable[[ModelConfig], dict[str, Any]]  # arch keys for the GGUF writer
    hf_block_prefix: str = "model.layers."
    gguf_block_prefix: str = "blk."
    # ---- optional hooks for architectures that need more than renaming (e.g. qwen35) ----------
    # GGUF name (+ block_count) -> canonical name; None = a tensor the text model ignores (dropped);
    # raise for unknown names. Replaces the dict lookup when set.
    gguf_name_fn: Callable[[str, int | None], str | None] | None = None
    # HF checkpoint name -> canonical name (None = ignore, e.g. a vision tower). Default: identity.
    hf_name_fn: Callable[[str], str | None] | None = None
    # value/layout conversions after decoding (canonical name, tensor, config) -> tensor
    tensor_from_gguf: Callable[[str, Tensor, ModelConfig], Tensor] | None = None
    tensor_from_hf: Callable[[str, Tensor, ModelConfig], Tensor] | None = None
    # canonical tensor -> (GGUF name, tensor in GGUF conventions), for the writer
    tensor_to_gguf: Callable[[str, Tensor, ModelConfig], tuple[str, Tensor]] | None = None
    # canonical shape of a GGUF tensor when the layout differs (e.g. conv [C, K] -> [C, 1, K])
    shape_from_gguf: Callable[[str, Shape], Shape] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    # ---- name mapping -------------------------------------------------------------------------
    def gguf_to_hf(self, gguf_name: str) -> str | None:
        """Canonical name of a GGUF tensor, or None if it is not one of this architecture's."""
        if gguf_name in self.gguf_global_names:
            return self.gguf_global_names[gguf_name]
        if gguf_name.startswith(self.gguf_block_prefix):
            idx, _, rest = gguf_name[len(self.gguf_block_prefix):].partition(".")
            if idx.isdigit() and rest in self.gguf_block_names:
                return f"{self.hf_block_prefix}{int(idx)}.{self.gguf_block_names[rest]}"
        return None

    def hf_to_gguf(self, hf_name: str) -> str | None:
        for g, h in self.gguf_global_names.items():
            if h == hf_name:
                return g
        if hf_name.startswith(self.hf_block_prefix):
            idx, _, rest = hf_name[len(self.hf_block_prefix):].partition(".")
            if idx.isdigit():
                for g, h in self.gguf_block_names.items():
                    if h == rest:
                        return f"{self.gguf_block_prefix}{int(idx)}.{g}"
        return None


_ARCHS: dict[str, ArchSpec] = {}


def register_arch(spec: ArchSpec) -> None:
    _ARCHS[spec.name] = spec


# Hugging Face model_type -> the arch module that registers it (modules are named after the GGUF arch).
_MODULE_FOR_MODEL_TYPE = {"qwen3_5": "qwen35", "qwen3_5_text": "qwen35"}


def _try_import(name: str) -> None:
    name = _MODULE_FOR_MODEL_TYPE.get(name, name)
    if not name.replace("_", "").isalnum():
        return
    try:
        importlib.import_module(f"runtime.formats.arch_{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"runtime.formats.arch_{name}":
            raise


def get_arch(name: str) -> ArchSpec:
    """Spec by ModelConfig.arch name (imports ``runtime.formats.arch_<name>`` on demand)."""
    if name not in _ARCHS:
        _try_import(name)
    if name not in _ARCHS:
        raise UnsupportedModelError(f"unsupported architecture {name!r} (known: {', '.join(sorted(_ARCHS))})")
    return _ARCHS[name]


def arch_for_gguf(gguf_arch: str) -> ArchSpec:
    for spec in _ARCHS.values():
        if spec.gguf_arch == gguf_arch:
            return spec
    _try_import(gguf_arch)
    for spec in _ARCHS.values():
        if spec.gguf_arch == gguf_arch:
            return spec
    raise UnsupportedModelError(f"unsupported GGUF architecture {gguf_arch!r} (known: "
                                f"{', '.join(sorted(s.gguf_arch for s in _ARCHS.values()))})")


def arch_for_hf(model_type: str) -> ArchSpec:
    for spec in _ARCHS.values():
        if model_type in spec.hf_model_types:
            return spec
    _try_import(model_type)
    for spec in _ARCHS.values():
        if model_type in spec.hf_model_types:
            return spec
    raise UnsupportedModelError(f"unsupported Hugging Face model_type {model_type!r} (known: "
                                f"{', '.join(sorted(t for s in _ARCHS.values() for t in s.hf_model_types))})")


def check_tensor_set(config: ModelConfig, shapes: Mapping[str, Shape], *, source: str,
                     names: Mapping[str, str] | None = None) -> None:
    """Refuse a config out of range, a layer count the tensor table does not have, missing tensors
    and shapes that disagree with the config (names the first problems). The layer count is
    checked before the table of expected tensors is built: that table grows with it."""
    names = names or {}
    validate_config(config, source, names)
    check_layer_count(config.num_layers, shapes, source, field=names.get("num_layers", "num_layers"))
    spec = get_arch(config.arch)
    expected = spec.expected_shapes(config)
    missing = [n for n in expected if n not in shapes]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise ModelFormatError(f"{source}: missing tensors: {', '.join(missing[:3])}{more}")
    for name, shape in expected.items():
        if tuple(shapes[name]) != tuple(shape):
            raise ModelFormatError(f"{source}: tensor {name} has shape {list(shapes[name])}, "
                                   f"expected {list(shape)} from the model config")


# ================================================================================================
# qwen3 (dense): Ternary-Bonsai 1.7B / 4B / 8B

QWEN3_GGUF_GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
QWEN3_GGUF_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def _qwen3_shapes(c: ModelConfig) -> dict[str, Shape]:
    h, hd = c.hidden_size, c.head_dim
    out: dict[str, Shape] = {"model.embed_tokens.weight": (c.vocab_size, h), "model.norm.weight": (h,)}
    if not c.tie_word_embeddings:
        out["lm_head.weight"] = (c.vocab_size, h)
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        out.update({
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (c.num_heads * hd, h),
            p + "self_attn.k_proj.weight": (c.num_kv_heads * hd, h),
            p + "self_attn.v_proj.weight": (c.num_kv_heads * hd, h),
            p + "self_attn.o_proj.weight": (h, c.num_heads * hd),
            p + "self_attn.q_norm.weight": (hd,),
            p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (c.intermediate_size, h),
            p + "mlp.up_proj.weight": (c.intermediate_size, h),
            p + "mlp.down_proj.weight": (h, c.intermediate_size),
        })
    return out


def _qwen3_is_ternary(name: str, shape: Shape) -> bool:
    return len(shape) == 2 and name.endswith(".weight") and "norm" not in name


def gguf_config_names(a: str) -> dict[str, str]:
    """ModelConfig attribute -> GGUF metadata key, for messages that name the file's own field."""
    return {
        "hidden_size": f"{a}.embedding_length", "intermediate_size": f"{a}.feed_forward_length",
        "num_layers": f"{a}.block_count", "num_heads": f"{a}.attention.head_count",
        "num_kv_heads": f"{a}.attention.head_count_kv", "head_dim": f"{a}.attention.key_length",
        "rms_norm_eps": f"{a}.attention.layer_norm_rms_epsilon", "rope_theta": f"{a}.rope.freq_base",
        "max_position_embeddings": f"{a}.context_length", "rope_scaling": f"{a}.rope.scaling",
        "vocab_size": "token_embd.weight rows",
    }


HF_CONFIG_NAMES = {
    "hidden_size": "hidden_size", "intermediate_size": "intermediate_size", "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads", "num_kv_heads": "num_key_value_heads", "head_dim": "head_dim",
    "rms_norm_eps": "rms_norm_eps", "rope_theta": "rope_theta", "max_position_embeddings": "max_position_embeddings",
    "rope_scaling": "rope_scaling", "vocab_size": "model.embed_tokens.weight rows",
    "tie_word_embeddings": "tie_word_embeddings",
}


def _qwen3_config_from_gguf(meta: Mapping[str, Any], shapes: Mapping[str, Shape], *,
                            source: str = "GGUF metadata") -> ModelConfig:
    f = Fields(meta, source)
    a = f.str("general.architecture", "qwen3")
    emb = shapes.get("model.embed_tokens.weight")
    if emb is None or len(emb) != 2:
        raise ModelFormatError(f"{source}: GGUF has no 2-D token_embd.weight tensor")
    hidden = f.int(f"{a}.embedding_length", lo=1, hi=MAX_HIDDEN)
    heads = f.int(f"{a}.attention.head_count", lo=1, hi=MAX_HEADS)
    rope_scaling = None
    stype = f.str(f"{a}.rope.scaling.type", "none")
    if stype in ("yarn", "linear"):
        rope_scaling = RopeScaling(
            type=stype,
            factor=f.float(f"{a}.rope.scaling.factor", lo=0.0, hi=1024.0, lo_open=True),
            original_max_position_embeddings=f.int(f"{a}.rope.scaling.original_context_length", 0, hi=MAX_CONTEXT),
            beta_fast=f.float(f"{a}.rope.scaling.yarn_beta_fast", 32.0, lo=0.0, hi=1e4),
            beta_slow=f.float(f"{a}.rope.scaling.yarn_beta_slow", 1.0, lo=0.0, hi=1e4),
            attention_factor=f.float(f"{a}.rope.scaling.attn_factor", None, lo=0.0, hi=100.0, lo_open=True),
        )
    elif stype not in ("none", ""):
        raise UnsupportedModelError(f"{source}: unsupported RoPE scaling type {stype!r} ({a}.rope.scaling.type)")
    cfg = ModelConfig(
        arch="qwen3",
        vocab_size=int(emb[0]),
        hidden_size=hidden,
        intermediate_size=f.int(f"{a}.feed_forward_length", lo=1, hi=MAX_FFN),
        num_layers=f.int(f"{a}.block_count", lo=1, hi=MAX_LAYERS),
        num_heads=heads,
        num_kv_heads=f.int(f"{a}.attention.head_count_kv", heads, lo=1, hi=MAX_HEADS),
        head_dim=f.int(f"{a}.attention.key_length", hidden // heads, lo=2, hi=MAX_HEAD_DIM),
        rms_norm_eps=f.float(f"{a}.attention.layer_norm_rms_epsilon", 1e-6, lo=0.0, hi=0.1, lo_open=True),
        rope_theta=f.float(f"{a}.rope.freq_base", 10000.0, lo=1.0, hi=1e12, lo_open=True),
        rope_scaling=rope_scaling,
        max_position_embeddings=f.int(f"{a}.context_length", 32768, lo=1, hi=MAX_CONTEXT),
        tie_word_embeddings="lm_head.weight" not in shapes,
    )
    return validate_config(cfg, source, gguf_config_names(a))


def _rope_fields(cfg: Mapping[str, Any], source: str) -> tuple[Fields, Fields | None, str]:
    """(fields holding rope_theta, fields holding the scaling or None, scaling's field name)."""
    f = Fields(cfg, source)
    params = f.mapping("rope_parameters", {})
    where = "rope_parameters"
    if isinstance(params.get("full_attention"), Mapping):
        params, where = params["full_attention"], "rope_parameters.full_attention"
    pf = Fields(params, source, prefix=where + ".")
    theta_f = pf if pf.has("rope_theta") else f
    scaling = f.mapping("rope_scaling", {})
    if scaling:
        return theta_f, Fields(scaling, source, prefix="rope_scaling."), "rope_scaling"
    return theta_f, pf if params else None, where


def rope_from_hf(cfg: Mapping[str, Any], source: str = "config.json") -> tuple[float, RopeScaling | None]:
    """(rope_theta, scaling) from either transformers-5 ``rope_parameters`` or older keys."""
    theta_f, sf, _where = _rope_fields(cfg, source)
    theta = theta_f.float("rope_theta", 10000.0, lo=1.0, hi=1e12, lo_open=True)
    if sf is None:
        return theta, None
    rtype = sf.str("rope_type", None) if sf.has("rope_type") else sf.str("type", "default")
    if rtype in (None, "default"):
        return theta, None
    if rtype not in ("yarn", "linear"):
        raise UnsupportedModelError(f"{source}: unsupported RoPE scaling type {rtype!r}")
    return theta, RopeScaling(
        type=rtype,
        factor=sf.float("factor", 1.0, lo=0.0, hi=1024.0, lo_open=True),
        original_max_position_embeddings=sf.int("original_max_position_embeddings", 0, hi=MAX_CONTEXT),
        beta_fast=sf.float("beta_fast", 32.0, lo=0.0, hi=1e4) or 32.0,
        beta_slow=sf.float("beta_slow", 1.0, lo=0.0, hi=1e4) or 1.0,
        attention_factor=sf.float("attention_factor", None, lo=0.0, hi=100.0, lo_open=True),
    )


def _qwen3_config_from_hf(cfg: Mapping[str, Any], shapes: Mapping[str, Shape], *,
                          source: str = "config.json") -> ModelConfig:
    emb = shapes.get("model.embed_tokens.weight")
    if emb is None or len(emb) != 2:
        raise ModelFormatError(f"{source}: the safetensors files have no 2-D model.embed_tokens.weight tensor")
    f = Fields(cfg, source)
    hidden = f.int("hidden_size", lo=1, hi=MAX_HIDDEN)
    heads = f.int("num_attention_heads", lo=1, hi=MAX_HEADS)
    theta, scaling = rope_from_hf(cfg, source)
    c = ModelConfig(
        arch="qwen3",
        vocab_size=int(emb[0]),
        hidden_size=hidden,
        intermediate_size=f.int("intermediate_size", lo=1, hi=MAX_FFN),
        num_layers=f.int("num_hidden_layers", lo=1, hi=MAX_LAYERS),
        num_heads=heads,
        num_kv_heads=f.int("num_key_value_heads", heads, lo=1, hi=MAX_HEADS),
        head_dim=f.int("head_dim", hidden // heads, lo=2, hi=MAX_HEAD_DIM),
        rms_norm_eps=f.float("rms_norm_eps", 1e-6, lo=0.0, hi=0.1, lo_open=True),
        rope_theta=theta,
        rope_scaling=scaling,
        max_position_embeddings=f.int("max_position_embeddings", 32768, lo=1, hi=MAX_CONTEXT),
        tie_word_embeddings=f.bool("tie_word_embeddings", False),
    )
    return validate_config(c, source, HF_CONFIG_NAMES)


def _qwen3_gguf_metadata(c: ModelConfig) -> dict[str, Any]:
    a = "qwen3"
    meta: dict[str, Any] = {
        f"{a}.context_length": ("u32", c.max_position_embeddings),
        f"{a}.embedding_length": ("u32", c.hidden_size),
        f"{a}.block_count": ("u32", c.num_layers),
        f"{a}.feed_forward_length": ("u32", c.intermediate_size),
        f"{a}.attention.head_count": ("u32", c.num_heads),
        f"{a}.attention.head_count_kv": ("u32", c.num_kv_heads),
        f"{a}.attention.key_length": ("u32", c.head_dim),
        f"{a}.attention.value_length": ("u32", c.head_dim),
        f"{a}.rope.freq_base": ("f32", c.rope_theta),
        f"{a}.attention.layer_norm_rms_epsilon": ("f32", c.rms_norm_eps),
    }
    rs = c.rope_scaling
    if rs is not None and rs.type in ("yarn", "linear"):
        meta[f"{a}.rope.scaling.type"] = ("str", rs.type)
        meta[f"{a}.rope.scaling.factor"] = ("f32", rs.factor)
        if rs.original_max_position_embeddings:
            meta[f"{a}.rope.scaling.original_context_length"] = ("u32", rs.original_max_position_embeddings)
        if rs.type == "yarn":
            meta[f"{a}.rope.scaling.yarn_beta_fast"] = ("f32", rs.beta_fast)
            meta[f"{a}.rope.scaling.yarn_beta_slow"] = ("f32", rs.beta_slow)
            if rs.attention_factor is not None:
                meta[f"{a}.rope.scaling.attn_factor"] = ("f32", rs.attention_factor)
    return meta


register_arch(ArchSpec(
    name="qwen3",
    gguf_arch="qwen3",
    hf_model_types=["qwen3"],
    gguf_global_names=QWEN3_GGUF_GLOBAL,
    gguf_block_names=QWEN3_GGUF_BLOCK,
    expected_shapes=_qwen3_shapes,
    is_ternary=_qwen3_is_ternary,
    config_from_gguf=_qwen3_config_from_gguf,
    config_from_hf=_qwen3_config_from_hf,
    gguf_metadata=_qwen3_gguf_metadata,
))
