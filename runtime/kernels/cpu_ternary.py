"""Exact, fast CPU ternary matmul: a small C kernel built on first use with the host compiler.

Why not torch alone: CPU decode is bound by how fast the weights stream through the cores, so they
must stay at ~2 bits and be consumed without unpacking to a dense copy. torch has no 2-bit kernel, and its int4 CPU kernel
(:mod:`runtime.kernels.cpu_int4`) is only fast for bf16 activations, which is not exact. The C
kernel (``cpu_ternary_kernel.c``) reads the canonical ``t2`` codes and fp16 group scales in place
(2.125 bits/weight at group 128, no repacking, so a memory-mapped ``.ternary`` file is used as is),
expands 16 weights at a time to exact fp32 values in registers and multiplies with FMAs.

Build: ``cc -O3 -march=native -fopenmp -shared`` into the user cache directory, keyed by a hash of
source, compiler and CPU flags, written atomically (parallel processes may build at once). If no
compiler is found, :func:`kernel_library` raises ``RuntimeError`` and the backend is not
registered, so :func:`runtime.kernels.linear.default_backend` falls back to the next backend.
Set ``TERNARY_CPU_KERNEL=0`` to disable it.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

from runtime.formats import codecs
from runtime.formats.model_data import T2, TernaryTensor
from runtime.kernels.linear import BACKENDS, LinearWeight

_SOURCE = Path(__file__).with_name("cpu_ternary_kernel.c")
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_CHUNK_ROWS = 8192  # rows converted at a time when the source tensor is t3


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return platform.processor() + platform.machine()


def _cache_dir() -> Path:
    env = os.environ.get("TERNARY_KERNEL_CACHE")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("ternary-chat")) / "kernels"


def _compiler() -> str:
    for cand in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cand and shutil.which(cand):
            return cand
    raise RuntimeError("no C compiler (cc/gcc/clang) found; the exact fast CPU kernel cannot be built")


def _build(cc: str, out: Path, isa_flags: list[str]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    attempts = [[*isa_flags, "-fopenmp"], ["-fopenmp"], isa_flags, []]
    errors = []
    for extra in attempts:
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        os.close(fd)
        cmd = [cc, "-O3", "-std=c11", "-shared", "-fPIC", *extra, str(_SOURCE), "-o", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode == 0:
            os.replace(tmp, out)  # atomic: another process sees the old file or the whole new one
            return
        os.unlink(tmp)
        errors.append(f"{' '.join(cmd)}: {proc.stderr.strip()[-300:]}")
    raise RuntimeError("building the CPU ternary kernel failed: " + " | ".join(errors))


def load_kernel(isa_flags: list[str] | None = None) -> ctypes.CDLL:
    """Build (once, cached on disk) and load the kernel for ``isa_flags`` (default ``-march=native``).

    Other flags (``["-mavx2", "-mfma", "-mf16c"]``, ``[]`` for portable C) exist so tests can check
    every code path on one machine.
    """
    if os.environ.get("TERNARY_CPU_KERNEL", "1") == "0":
        raise RuntimeError("the C CPU kernel is disabled by TERNARY_CPU_KERNEL=0")
    flags = ["-march=native"] if isa_flags is None else list(isa_flags)
    cc = _compiler()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    ident = _SOURCE.read_bytes() + version.encode() + _cpu_flags().encode() + f"flags={flags}".encode()
    path = _cache_dir() / f"cpu_ternary_{hashlib.sha256(ident).hexdigest()[:20]}.so"
    if not path.exists():
        _build(cc, path, flags)
    lib = ctypes.CDLL(str(path))  # torch is imported first, so libgomp.so.1 resolves to torch's
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.ternary_mm.argtypes = [p, p, p, p, i64, i64, i64, i64, i64, ctypes.c_int]
    lib.ternary_mm.restype = None
    lib.ternary_rows.argtypes = [p, i64, p, p, p, i64, i64]
    lib.ternary_rows.restype = None
    lib.kernel_isa.restype = ctypes.c_int
    return lib


def kernel_library() -> ctypes.CDLL:
    """The kernel for this machine (built and cached on first use)."""
    global _lib
    with _lock:
        if _lib is None:
            _lib = load_kernel()
        return _lib


def kernel_isa() -> int:
    """Vector width the kernel was compiled for: 512 (AVX-512), 256 (AVX2+FMA) or 0 (portable C)."""
    return int(kernel_library().kernel_isa())


def t2_codes(t: TernaryTensor) -> torch.Tensor:
    """The tensor's codes in the t2 layout the kernel reads (t3 is converted in row chunks)."""
    if t.encoding == T2:
        return t.codes.contiguous()
    rows, cols = t.shape
    out = torch.empty(rows, cols // 4, dtype=torch.uint8)
    for r0 in range(0, rows, _CHUNK_ROWS):
        r1 = min(rows, r0 + _CHUNK_ROWS)
        part = TernaryTensor((r1 - r0, cols), t.group_size, t.codes[r0:r1], t.scales[r0:r1], t.encoding)
        out[r0:r1] = codecs.pack_t2(codecs.codes_of(part))
    return out


class CpuTernaryLinear(LinearWeight):
    """The t2 codes + fp16 scales as stored (2.125 bits/weight at g128, no copy); exact fp32 matmul."""

    backend = "cpu_ternary"

    def __init__(self, t: TernaryTensor, device: torch.device | str = "cpu") -> None:
        super().__init__(t)
        if torch.device(device).type != "cpu":
            raise ValueError(f"the cpu_ternary backend runs on the CPU, not on {device}")
        if self.group_size % 16 or self.in_features % 16:
            raise ValueError(f"cpu_ternary needs group size and width divisible by 16, got "
                             f"group {self.group_size}, width {self.in_features}")
        self._lib = kernel_library()
        self.register_buffer("codes", t2_codes(t), persistent=False)
        self.register_buffer("scales", t.scales.contiguous(), persistent=False)
        self._mm = self._lib.ternary_mm
        self._codes_ptr, self._scales_ptr = self.codes.data_ptr(), self.scales.data_ptr()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # fast path for what the engine passes (2-D contiguous fp32): decode calls this ~200 times
        # per token, so Python overhead per call matters (~7 us per call here vs ~12 us in general)
        if x.dtype == torch.float32 and x.dim() == 2 and x.is_cpu and x.is_contiguous() \
                and x.shape[1] == self.in_features and self.codes.data_ptr() == self._codes_ptr \
                and self.scales.data_ptr() == self._scales_ptr:
            m = x.shape[0]
            y = torch.empty(m, self.out_features, dtype=torch.float32)
            if m:
                self._mm(x.data_ptr(), self._codes_ptr, self._scales_ptr, y.data_ptr(), m, self.out_features,
                         self.in_features, self.group_size, self.out_features, torch.get_num_threads())
            return y
        return self._forward_general(x)

    def _forward_general(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu":
            raise ValueError(f"cpu_ternary got an input on {x.device}")
        if x.shape[-1] != self.in_features:
            raise ValueError(f"input width {x.shape[-1]} != weight width {self.in_features}")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if x2.dtype != torch.float32 or not x2.is_contiguous():
            x2 = x2.to(torch.float32).contiguous()
        m = x2.shape[0]
        y = torch.empty(m, self.out_features, dtype=torch.float32)
        if m:
            self._lib.ternary_mm(x2.data_ptr(), self.codes.data_ptr(), self.scales.data_ptr(), y.data_ptr(),
                                 m, self.out_features, self.in_features, self.group_size,
                                 self.out_features, torch.get_num_threads())
        return y.to(x.dtype).reshape(*lead, self.out_features)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """fp32 rows ``ids`` of the weight (an embedding lookup from the same compact codes)."""
        flat = ids.reshape(-1).to(torch.int64).contiguous()
        if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= self.out_features):
            raise IndexError(f"token id out of range 0..{self.out_features - 1}")
        out = torch.empty(flat.numel(), self.in_features, dtype=torch.float32)
        self._lib.ternary_rows(flat.data_ptr(), flat.numel(), self.codes.data_ptr(), self.scales.data_ptr(),
                               out.data_ptr(), self.in_features, self.group_size)
        return out.reshape(*ids.shape, self.in_features)


def cpu_ternary_available() -> bool:
    """True when the C kernel can be built/loaded here (a C compiler is present)."""
    try:
        kernel_library()
    except (RuntimeError, OSError):
        return False
    return True


if cpu_ternary_available():
    BACKENDS["cpu_ternary"] = CpuTernaryLinear
