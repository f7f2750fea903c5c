"""Static KV cache: preallocated once, written at position *tensors*.

Layout ``[layers, kv_heads, max_positions, head_dim]`` (head-major, so attention reads each
head's keys as one contiguous block). Positions are tensors and the buffers never move, which is
what lets a decode step be ``torch.compile``d or captured in a CUDA graph unchanged.
"""

from __future__ import annotations

import torch


class KVCache(torch.nn.Module):
    """Keys and values for every attention layer of one sequence."""

    def __init__(self, layers: int, kv_heads: int, max_positions: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str = "cpu") -> None:
        super().__init__()
        shape = (layers, kv_heads, max_positions, head_dim)
        self.max_positions = max_positions
        # Zeroed, not empty: a graph-captured step attends over all positions (masked), and
        # 0 * NaN from uninitialised memory would poison the masked-out part.
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def update(self, layer: int, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               kv_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k, v [T, kv_heads, head_dim]`` at ``input_pos [T]``; return this layer's cache.

        The returned views are ``[kv_heads, kv_len or max_positions, head_dim]``.
        """
        kc, vc = self.k[layer], self.v[layer]
        kc.index_copy_(1, input_pos, k.transpose(0, 1).to(kc.dtype))
        vc.index_copy_(1, input_pos, v.transpose(0, 1).to(vc.dtype))
        if kv_len is not None:
            return kc[:, :kv_len], vc[:, :kv_len]
        return kc, vc
