"""Rotary position embeddings: inverse frequencies (plain, linear, YaRN, llama3) and cos/sin tables.

The YaRN maths mirrors Hugging Face's ``_compute_yarn_parameters`` line by line (correction range
with optional truncation, linear ramp, attention factor from ``factor``/``mscale``/
``mscale_all_dim``), because Bonsai checkpoints were trained and evaluated with that code; a
subtly different ramp would still "work" and quietly lose quality at long context.
"""

from __future__ import annotations

import math

import torch

from runtime.errors import UnsupportedModelError
from runtime.model.config import ModelConfig, RopeScaling


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def _yarn_inv_freq(rs: RopeScaling, base: float, dim: int, max_position_embeddings: int) -> tuple[torch.Tensor, float]:
    factor = rs.factor
    original = rs.original_max_position_embeddings or max_position_embeddings
    if not factor:
        factor = max_position_embeddings / original
    attention_factor = rs.attention_factor
    if attention_factor is None:
        if rs.mscale and rs.mscale_all_dim:
            attention_factor = float(_yarn_mscale(factor, rs.mscale) / _yarn_mscale(factor, rs.mscale_all_dim))
        else:
            attention_factor = _yarn_mscale(factor)
    beta_fast = rs.beta_fast or 32
    beta_slow = rs.beta_slow or 1

    def correction_dim(num_rotations: float) -> float:
        return (dim * math.log(original / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low = correction_dim(beta_fast)
    high = correction_dim(beta_slow)
    if rs.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # HF: prevent a zero-width ramp
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)

    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    inv_extrapolation = 1.0 / pos_freqs
    inv_interpolation = 1.0 / (factor * pos_freqs)
    extrapolation_factor = 1 - ramp
    inv_freq = inv_interpolation * (1 - extrapolation_factor) + inv_extrapolation * extrapolation_factor
    return inv_freq, float(attention_factor)


def _llama3_inv_freq(rs: RopeScaling, plain: torch.Tensor, max_position_embeddings: int) -> torch.Tensor:
    """HF ``_compute_llama3_parameters``: long wavelengths divided by ``factor``, short ones kept,
    a smooth blend between ``original / low_freq_factor`` and ``original / high_freq_factor``."""
    original = rs.original_max_position_embeddings or max_position_embeddings
    low_wavelen = original / rs.low_freq_factor
    high_wavelen = original / rs.high_freq_factor
    wavelen = 2 * math.pi / plain
    inv_freq = torch.where(wavelen > low_wavelen, plain / rs.factor, plain)
    smooth = (original / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor)
    smoothed = (1 - smooth) * inv_freq / rs.factor + smooth * inv_freq
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, inv_freq)


def rope_inv_freq(config: ModelConfig) -> tuple[torch.Tensor, float]:
    """``(inv_freq [rotary_dim // 2] fp32, attention_scaling)`` for the config's RoPE variant."""
    dim = int(config.head_dim * config.partial_rotary_factor)
    base = config.rope_theta
    rs = config.rope_scaling
    kind = (rs.type if rs else "default") or "default"
    plain = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    if rs is None or kind == "default":
        return plain, 1.0
    if kind == "linear":
        return plain / rs.factor, 1.0
    if kind == "yarn":
        return _yarn_inv_freq(rs, base, dim, config.max_position_embeddings)
    if kind == "llama3":
        return _llama3_inv_freq(rs, plain, config.max_position_embeddings), 1.0
    raise UnsupportedModelError(f"RoPE scaling type {kind!r} is not supported (supported: default, linear, yarn, "
                                "llama3)")


class RotaryTables(torch.nn.Module):
    """Precomputed ``cos``/``sin`` for positions ``0 .. max_positions-1`` (fp32, HF layout).

    Computed once in fp32 exactly as HF does per step (``pos * inv_freq``, duplicated halves,
    times the attention scaling), then indexed by a position *tensor*, so a decode step has no
    Python-side position arithmetic and can be captured in a CUDA graph.
    """

    def __init__(self, config: ModelConfig, max_positions: int, device: torch.device | str = "cpu",
                 freq_factors: torch.Tensor | None = None) -> None:
        """``freq_factors`` (llama.cpp's ``rope_freqs.weight``, one per frequency) divides the
        frequencies: how llama.cpp files carry llama3 scaling instead of metadata."""
        super().__init__()
        inv_freq, scaling = rope_inv_freq(config)
        if freq_factors is not None:
            if config.rope_scaling is not None:
                raise UnsupportedModelError("the model has both RoPE scaling metadata and rope_freqs factors")
            if tuple(freq_factors.shape) != tuple(inv_freq.shape):
                raise UnsupportedModelError(f"rope_freqs has shape {list(freq_factors.shape)}, expected "
                                            f"{list(inv_freq.shape)} (one factor per rotary frequency)")
            factors = freq_factors.to(torch.float32).cpu()
            if not bool(torch.isfinite(factors).all()) or bool((factors <= 0).any()):
                raise UnsupportedModelError("rope_freqs factors must be finite and positive")
            inv_freq = inv_freq / factors
        self.attention_scaling = scaling
        pos = torch.arange(max_positions, dtype=torch.float32)
        freqs = pos[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", (emb.cos() * scaling).to(device), persistent=False)
        self.register_buffer("sin", (emb.sin() * scaling).to(device), persistent=False)

    def forward(self, input_pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cos[input_pos].to(dtype), self.sin[input_pos].to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [..., T, heads, head_dim]`` with ``cos/sin [T, head_dim]`` (full rotary dim)."""
    cos = cos.unsqueeze(-2)
    sin = sin.unsqueeze(-2)
    return x * cos + rotate_half(x) * sin
