"""Programmatic dependent launch (PDL, Hopper and newer): a kernel starts while the previous one drains.

Why: a batch-1 decode step is hundreds of kernels of a few microseconds each, and between two of
them the GPU idles while the first one's last blocks finish, its writes are flushed and the next
grid is launched and ramps up. Launched with PDL, the next kernel's blocks become resident during
that tail, issue the loads that need nothing from earlier kernels (a mat-vec's first weight tile),
and only then wait (``griddepcontrol.wait``) until the previous kernel has finished and its memory
is visible. Inside a CUDA graph the dependency becomes a programmatic edge, so replays keep it.

The contract every kernel launched with :func:`launch_options` must keep: **each program calls**
:func:`gdc_wait` **before it reads anything an earlier kernel wrote and before it writes anything**;
before the wait it may only read data no kernel of the step writes (weights, scales, norm weights), or
read something only to steer :func:`prefetch_l2` (a hint: a value not yet final moves other lines into L2,
never a wrong number into a result; decode attention prefetches its first K/V tiles that way).
:func:`gdc_wait` also lets the next kernel launch, right after the wait, so at most two kernels overlap.

``TERNARY_PDL=0`` turns it off (read at each launch through :func:`enabled`); it is never used in
Triton's interpreter or on GPUs older than sm_90, where the launch attribute does not exist.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from runtime import flags

PDL_ENV = "TERNARY_PDL"
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

_override: bool | None = None
_capable: dict[int, bool] = {}


def _triton_has_gdc() -> bool:
    """Triton exposes the wait/launch instructions and the ``launch_pdl`` launch option (3.4+)."""
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
        from triton.language.extra import cuda as tl_cuda
    except ImportError:
        return False
    return hasattr(tl_cuda, "gdc_wait") and hasattr(tl_cuda, "gdc_launch_dependents") \
        and "launch_pdl" in getattr(CUDAOptions, "__dataclass_fields__", {})


_HAS_GDC = _triton_has_gdc()


def set_enabled(flag: bool | None) -> None:
    """Force PDL on/off for this process (``None``: back to the environment); for benchmarks and tests.
    Graphs captured before the change keep the launches they were captured with."""
    global _override
    _override = flag


def enabled(device: torch.device | None = None) -> bool:
    """Whether kernels launched now on ``device`` (default: the current CUDA device) use PDL."""
    if INTERPRET or not _HAS_GDC:
        return False
    flag = _override if _override is not None else flags.value(PDL_ENV) != "0"
    if not flag or (device is not None and device.type != "cuda"):
        return False
    if device is not None and device.index is not None:
        index = device.index  # the common per-launch case: no CUDA runtime query
    elif torch.cuda.is_available():
        index = torch.cuda.current_device()
    else:
        return False
    if index not in _capable:
        _capable[index] = torch.cuda.is_available() and torch.cuda.get_device_capability(index)[0] >= 9
    return _capable[index]


def launch_options(device: torch.device | None = None) -> dict[str, object]:
    """Extra keyword arguments for a Triton launch: ``USE_GDC`` (the kernels' constexpr switch) and,
    when PDL is on, ``launch_pdl=True``."""
    if enabled(device):
        return {"USE_GDC": True, "launch_pdl": True}
    return {"USE_GDC": False}


@triton.jit
def gdc_wait(USE_GDC: tl.constexpr):
    """Wait for the previous kernel (and its memory) when launched with PDL, then let the next
    kernel launch; a no-op when ``USE_GDC`` is off."""
    if USE_GDC:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def prefetch_l2(ptrs, mask):
    """``prefetch.global.L2`` of the 128-byte lines holding ``ptrs`` where ``mask``: what a kernel launched early
    can do with data it must not read yet, or has no registers for. A hint with no result, so a line fetched
    before its writer finished never reaches a register (writes land in L2, which stays coherent). Inline PTX:
    GPU only (callers gate it on ``USE_GDC``, which is off in the interpreter)."""
    tl.inline_asm_elementwise("{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",
                              "=r,l,r", [ptrs, mask.to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


__all__ = ["PDL_ENV", "enabled", "gdc_wait", "launch_options", "prefetch_l2", "set_enabled"]
