"""Static KV cache: preallocated once, written at position *tensors*.

Layout ``[layers, kv_heads, max_positions, head_dim]`` (head-major, so attention reads each
head's keys as one contiguous block). Positions are tensors and the buffers never move, which is
what lets a decode step be ``torch.compile``d or captured in a CUDA graph unchanged.

8-bit mode (``dtype=torch.int8``) halves the cache so twice the context fits in the same memory.
Each (layer, head, position) vector of ``head_dim`` values is quantized symmetrically by its
absolute maximum: ``q = round(x / s)`` with ``s = absmax / 127`` (round half away from zero,
clamped to ±127), and ``s`` is stored in fp32 buffers ``k_scale, v_scale [layers, kv_heads,
max_positions]``. That is exactly what the Triton kernels write and read
(``runtime.kernels.triton.rope.qk_norm_rope_kv_write`` / ``triton.attention.decode_attention``
with ``k_scale=cache.k_scale[layer], v_scale=cache.v_scale[layer]``), so a prefill through the
torch path here and a decode step through the kernels share one cache.
"""

from __future__ import annotations

import math
import mmap

import torch

# Names accepted wherever a user picks the cache precision (CLI --kv-cache, GUI, Engine.load).
# "auto" = the ``act_dtype`` the caller passes to resolve_kv_dtype: the engine's default for the
# device (:func:`default_kv_dtype`), never a quantized cache.
KV_CACHE_CHOICES = ("auto", "fp16", "bf16", "fp32", "int8")
_NAMED_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "int8": torch.int8}
FLOAT_KV_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INT8_MAX = 127.0


def resolve_kv_dtype(kv: torch.dtype | str | None, act_dtype: torch.dtype) -> torch.dtype:
    """The cache dtype for a user's choice: a name from :data:`KV_CACHE_CHOICES`, a dtype, or None.

    Raises ``ValueError`` with the accepted names for anything else.
    """
    if kv is None or kv == "auto":
        return act_dtype
    if isinstance(kv, str):
        if kv not in _NAMED_DTYPES:
            raise ValueError(f"unknown KV cache precision {kv!r}; choose one of {', '.join(KV_CACHE_CHOICES)}")
        return _NAMED_DTYPES[kv]
    if kv not in (*FLOAT_KV_DTYPES, torch.int8):
        raise ValueError(f"KV cache dtype {kv} is not supported; use fp16, bf16, fp32 or int8")
    return kv


def default_kv_dtype(device_type: str, act_dtype: torch.dtype) -> torch.dtype:
    """What "auto" should mean on a device: fp16 for fp32 activations on the CPU, else ``act_dtype``.

    Why fp16 on the CPU: an fp32 cache is twice the bytes (112 MiB at 512 tokens of the 1.7B,
    1.8 GiB at 8192) and peak RSS is what a laptop user runs out of; fp16 keeps 11 significant bits
    (bf16 keeps 8) and is llama.cpp's default cache too. Attention reads it cast back to fp32. On
    CUDA the activations are bf16 already.
    """
    if device_type == "cpu" and act_dtype == torch.float32:
        return torch.float16
    return act_dtype


def kv_dtype_name(dtype: torch.dtype) -> str:
    """``torch.int8`` -> ``"int8"`` etc. (the planner's and the CLI's names)."""
    for name, d in _NAMED_DTYPES.items():
        if d == dtype:
            return name
    raise ValueError(f"KV cache dtype {dtype} has no name")


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric absmax int8 over the last dim: ``(q int8 [..., D], scale fp32 [...])``.

    ``x ≈ q * scale[..., None]`` with ``|x - q*scale| <= scale / 2 = absmax / 254`` per element.
    An all-zero vector gets scale 0 (and q 0). Rounding is half away from zero, like the kernel.
    """
    xf = x.to(torch.float32)
    scale = xf.abs().amax(dim=-1) / INT8_MAX
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    qf = xf / safe.unsqueeze(-1)
    q = (torch.sign(qf) * torch.floor(qf.abs() + 0.5)).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``q [..., D] * scale [...]`` in ``dtype`` (computed in fp32)."""
    return (q.to(torch.float32) * scale.unsqueeze(-1)).to(dtype)


def zeroed(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A zero-filled buffer. On the CPU it lives in fresh anonymous pages (an ``mmap``, the kernel's zero
    pages until written, transparent huge pages off), so a cache sized for the whole context adds to the
    process's resident memory only as positions are written: 35 of the 56 MiB of a 1.7B's fp16 cache at
    context 512 stay unused by a 128-token prompt and 64 answer tokens (``torch.zeros`` would write them all)."""
    dev = torch.device(device)
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if dev.type != "cpu" or nbytes < mmap.PAGESIZE:
        return torch.zeros(shape, dtype=dtype, device=dev)
    if hasattr(mmap, "MAP_PRIVATE"):  # POSIX: anonymous and private (counted as RssAnon on Linux)
        pages = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)
    else:  # Windows: anonymous pages of the paging file, demand-zero as well
        pages = mmap.mmap(-1, nbytes)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # one 2 MiB page per touched head would undo the saving
        pages.madvise(mmap.MADV_NOHUGEPAGE)
    return torch.frombuffer(pages, dtype=torch.uint8).view(dtype).view(shape)


class KVCache(torch.nn.Module):
    """Keys and values for every attention layer of one sequence (float or int8 + scales)."""

    k_scale: torch.Tensor | None
    v_scale: torch.Tensor | None

    def __init__(self, layers: int, kv_heads: int, max_positions: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str = "cpu") -> None:
        super().__init__()
        if dtype not in (*FLOAT_KV_DTYPES, torch.int8):
            raise ValueError(f"KV cache dtype {dtype} is not supported; use fp16, bf16, fp32 or int8")
        shape = (layers, kv_heads, max_positions, head_dim)
        self.max_positions = max_positions
        self.quantized = dtype == torch.int8
        # Zeroed, not empty: a graph-captured step attends over all positions (masked), and
        # 0 * NaN from uninitialised memory would poison the masked-out part.
        self.register_buffer("k", zeroed(shape, dtype, device), persistent=False)
        self.register_buffer("v", zeroed(shape, dtype, device), persistent=False)
        # int8 only: fp32 scales [layers, kv_heads, max_positions] (the Triton kernels' layout);
        # None for float caches.
        sshape = (layers, kv_heads, max_positions)
        for name in ("k_scale", "v_scale"):
            buf = zeroed(sshape, torch.float32, device) if self.quantized else None
            self.register_buffer(name, buf, persistent=False)

    @property
    def dtype(self) -> torch.dtype:
        return self.k.dtype

    @property
    def nbytes(self) -> int:
        """Bytes of all buffers, scales included."""
        n = 2 * self.k.numel() * self.k.element_size()
        if self.k_scale is not None and self.v_scale is not None:
            n += (self.k_scale.numel() + self.v_scale.numel()) * self.k_scale.element_size()
        return n

    def update(self, layer: int, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               kv_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k, v [T, kv_heads, head_dim]`` at ``input_pos [T]``; return this layer's cache.

        The returned tensors are ``[kv_heads, kv_len or max_positions, head_dim]``: views of the
        buffers for a float cache; for an int8 cache a dequantized copy in ``k``'s dtype (see
        :meth:`read`).
        """
        kc, vc = self.k[layer], self.v[layer]
        if not self.quantized:
            kc.index_copy_(1, input_pos, k.transpose(0, 1).to(kc.dtype))
            vc.index_copy_(1, input_pos, v.transpose(0, 1).to(vc.dtype))
            if kv_len is not None:
                return kc[:, :kv_len], vc[:, :kv_len]
            return kc, vc
        assert self.k_scale is not None and self.v_scale is not None
        for src, dst, scales in ((k, kc, self.k_scale[layer]), (v, vc, self.v_scale[layer])):
            q, s = quantize_int8(src.transpose(0, 1))  # [H, T, D], [H, T]
            dst.index_copy_(1, input_pos, q)
            scales.index_copy_(1, input_pos, s)
        return self.read(layer, kv_len, k.dtype if k.is_floating_point() else torch.float32)

    def read(self, layer: int, kv_len: int | None = None,
             dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """This layer's keys and values ``[kv_heads, kv_len or max_positions, head_dim]``.

        Float caches return views (cast only when ``dtype`` differs); int8 caches dequantize the
        first ``kv_len`` positions into new tensors of ``dtype`` (default fp32). The eager and
        prefill SDPA path reads this way; the Triton decode kernel reads the int8 buffers directly.
        """
        n = self.max_positions if kv_len is None else kv_len
        kc, vc = self.k[layer, :, :n], self.v[layer, :, :n]
        if not self.quantized:
            return (kc, vc) if dtype is None else (kc.to(dtype), vc.to(dtype))
        assert self.k_scale is not None and self.v_scale is not None
        out = dtype or torch.float32
        return (dequantize_int8(kc, self.k_scale[layer, :, :n], out),
                dequantize_int8(vc, self.v_scale[layer, :, :n], out))
