"""The ``"triton"`` backend of :mod:`runtime.kernels.linear`: packed weights on the GPU, read by the kernels.

Importing this module registers the backend (on CUDA and under Triton's interpreter); the launch configs
measured earlier are loaded by :mod:`runtime.kernels.triton.tuning` when the kernels' modules are imported.
"""

from __future__ import annotations

import torch

from runtime.formats.model_data import TernaryTensor
from runtime.kernels import linear
from runtime.kernels.triton.gemm import ternary_matmul
from runtime.kernels.triton.launch import INTERPRET


class TritonLinear(linear.LinearWeight):
    """Packed codes + fp16 scales on the GPU exactly as stored; every call reads them directly."""

    backend = "triton"

    def __init__(self, t: TernaryTensor, device: torch.device | str = "cuda") -> None:
        super().__init__(t)
        self.encoding = t.encoding
        self.register_buffer("codes", t.codes.to(device).contiguous(), persistent=False)
        self.register_buffer("scales", t.scales.to(device).contiguous(), persistent=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        return ternary_matmul(x, self.codes, self.scales, self.group_size, self.encoding, residual=residual)


def _register() -> None:
    if INTERPRET or torch.cuda.is_available():
        linear.BACKENDS.setdefault("triton", TritonLinear)


_register()
