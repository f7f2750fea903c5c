"""Embedding lookups of the models: rows of a packed ternary table, dequantized on the table's device, or of a
dense one.

Why one implementation here: the eager forward, the CUDA-graph decode steps and the offload planner all gather
the same rows; the lookup keeps its constants (bit shifts, powers of three) as device buffers, so it allocates
nothing on the host per call and can be captured in a CUDA graph as it is. A table in pinned host memory is
read by the GPU instead (:func:`runtime.kernels.triton.gather.gather_rows`, same arithmetic).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from runtime.formats.model_data import T2, TernaryTensor, t3_bytes_per_group


class TernaryEmbedding(torch.nn.Module):
    """Embedding lookup on a packed ternary table: gather the requested rows, dequantize only them."""

    def __init__(self, t: TernaryTensor, device: torch.device) -> None:
        super().__init__()
        self.rows, self.cols = t.shape
        self.group_size = t.group_size
        self.encoding = t.encoding
        self.register_buffer("codes", t.codes.to(device), persistent=False)
        self.register_buffer("scales", t.scales.to(device), persistent=False)
        # bit shifts as a device buffer: no host->device copy per call (CUDA-graph capturable)
        self.register_buffer("shifts", torch.tensor([0, 2, 4, 6], dtype=torch.uint8, device=device),
                             persistent=False)
        self.register_buffer("pow3", torch.tensor([1, 3, 9, 27, 81], dtype=torch.int32, device=device),
                             persistent=False)

    @property
    def nbytes(self) -> int:
        return self.codes.numel() + self.scales.numel() * 2

    def forward(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        codes = self.codes.index_select(0, ids)
        scales = self.scales.index_select(0, ids)
        if self.encoding == T2:
            trits = ((codes.unsqueeze(-1) >> self.shifts) & 3).reshape(len(ids), self.cols)
        else:
            groups, nbg = self.cols // self.group_size, t3_bytes_per_group(self.group_size)
            p = codes.to(torch.int32).reshape(len(ids), groups, nbg, 1)
            trits = ((p // self.pow3) % 3).reshape(len(ids), groups, nbg * 5)[..., : self.group_size]
            trits = trits.reshape(len(ids), self.cols)
        w = (trits.to(torch.float32) - 1.0).view(len(ids), -1, self.group_size)
        w = w * scales.to(torch.float32).unsqueeze(-1)
        return w.reshape(len(ids), self.cols).to(dtype)


class DenseEmbedding(torch.nn.Module):
    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("weight", weight, persistent=False)

    @property
    def nbytes(self) -> int:
        return self.weight.numel() * self.weight.element_size()

    def forward(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return F.embedding(ids, self.weight).to(dtype)


def model_embedding(tensors: dict, hidden_size: int, device: torch.device | str, dtype: torch.dtype,
                    placement: Any = None) -> tuple[torch.nn.Module, int]:
    """The token embedding of a model (``model.embed_tokens.weight``), on the placement's embedding device
    and wrapped by it when the model is offloaded; returns (module, vocabulary size). Every architecture
    builds it the same way, so it is built here once."""
    from runtime.errors import ModelFormatError

    embed = tensors["model.embed_tokens.weight"]
    if embed.shape[1] != hidden_size:
        raise ModelFormatError(f"embedding width {embed.shape[1]} != hidden size {hidden_size}")
    dev = placement.embedding_device() if placement is not None else device
    module: torch.nn.Module = (TernaryEmbedding(embed, dev) if isinstance(embed, TernaryTensor)
                               else DenseEmbedding(embed.data.to(device=dev, dtype=dtype)))
    if placement is not None:
        module = placement.wrap_embedding(module)
    return module, embed.shape[0]


__all__ = ["DenseEmbedding", "TernaryEmbedding", "model_embedding"]
