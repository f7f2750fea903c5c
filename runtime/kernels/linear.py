"""Ternary linear layer: ``y = x @ W^T`` for a packed :class:`TernaryTensor` W.

Backends register here. :func:`prepare_linear` turns a TernaryTensor into a callable module for one
device once, at load time (any repacking for a backend happens there, never per call). The
reference backend dequantizes group-wise in chunks of rows so it never holds a full fp32 copy
of a large matrix.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch

from runtime.formats.codecs import dequantize_ternary
from runtime.formats.model_data import TernaryTensor


class LinearWeight(torch.nn.Module):
    """A prepared ternary weight. Call it with activations ``[..., in]`` -> ``[..., out]``."""

    backend = "abstract"

    def __init__(self, t: TernaryTensor) -> None:
        super().__init__()
        self.out_features, self.in_features = t.shape
        self.group_size = t.group_size

    @property
    def nbytes(self) -> int:  # bytes this prepared weight keeps resident
        return sum(b.numel() * b.element_size() for b in self.buffers())


class ReferenceLinear(LinearWeight):
    """Exact torch reference: dequantize blocks of rows, matmul, discard. Slow, for correctness."""

    backend = "reference"
    ROW_BLOCK = 4096

    def __init__(self, t: TernaryTensor, device: torch.device | str = "cpu") -> None:
        super().__init__(t)
        self.encoding = t.encoding
        self.register_buffer("codes", t.codes.to(device), persistent=False)
        self.register_buffer("scales", t.scales.to(device), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = []
        for r0 in range(0, self.out_features, self.ROW_BLOCK):
            r1 = min(r0 + self.ROW_BLOCK, self.out_features)
            part = TernaryTensor((r1 - r0, self.in_features), self.group_size,
                                 self.codes[r0:r1], self.scales[r0:r1], self.encoding)
            w = dequantize_ternary(part, x.dtype if x.dtype != torch.float16 else torch.float32)
            outs.append(torch.nn.functional.linear(x.to(w.dtype), w).to(x.dtype))
        return torch.cat(outs, dim=-1)


# name -> factory(t, device) ; backends add themselves (see cpu/triton modules)
BACKENDS: dict[str, Callable[[TernaryTensor, torch.device], LinearWeight]] = {
    "reference": ReferenceLinear,
}


# Backends living in their own modules, imported on first use so importing this module stays cheap.
_BACKEND_MODULES: dict[str, str] = {
    "cpu_ternary": "runtime.kernels.cpu.ternary",
    "cpu_int4": "runtime.kernels.cpu.int4",
}


def _load_backend(name: str) -> bool:
    """Import the module that registers backend ``name``; True if it is registered afterwards."""
    if name not in BACKENDS and name in _BACKEND_MODULES:
        try:
            importlib.import_module(_BACKEND_MODULES[name])
        except ImportError:
            return False
    return name in BACKENDS


def prepare_linear(t: TernaryTensor, device: torch.device | str = "cpu", backend: str = "auto") -> LinearWeight:
    """Prepare ``t`` for matmuls on ``device`` with ``backend`` ("auto" picks the fastest available)."""
    device = torch.device(device)
    if backend == "auto":
        backend = default_backend(device)
        try:
            return BACKENDS[backend](t, device)
        except ValueError:  # a layout outside the fast backend's limits (e.g. its group sizes)
            return BACKENDS["reference"](t, device)
    if not _load_backend(backend):
        raise ValueError(f"unknown linear backend {backend!r} (available: {', '.join(sorted(BACKENDS))})")
    return BACKENDS[backend](t, device)


def default_backend(device: torch.device) -> str:
    """Fastest registered backend for a device; falls back to the reference."""
    # cpu_ternary: exact fp32, needs a C compiler once; cpu_int4: torch-only, bf16 activations (inexact)
    preferred = ["triton"] if device.type == "cuda" else ["cpu_ternary", "cpu_int4"]
    for name in preferred:
        if _load_backend(name):
            return name
    return "reference"
