"""Architecture configuration, built from a model file's metadata (never from hard-coded shapes).

One dataclass covers the dense models (Qwen3, Llama) and the Qwen3.5-family hybrid; fields that only the
hybrid uses default to "absent". Shapes always come from the file; :data:`SYNTHETIC_CONFIGS`
holds the exact Ternary-Bonsai shapes for synthetic benchmark models only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RopeScaling:
    """RoPE scaling as in HF ``rope_scaling``: YaRN and linear (Bonsai), llama3 (Llama 3.1+)."""

    type: str = "yarn"
    factor: float = 1.0
    original_max_position_embeddings: int = 0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None  # mscale; None -> 0.1*ln(factor)+1 (HF default)
    truncate: bool = True  # HF yarn: floor/ceil the correction range
    mscale: float | None = None  # HF yarn (DeepSeek style): used with mscale_all_dim
    mscale_all_dim: float | None = None
    low_freq_factor: float = 1.0  # llama3: wavelengths above original / low_freq_factor are divided by factor
    high_freq_factor: float = 4.0  # llama3: wavelengths below original / high_freq_factor are kept


@dataclass
class HadamardConfig:
    """Bonsai 2 rotation metadata (``prism.hadamard.*`` in GGUF)."""

    block_size: int = 1024
    transform: str = "normalized-sylvester-walsh-hadamard"
    sign_widths: list[int] = field(default_factory=list)
    # signs[width] -> list of +1/-1 (kept as python lists in the header, tensors at load)
    weight_names: list[str] = field(default_factory=list)  # canonical (HF-style) names
    inverse_weight_names: list[str] = field(default_factory=list)
    gdn_v_grouped: bool = True
    # width -> +1/-1 values (prism.hadamard.sign_values cut by sign_widths); JSON turns keys to str
    signs: dict[int, list[int]] = field(default_factory=dict)
    axis: str = "input-last-dimension"


@dataclass
class ModelConfig:
    """Everything the forward pass needs to know about the architecture."""

    arch: str  # a registered architecture (runtime.formats.arch.ARCH_MODULES): qwen3, llama, qwen35
    vocab_size: int  # rows of the embedding table as stored in the file
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    rope_scaling: RopeScaling | None = None
    max_position_embeddings: int = 32768
    tie_word_embeddings: bool = False
    # --- qwen35 hybrid only ---
    layer_types: list[str] | None = None  # "linear_attention" | "full_attention" per layer
    partial_rotary_factor: float = 1.0
    attn_output_gate: bool = False
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 4
    norm_weight_offset: float = 0.0  # 1.0 when norm weights are stored zero-centred (HF qwen3.5)
    hadamard: HadamardConfig | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if d["rope_scaling"] and d["rope_scaling"]["type"] != "llama3":  # llama3-only fields: left at defaults
            del d["rope_scaling"]["low_freq_factor"], d["rope_scaling"]["high_freq_factor"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        d = dict(d)
        if d.get("rope_scaling"):
            d["rope_scaling"] = RopeScaling(**d["rope_scaling"])
        if d.get("hadamard"):
            d["hadamard"] = HadamardConfig(**d["hadamard"])
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    @property
    def kv_layers(self) -> int:
        """Number of layers that keep a KV cache."""
        if self.layer_types is None:
            return self.num_layers
        return sum(1 for t in self.layer_types if t == "full_attention")

    def kv_bytes_per_token(self, bytes_per_element: int = 2) -> int:
        return self.kv_layers * self.num_kv_heads * self.head_dim * 2 * bytes_per_element


def _qwen3(layers: int, hidden: int, ffn: int, heads: int, kv: int, tie: bool, ctx: int, orig: int) -> ModelConfig:
    return ModelConfig(
        arch="qwen3", vocab_size=151_669, hidden_size=hidden, intermediate_size=ffn, num_layers=layers,
        num_heads=heads, num_kv_heads=kv, head_dim=128, rms_norm_eps=1e-6, rope_theta=1_000_000.0,
        rope_scaling=RopeScaling(type="yarn", factor=4.0, original_max_position_embeddings=orig),
        max_position_embeddings=ctx, tie_word_embeddings=tie,
    )


def _qwen35_27b() -> ModelConfig:
    return ModelConfig(
        arch="qwen35", vocab_size=248_320, hidden_size=5120, intermediate_size=17408, num_layers=64,
        num_heads=24, num_kv_heads=4, head_dim=256, rms_norm_eps=1e-6, rope_theta=10_000_000.0,
        max_position_embeddings=262_144, tie_word_embeddings=False,
        layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 16,
        partial_rotary_factor=0.25, attn_output_gate=True, linear_num_key_heads=16,
        linear_num_value_heads=48, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
    )


# Exact Ternary-Bonsai shapes (see shared research ternary-models.md §1.1-1.3), for synthetic
# benchmark models. Real files always take shapes from their own metadata.
SYNTHETIC_CONFIGS: dict[str, ModelConfig] = {
    "bonsai-1.7b": _qwen3(28, 2048, 6144, 16, 8, True, 32768, 8192),
    "bonsai-4b": _qwen3(36, 2560, 9728, 32, 8, True, 32768, 8192),
    "bonsai-8b": _qwen3(36, 4096, 12288, 32, 8, False, 65536, 16384),
    "bonsai-27b": _qwen35_27b(),
    "bonsai-27b-ptq1": _qwen35_27b(),
}
