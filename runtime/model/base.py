"""What every architecture's prepared model shares: construction from ModelData, memory accounting
and the decode-step interface.

Why a base class: the engine, the planner checks and the benchmark treat Qwen3 and the Qwen3.5
hybrid alike (``from_model_data``, ``max_positions``, ``weight_bytes``, ``decode_step``,
``sequence_state``); the forward passes stay in their own files.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self

import torch

from runtime.formats.model_data import ModelData

# A graph-safe one-token forward: (tokens [1] long, positions [1] long) -> logits [V] (the model's dtype).
StepFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class PreparedModel(torch.nn.Module):
    """Base of the per-architecture models. Subclasses own ``self.cache`` (a KV cache)."""

    # buffers under these prefixes are per-sequence state, not weights
    STATE_PREFIXES: tuple[str, ...] = ("cache.", "rope.")
    # whether a cached prefix can be kept and the rest recomputed (False: recurrent state, see sequence_state)
    supports_prefix_rewind: bool = True

    @classmethod
    def from_model_data(cls, data: ModelData, device: torch.device | str = "cpu",
                        dtype: torch.dtype | None = None, max_positions: int | None = None,
                        **kwargs: Any) -> Self:
        """Prepare ``data`` for ``device``. fp32 on CPU (exact parity), bf16 on CUDA by default."""
        device = torch.device(device)
        if dtype is None:
            dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
        max_positions = max_positions or data.config.max_position_embeddings
        return cls(data.config, data, device, dtype, max_positions, **kwargs)

    @property
    def max_positions(self) -> int:
        return self.cache.max_positions

    def weight_bytes(self) -> int:
        """Bytes of prepared weights resident on the device (excludes caches and recurrent state)."""
        tensors = list(self.named_buffers()) + list(self.named_parameters())
        return sum(b.numel() * b.element_size() for n, b in tensors if not n.startswith(self.STATE_PREFIXES))

    def decode_step(self) -> StepFn | None:
        """The model's fused one-token step for CUDA-graph decoding, or ``None`` when it has none for
        this build (then the decoder steps :meth:`forward`). Same numbers as ``forward`` for one token,
        up to float summation order; it shares the model's KV cache and state with ``forward``."""
        return None

    def sequence_state(self) -> tuple[torch.Tensor, ...]:
        """Buffers a step advances and cannot rewrite in place (recurrent state): a decoder that runs
        warm-up steps saves and restores them. Empty for models whose only state is the KV cache."""
        return ()
