"""Matmuls of the Qwen3.5 hybrid that share one input, and that input with its lazy rotation.

Why a module: the model's forward and its fused decode step (:mod:`runtime.model.qwen35.step`) both
read weights through these two; a Bonsai 2 (Hadamard-rotated) file folds the rotation into some
matrices only, so one input may be needed plain and rotated, and is rotated at most once.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from runtime.formats.model_data import DenseTensor, TernaryTensor
from runtime.model.qwen3 import FusedOrSplit
from runtime.model.qwen35.hadamard import HadamardRotation


class Activation:
    """One activation and, lazily, its rotation ``R(x)`` - shared by all matmuls that read it."""

    def __init__(self, x: torch.Tensor, rotation: HadamardRotation | None) -> None:
        self.x, self.rotation, self._rotated = x, rotation, None

    def get(self, folded: bool) -> torch.Tensor:
        if not folded:
            return self.x
        if self._rotated is None:
            assert self.rotation is not None
            self._rotated = self.rotation(self.x)
        return self._rotated


def _row_layout(t: TernaryTensor | DenseTensor) -> tuple:
    """What matrices must share to be stacked into one matmul (``qwen3._fuse_rows``)."""
    if isinstance(t, TernaryTensor):
        return ("ternary", t.shape[1], t.group_size, t.encoding)
    return ("dense", t.shape[1], t.data.dtype)


class Projections(torch.nn.Module):
    """Matmuls sharing one input: fused where they agree on layout and on being rotated.

    Parts are grouped by (rotated or not, row layout), so the DeltaNet's ternary q|k|v and z rows are one
    mat-vec even though its a/b rows are dense keep-list tensors (one launch fewer per layer, and one
    activation quantisation fewer, than a matmul per part)."""

    def __init__(self, parts: list[TernaryTensor | DenseTensor], folded: list[bool],
                 make: Callable[..., torch.nn.Module]) -> None:
        super().__init__()
        self.order: list[tuple[int, int]] = []  # (group, index within group) per part
        groups: list[list[int]] = []
        self.group_folded: list[bool] = []
        for flag in (False, True):
            idx = [i for i, f in enumerate(folded) if f == flag]
            for layout in dict.fromkeys(_row_layout(parts[i]) for i in idx):
                groups.append([i for i in idx if _row_layout(parts[i]) == layout])
                self.group_folded.append(flag)
        self.groups = torch.nn.ModuleList(FusedOrSplit([parts[i] for i in g], make) for g in groups)
        where = {i: (gi, j) for gi, g in enumerate(groups) for j, i in enumerate(g)}
        self.order = [where[i] for i in range(len(parts))]

    def forward(self, act: Activation) -> list[torch.Tensor]:
        outs = [g(act.get(f)) for g, f in zip(self.groups, self.group_folded, strict=True)]
        return [outs[gi][j] for gi, j in self.order]
