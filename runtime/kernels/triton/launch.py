"""Launch plumbing shared by the Triton kernels: whether Triton's interpreter runs them (CPU tests), the
checks on a packed weight's shapes, row views of x, split-K partial buffers with their arrival counters, and
the SM count the persistent kernels size their grid by."""

from __future__ import annotations

import os

import torch

from runtime.formats.model_data import T2, T3, t3_bytes_per_group

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
_counters: dict[tuple[torch.device, str], torch.Tensor] = {}


def _counter_buffer(device: torch.device, n: int, owner: str = "gemv") -> torch.Tensor:
    """Zeroed int32 arrival counters for in-launch split reductions; kernels reset what they use."""
    buf = _counters.get((device, owner))
    if buf is None or buf.numel() < n:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("Triton kernels: call each shape once before CUDA-graph capture (warm-up)")
        buf = torch.zeros(max(n, 1 << 20 if owner == "gemv" else 1024), dtype=torch.int32, device=device)
        _counters[(device, owner)] = buf
    return buf


def _check(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, group_size: int, encoding: str) -> tuple[int, int]:
    n, groups = scales.shape
    k = groups * group_size
    if x.shape[-1] != k:
        raise ValueError(f"x has {x.shape[-1]} features, weight expects {k}")
    if encoding == T2:
        if group_size % 16 or codes.shape != (n, k // 4):
            raise ValueError(f"t2 codes must be uint8[{n}, {k // 4}] with group size % 16 == 0")
    elif encoding == T3:
        if codes.shape != (n, groups * t3_bytes_per_group(group_size)):
            raise ValueError("t3 codes have the wrong shape")
    else:
        raise ValueError(f"unknown encoding {encoding!r}")
    if codes.dtype != torch.uint8 or scales.dtype != torch.float16:
        raise ValueError("codes must be uint8 and scales float16")
    if not (codes.is_contiguous() and scales.is_contiguous()):
        raise ValueError("codes and scales must be contiguous")
    if group_size & (group_size - 1):
        raise ValueError("group size must be a power of two for the Triton kernels")
    return n, k


def is_mapped(t: torch.Tensor) -> bool:
    """A weight outside device memory, i.e. pinned host memory the kernels read over the bus
    (``runtime.offload`` mapped mode); in the interpreter every tensor is on the CPU, none mapped."""
    return not INTERPRET and t.device.type != "cuda"


def _as_rows(x: torch.Tensor) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


def _splitk_buffers(sk: int, m: int, n: int, dual: bool, tiles: int, y2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 partials and arrival counters for an in-launch split-K reduction (``y2`` stands in,
    unused, when there is a single split)."""
    if sk == 1:
        return y2, y2
    part = torch.empty(sk * m * n * (2 if dual else 1), dtype=torch.float32, device=y2.device)
    return part, _counter_buffer(y2.device, tiles)


_SM_COUNT: dict[int, int] = {}


def _sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (the persistent mat-vec sizes its grid by them); 3 under
    the interpreter, so its tests walk several tiles per program with an uneven last round."""
    if device.type != "cuda":
        return 3
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNT[index]
