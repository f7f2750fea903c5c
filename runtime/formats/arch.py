"""The architecture registry: one :class:`ArchSpec` per architecture, found by any name a file uses.

Why: the GGUF, Hugging Face and ``.ternary`` readers, the memory planner, the synthetic-weight
generator and the models' own "required tensors" check all need the same facts about an
architecture: how its metadata becomes a :class:`ModelConfig`, which tensors it has (names, shapes,
roles), how GGUF names map to the canonical Hugging Face names, what it supports and which class
runs it. Declaring them once per architecture, in that architecture's own module, keeps those
readers free of per-architecture lists, and makes a new architecture one module plus one line in
:data:`ARCH_MODULES`.

Dense decoder-only transformers in the Qwen3 / Llama mould share their GGUF names, metadata keys
and config parsing: :func:`dense_spec` builds their spec from a few switches (q/k norm or not).
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
from runtime.formats.model_data import DenseTensor, Tensor
from runtime.model.config import ModelConfig, RopeScaling

Shape = tuple[int, ...]

# Every name a file may give an architecture (GGUF ``general.architecture``, HF ``architectures[0]``
# and ``model_type``) -> the module that declares it with :func:`register_arch` (imported on first use).
ARCH_MODULES: dict[str, tuple[str, ...]] = {
    "runtime.model.qwen3": ("qwen3", "Qwen3ForCausalLM"),
    "runtime.model.qwen35.spec": ("qwen35", "qwen3_5", "qwen3_5_text", "Qwen3_5ForConditionalGeneration",
                                    "Qwen3_5ForCausalLM"),
    "runtime.model.llama": ("llama", "LlamaForCausalLM"),
}

# Tensor roles. "ternary": a matrix the kernels run from packed {-1, 0, +1} codes (kept dense when
# the file stores non-ternary floats); "norm": a 1-D scale near 1.0. Architectures add their own
# roles for other tensors (qwen35: "proj_bf16", "conv", "a", "a_log", "dt_bias", "gated_norm").
TERNARY, NORM = "ternary", "norm"

# PrismML's recommended sampling for the Ternary Bonsai 1.7B/4B/8B (model cards, demo scripts): the
# fallback for every setting a model file does not give, unless the architecture's spec says otherwise.
DEFAULT_SAMPLING: dict[str, float] = {"temperature": 0.5, "top_p": 0.85, "top_k": 20, "min_p": 0.0,
                                      "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


def default_sampling(config: ModelConfig) -> dict[str, float]:
    return dict(DEFAULT_SAMPLING)


@dataclass(frozen=True)
class TensorInfo:
    """One tensor an architecture expects: canonical (Hugging Face) name, shape, role."""

    name: str
    kind: str  # the role (see TERNARY / NORM above)
    shape: Shape


@dataclass
class ArchSpec:
    """Everything the formats, the planner, synthetic weights and the engine need about one architecture."""

    name: str  # ModelConfig.arch
    gguf_arch: str  # general.architecture
    hf_model_types: list[str]  # config.json model_type values
    gguf_global_names: dict[str, str]  # GGUF name -> HF name, for tensors outside blocks
    gguf_block_names: dict[str, str]  # "attn_q.weight" -> "self_attn.q_proj.weight"
    tensor_list: Callable[[ModelConfig], list[TensorInfo]]  # the tensors, in file order
    is_ternary: Callable[[str, Shape], bool]  # canonical name, shape -> stored as ternary?
    # (metadata, canonical shapes, *, source=file name) -> config, every field checked (config_schema)
    config_from_gguf: Callable[..., ModelConfig]
    config_from_hf: Callable[..., ModelConfig]
    gguf_metadata: Callable[[ModelConfig], dict[str, Any]]  # arch keys for the GGUF writer
    model_class: str  # "module:Class" of the forward pass (imported when a model is built)
    hf_architectures: list[str] = field(default_factory=list)  # config.json architectures[0] values
    offload_modes: tuple[str, ...] = ("none", "stream", "mapped", "cpu")  # planner.OFFLOAD_MODES it runs
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
    # chat defaults for what the model file does not say: sampling (config -> settings) and whether a
    # chat turns thinking on (PrismML: the dense Bonsai were not trained to think; the hybrids are)
    sampling_defaults: Callable[[ModelConfig], dict[str, float]] = default_sampling
    thinking_default: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def expected_shapes(self, config: ModelConfig) -> dict[str, Shape]:
        """Required tensors and their shapes (from :attr:`tensor_list`)."""
        return {t.name: t.shape for t in self.tensor_list(config)}

    def load_model_class(self) -> Any:
        """The :class:`runtime.model.base.PreparedModel` subclass that runs this architecture."""
        module, _, cls = self.model_class.partition(":")
        return getattr(importlib.import_module(module), cls)

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


def register_arch(spec: ArchSpec) -> ArchSpec:
    """Add ``spec`` (called by the architecture's own module at import); returns it."""
    _ARCHS[spec.name] = spec
    return spec


def _names(spec: ArchSpec) -> set[str]:
    return {spec.name, spec.gguf_arch, *spec.hf_model_types, *spec.hf_architectures}


def _find(name: str) -> ArchSpec | None:
    for spec in _ARCHS.values():
        if name in _names(spec):
            return spec
    for module, names in ARCH_MODULES.items():
        if name in names:
            importlib.import_module(module)
            break
    for spec in _ARCHS.values():
        if name in _names(spec):
            return spec
    return None


def known_arch_names() -> list[str]:
    return sorted({n for names in ARCH_MODULES.values() for n in names})


def _unsupported(what: str, name: str) -> UnsupportedModelError:
    return UnsupportedModelError(f"unsupported {what} {name!r} (known: {', '.join(known_arch_names())})")


def get_arch(name: str) -> ArchSpec:
    """Spec by ModelConfig.arch name (or any other name of the architecture)."""
    spec = _find(name)
    if spec is None:
        raise _unsupported("architecture", name)
    return spec


def arch_for_gguf(gguf_arch: str) -> ArchSpec:
    spec = _find(gguf_arch)
    if spec is None or spec.gguf_arch != gguf_arch:
        raise _unsupported("GGUF architecture", gguf_arch)
    return spec


def arch_for_hf(model_type: str, architectures: Any = None) -> ArchSpec:
    """Spec for a ``config.json`` by its ``model_type``; ``architectures[0]``, when it names a known
    class, must name the same architecture (a config that says two things is refused)."""
    spec = _find(model_type)
    if spec is None or model_type not in spec.hf_model_types:
        raise _unsupported("Hugging Face model_type", model_type)
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        named = _find(architectures[0])
        if named is not None and architectures[0] in named.hf_architectures and named is not spec:
            raise UnsupportedModelError(f"config.json: model_type {model_type!r} and architectures[0] "
                                        f"{architectures[0]!r} name different architectures")
    return spec


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


TERNARY_BITS_PER_WEIGHT = 2 + 16 / 128  # t2 codes + an fp16 scale per 128-weight group


def dense_matrices(config: ModelConfig, tensors: Mapping[str, Tensor]) -> list[str]:
    """Names of matrices the architecture runs as ternary that are held as dense floats."""
    return [t.name for t in get_arch(config.arch).tensor_list(config)
            if t.kind == TERNARY and isinstance(tensors.get(t.name), DenseTensor)]


def dense_matrices_notice(config: ModelConfig, tensors: Mapping[str, Tensor]) -> str | None:
    """What a user should be told when matrices run dense: which ones, and their memory and speed cost."""
    names = dense_matrices(config, tensors)
    if not names:
        return None
    dense = sum(tensors[n].nbytes for n in names)
    elems = sum(tensors[n].data.numel() for n in names)  # type: ignore[union-attr]
    ternary = elems * TERNARY_BITS_PER_WEIGHT / 8
    dtypes = sorted({str(tensors[n].data.dtype).removeprefix("torch.") for n in names})  # type: ignore[union-attr]
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    ratio = dense / ternary
    return (f"{len(names)} weight matrices are not ternary and run as dense {'/'.join(dtypes)} matrices: {shown}. "
            f"They take {dense / 1e6:.1f} MB instead of {ternary / 1e6:.1f} MB as ternary ({ratio:.1f}x), and "
            f"a token reads them about {ratio:.0f}x slower; `ternary convert --quantize` makes them ternary (lossy).")


# ================================================================================================
# Dense decoder-only transformers (Qwen3, Llama): one set of GGUF names, metadata keys and config
# parsing; an architecture picks its switches in :func:`dense_spec`.

DENSE_GGUF_GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
DENSE_GGUF_BLOCK = {
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
ROPE_SCALING_TYPES = ("yarn", "linear", "llama3")  # what runtime.model.rope computes


def dense_tensor_list(qk_norm: bool) -> Callable[[ModelConfig], list[TensorInfo]]:
    """The tensor list of a dense decoder; ``qk_norm``: per-head RMSNorm on q and k (Qwen3)."""
    def tensors(c: ModelConfig) -> list[TensorInfo]:
        h, hd, ffn = c.hidden_size, c.head_dim, c.intermediate_size
        out = [TensorInfo("model.embed_tokens.weight", TERNARY, (c.vocab_size, h))]
        for i in range(c.num_layers):
            p = f"model.layers.{i}."
            out += [
                TensorInfo(p + "input_layernorm.weight", NORM, (h,)),
                TensorInfo(p + "self_attn.q_proj.weight", TERNARY, (c.num_heads * hd, h)),
                TensorInfo(p + "self_attn.k_proj.weight", TERNARY, (c.num_kv_heads * hd, h)),
                TensorInfo(p + "self_attn.v_proj.weight", TERNARY, (c.num_kv_heads * hd, h)),
                TensorInfo(p + "self_attn.o_proj.weight", TERNARY, (h, c.num_heads * hd)),
            ]
            if qk_norm:
                out += [TensorInfo(p + "self_attn.q_norm.weight", NORM, (hd,)),
                        TensorInfo(p + "self_attn.k_norm.weight", NORM, (hd,))]
            out += [
                TensorInfo(p + "post_attention_layernorm.weight", NORM, (h,)),
                TensorInfo(p + "mlp.gate_proj.weight", TERNARY, (ffn, h)),
                TensorInfo(p + "mlp.up_proj.weight", TERNARY, (ffn, h)),
                TensorInfo(p + "mlp.down_proj.weight", TERNARY, (h, ffn)),
            ]
        out.append(TensorInfo("model.norm.weight", NORM, (h,)))
        if not c.tie_word_embeddings:
            out.append(TensorInfo("lm_head.weight", TERNARY, (c.vocab_size, h)))
        return out
    return tensors


def dense_is_ternary(name: str, shape: Shape) -> bool:
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


def _rope_from_gguf(f: Fields, a: str, source: str) -> RopeScaling | None:
    stype = f.str(f"{a}.rope.scaling.type", "none")
    if stype in ("none", ""):
        return None
    if stype not in ROPE_SCALING_TYPES:
        raise UnsupportedModelError(f"{source}: unsupported RoPE scaling type {stype!r} ({a}.rope.scaling.type)")
    k = f"{a}.rope.scaling."
    return RopeScaling(
        type=stype,
        factor=f.float(k + "factor", lo=0.0, hi=1024.0, lo_open=True),
        original_max_position_embeddings=f.int(k + "original_context_length", 0, hi=MAX_CONTEXT),
        beta_fast=f.float(k + "yarn_beta_fast", 32.0, lo=0.0, hi=1e4),
        beta_slow=f.float(k + "yarn_beta_slow", 1.0, lo=0.0, hi=1e4),
        attention_factor=f.float(k + "attn_factor", None, lo=0.0, hi=100.0, lo_open=True),
        low_freq_factor=f.float(k + "low_freq_factor", 1.0, lo=0.0, hi=1e4, lo_open=True),
        high_freq_factor=f.float(k + "high_freq_factor", 4.0, lo=0.0, hi=1e4, lo_open=True),
    )


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
    if rtype not in ROPE_SCALING_TYPES:
        raise UnsupportedModelError(f"{source}: unsupported RoPE scaling type {rtype!r}")
    return theta, RopeScaling(
        type=rtype,
        factor=sf.float("factor", 1.0, lo=0.0, hi=1024.0, lo_open=True),
        original_max_position_embeddings=sf.int("original_max_position_embeddings", 0, hi=MAX_CONTEXT),
        beta_fast=sf.float("beta_fast", 32.0, lo=0.0, hi=1e4) or 32.0,
        beta_slow=sf.float("beta_slow", 1.0, lo=0.0, hi=1e4) or 1.0,
        attention_factor=sf.float("attention_factor", None, lo=0.0, hi=100.0, lo_open=True),
        low_freq_factor=sf.float("low_freq_factor", 1.0, lo=0.0, hi=1e4, lo_open=True),
        high_freq_factor=sf.float("high_freq_factor", 4.0, lo=0.0, hi=1e4, lo_open=True),
    )


def dense_config_from_gguf(arch: str) -> Callable[..., ModelConfig]:
    """GGUF metadata parser of a dense architecture whose ModelConfig.arch is ``arch``."""
    def parse(meta: Mapping[str, Any], shapes: Mapping[str, Shape], *, source: str = "GGUF metadata") -> ModelConfig:
        f = Fields(meta, source)
        a = f.str("general.architecture", arch)
        emb = shapes.get("model.embed_tokens.weight")
        if emb is None or len(emb) != 2:
            raise ModelFormatError(f"{source}: GGUF has no 2-D token_embd.weight tensor")
        hidden = f.int(f"{a}.embedding_length", lo=1, hi=MAX_HIDDEN)
        heads = f.int(f"{a}.attention.head_count", lo=1, hi=MAX_HEADS)
        cfg = ModelConfig(
            arch=arch,
            vocab_size=int(emb[0]),
            hidden_size=hidden,
            intermediate_size=f.int(f"{a}.feed_forward_length", lo=1, hi=MAX_FFN),
            num_layers=f.int(f"{a}.block_count", lo=1, hi=MAX_LAYERS),
            num_heads=heads,
            num_kv_heads=f.int(f"{a}.attention.head_count_kv", heads, lo=1, hi=MAX_HEADS),
            head_dim=f.int(f"{a}.attention.key_length", hidden // heads, lo=2, hi=MAX_HEAD_DIM),
            rms_norm_eps=f.float(f"{a}.attention.layer_norm_rms_epsilon", 1e-6, lo=0.0, hi=0.1, lo_open=True),
            rope_theta=f.float(f"{a}.rope.freq_base", 10000.0, lo=1.0, hi=1e12, lo_open=True),
            rope_scaling=_rope_from_gguf(f, a, source),
            max_position_embeddings=f.int(f"{a}.context_length", 32768, lo=1, hi=MAX_CONTEXT),
            tie_word_embeddings="lm_head.weight" not in shapes,
        )
        return validate_config(cfg, source, gguf_config_names(a))
    return parse


def dense_config_from_hf(arch: str) -> Callable[..., ModelConfig]:
    """``config.json`` parser of a dense architecture whose ModelConfig.arch is ``arch``."""
    def parse(cfg: Mapping[str, Any], shapes: Mapping[str, Shape], *, source: str = "config.json") -> ModelConfig:
        emb = shapes.get("model.embed_tokens.weight")
        if emb is None or len(emb) != 2:
            raise ModelFormatError(f"{source}: the safetensors files have no 2-D model.embed_tokens.weight tensor")
        f = Fields(cfg, source)
        if f.bool("attention_bias", False) or f.bool("mlp_bias", False):
            raise UnsupportedModelError(f"{source}: attention_bias / mlp_bias models are not supported")
        hidden = f.int("hidden_size", lo=1, hi=MAX_HIDDEN)
        heads = f.int("num_attention_heads", lo=1, hi=MAX_HEADS)
        theta, scaling = rope_from_hf(cfg, source)
        c = ModelConfig(
            arch=arch,
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
    return parse


def dense_gguf_metadata(a: str) -> Callable[[ModelConfig], dict[str, Any]]:
    """The GGUF writer's ``{key: (type, value)}`` architecture keys under prefix ``a``."""
    def meta_of(c: ModelConfig) -> dict[str, Any]:
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
        if rs is not None and rs.type in ROPE_SCALING_TYPES:
            k = f"{a}.rope.scaling."
            meta[k + "type"] = ("str", rs.type)
            meta[k + "factor"] = ("f32", rs.factor)
            if rs.original_max_position_embeddings:
                meta[k + "original_context_length"] = ("u32", rs.original_max_position_embeddings)
            if rs.type == "yarn":
                meta[k + "yarn_beta_fast"] = ("f32", rs.beta_fast)
                meta[k + "yarn_beta_slow"] = ("f32", rs.beta_slow)
                if rs.attention_factor is not None:
                    meta[k + "attn_factor"] = ("f32", rs.attention_factor)
            if rs.type == "llama3":
                meta[k + "low_freq_factor"] = ("f32", rs.low_freq_factor)
                meta[k + "high_freq_factor"] = ("f32", rs.high_freq_factor)
        return meta
    return meta_of


def dense_spec(name: str, *, model_class: str, qk_norm: bool, hf_model_types: list[str],
               hf_architectures: list[str], gguf_arch: str | None = None) -> ArchSpec:
    """The spec of a dense decoder-only transformer (RMSNorm, GQA attention with RoPE, SwiGLU MLP)."""
    block = dict(DENSE_GGUF_BLOCK)
    if not qk_norm:
        del block["attn_q_norm.weight"], block["attn_k_norm.weight"]
    gguf_arch = gguf_arch or name
    return ArchSpec(
        name=name, gguf_arch=gguf_arch, hf_model_types=hf_model_types, hf_architectures=hf_architectures,
        gguf_global_names=dict(DENSE_GGUF_GLOBAL), gguf_block_names=block,
        tensor_list=dense_tensor_list(qk_norm), is_ternary=dense_is_ternary,
        config_from_gguf=dense_config_from_gguf(name), config_from_hf=dense_config_from_hf(name),
        gguf_metadata=dense_gguf_metadata(gguf_arch), model_class=model_class,
    )
