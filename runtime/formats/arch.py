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
    config_from_gguf: Callable[[Mapping[str, Any], Mapping[str, Shape]], ModelConfig]
    config_from_hf: Callable[[Mapping[str, Any], Mapping[str, Shape]], ModelConfig]
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


def check_tensor_set(config: ModelConfig, shapes: Mapping[str, Shape], *, source: str) -> None:
    """Refuse missing tensors and shapes that disagree with the config (names the first problems)."""
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


def _num(meta: Mapping[str, Any], key: str, default: Any = None, kind: type = int) -> Any:
    if key not in meta:
        if default is None:
            raise ModelFormatError(f"GGUF metadata key {key!r} is missing")
        return default
    v = meta[key]
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ModelFormatError(f"GGUF metadata key {key!r} should be a number, got {type(v).__name__}")
    if kind is int and (int(v) != v or v < 0 or v > 1 << 40):
        raise ModelFormatError(f"GGUF metadata key {key!r} has an impossible value {v!r}")
    return kind(v)


def _qwen3_config_from_gguf(meta: Mapping[str, Any], shapes: Mapping[str, Shape]) -> ModelConfig:
    a = str(meta.get("general.architecture", "qwen3"))
    emb = shapes.get("model.embed_tokens.weight")
    if emb is None or len(emb) != 2:
        raise ModelFormatError("GGUF has no 2-D token_embd.weight tensor")
    hidden = _num(meta, f"{a}.embedding_length")
    heads = _num(meta, f"{a}.attention.head_count")
    if heads == 0:
        raise ModelFormatError("GGUF metadata: attention.head_count is 0")
    rope_scaling = None
    stype = str(meta.get(f"{a}.rope.scaling.type", "none"))
    if stype in ("yarn", "linear"):
        rope_scaling = RopeScaling(
            type=stype,
            factor=_num(meta, f"{a}.rope.scaling.factor", kind=float),
            original_max_position_embeddings=_num(meta, f"{a}.rope.scaling.original_context_length", 0),
            beta_fast=_num(meta, f"{a}.rope.scaling.yarn_beta_fast", 32.0, float),
            beta_slow=_num(meta, f"{a}.rope.scaling.yarn_beta_slow", 1.0, float),
            attention_factor=(_num(meta, f"{a}.rope.scaling.attn_factor", kind=float)
                              if f"{a}.rope.scaling.attn_factor" in meta else None),
        )
    elif stype not in ("none", ""):
        raise UnsupportedModelError(f"unsupported RoPE scaling type {stype!r}")
    return ModelConfig(
        arch="qwen3",
        vocab_size=int(emb[0]),
        hidden_size=hidden,
        intermediate_size=_num(meta, f"{a}.feed_forward_length"),
        num_layers=_num(meta, f"{a}.block_count"),
        num_heads=heads,
        num_kv_heads=_num(meta, f"{a}.attention.head_count_kv", heads),
        head_dim=_num(meta, f"{a}.attention.key_length", hidden // heads),
        rms_norm_eps=_num(meta, f"{a}.attention.layer_norm_rms_epsilon", 1e-6, float),
        rope_theta=_num(meta, f"{a}.rope.freq_base", 10000.0, float),
        rope_scaling=rope_scaling,
        max_position_embeddings=_num(meta, f"{a}.context_length", 32768),
        tie_word_embeddings="lm_head.weight" not in shapes,
    )


def rope_from_hf(cfg: Mapping[str, Any]) -> tuple[float, RopeScaling | None]:
    """(rope_theta, scaling) from either transformers-5 ``rope_parameters`` or older keys."""
    params = cfg.get("rope_parameters") or {}
    if isinstance(params, dict) and "full_attention" in params and isinstance(params["full_attention"], dict):
        params = params["full_attention"]
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    scaling = cfg.get("rope_scaling") or params
    rtype = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if rtype in (None, "default"):
        return theta, None
    if rtype not in ("yarn", "linear"):
        raise UnsupportedModelError(f"unsupported RoPE scaling type {rtype!r}")
    return theta, RopeScaling(
        type=rtype,
        factor=float(scaling.get("factor", 1.0)),
        original_max_position_embeddings=int(scaling.get("original_max_position_embeddings") or 0),
        beta_fast=float(scaling.get("beta_fast") or 32.0),
        beta_slow=float(scaling.get("beta_slow") or 1.0),
        attention_factor=(float(scaling["attention_factor"]) if scaling.get("attention_factor") is not None else None),
    )


def _qwen3_config_from_hf(cfg: Mapping[str, Any], shapes: Mapping[str, Shape]) -> ModelConfig:
    emb = shapes.get("model.embed_tokens.weight")
    if emb is None or len(emb) != 2:
        raise ModelFormatError("config.json/safetensors: no 2-D model.embed_tokens.weight tensor")
    try:
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        theta, scaling = rope_from_hf(cfg)
        return ModelConfig(
            arch="qwen3",
            vocab_size=int(emb[0]),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=theta,
            rope_scaling=scaling,
            max_position_embeddings=int(cfg.get("max_position_embeddings", 32768)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        )
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise ModelFormatError(f"config.json is missing or has a bad value for {exc}") from None


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
