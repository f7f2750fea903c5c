"""Fast CPU ternary matmul: small C kernels, one per instruction set, built on first use with the host cc.

Why not torch alone: CPU decode is bound by how fast the weights stream through the cores, so they must
stay at ~2 bits and be consumed without unpacking to a dense copy; torch has no 2-bit kernel. The
kernels (``cpu/ternary_x86.c``: AVX-512 (+VNNI), AVX2 (+AVX-VNNI), portable C; ``cpu/ternary_neon.c``:
ARM64 NEON (+dot product); shared rules in ``cpu/ternary_common.h``) read the canonical ``t2`` codes
and fp16 group scales in place (2.125 bits/weight at g128, no repacking, so a memory-mapped
``.ternary`` file is used as is). Two activation modes:

- ``exact``: every weight becomes exactly ``(code - 1) * s`` in fp32 and is multiplied with FMAs.
- ``int8`` (default where faster): activations quantised once per call to int8 with one fp32 scale per
  32 values (llama.cpp's Q8_0 block, the scale kept in fp32 where Q8_0 rounds it to fp16), then integer
  dot products (vpdpbusd / sdot). Fewer instructions per weight, which is what slower cores need; the
  accuracy cost is measured in the tests. llama.cpp's TQ1_0/TQ2_0 use Q8_K (one scale per 256); a mode
  rounding exactly as Q8_K was measured and dropped: it brought logits no closer to llama.cpp's
  (docs/benchmarks.md, "greedy tokens against llama.cpp").

Each ISA variant is its own shared library built with explicit flags (``ISA_VARIANTS``) into the user
cache directory, keyed by a hash of all kernel sources, the compiler and the flags, written atomically
(parallel processes may build at once). Threads come from the kernels' own small pool
(``cpu/ternary_pool.h``), not OpenMP, so a core taken by another process does not stall every matmul.
The best variant the CPU can run is chosen from its flags at run time; ``TERNARY_CPU_ISA=avx512|avx2|neon|c`` forces one family (error if the CPU lacks it),
``TERNARY_CPU_ACTIVATIONS=int8|exact`` picks the activation mode, ``TERNARY_CPU_KERNEL=0`` disables
the backend. If no compiler is found the backend is not registered and
:func:`runtime.kernels.linear.default_backend` falls back to the next one.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from runtime import flags
from runtime.formats import codecs
from runtime.formats.model_data import T2, TernaryTensor
from runtime.kernels.linear import BACKENDS, LinearWeight

_SOURCE_DIR = Path(__file__).parent
_lock = threading.Lock()
_libs: dict[str, ctypes.CDLL] = {}  # variant name -> loaded library
_CHUNK_ROWS = 8192  # rows converted at a time when the source tensor is t3
ACTIVATIONS = ("int8", "exact")
DEFAULT_ACTIVATIONS = "int8"  # 2-3x faster than exact with SIMD (portable C keeps exact); one setting away
FAMILIES = ("avx512", "avx2", "neon", "c")


@dataclass(frozen=True)
class IsaVariant:
    """One build of one kernel source: its ``kernel_name()``, family, compiler flags and CPU needs."""

    name: str
    family: str
    source: str
    flags: tuple[str, ...]
    needs: tuple[str, ...]  # CPU feature flags as /proc/cpuinfo spells them


_AVX512 = ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mfma", "-mf16c")
_AVX2 = ("-mavx2", "-mfma", "-mf16c")
# preference order: the first one the CPU can run (and the compiler can build) is used
ISA_VARIANTS: tuple[IsaVariant, ...] = (
    IsaVariant("avx512-vnni", "avx512", "ternary_x86.c", (*_AVX512, "-mavx512vnni"),
               ("avx512f", "avx512bw", "avx512vl", "fma", "f16c", "avx512_vnni")),
    IsaVariant("avx512", "avx512", "ternary_x86.c", _AVX512, ("avx512f", "avx512bw", "avx512vl", "fma", "f16c")),
    IsaVariant("avx2-vnni", "avx2", "ternary_x86.c", (*_AVX2, "-mavxvnni"), ("avx2", "fma", "f16c", "avx_vnni")),
    IsaVariant("avx2", "avx2", "ternary_x86.c", _AVX2, ("avx2", "fma", "f16c")),
    IsaVariant("neon-dotprod", "neon", "ternary_neon.c", ("-march=armv8.2-a+dotprod",), ("asimd", "asimddp")),
    IsaVariant("neon", "neon", "ternary_neon.c", ("-march=armv8-a",), ("asimd",)),  # Apple clang: no implied dotprod
    IsaVariant("c", "c", "ternary_x86.c", (), ()),
)
_BY_NAME = {v.name: v for v in ISA_VARIANTS}


def _sysctl(key: str) -> str:
    try:
        return subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


@functools.cache
def cpu_features() -> frozenset[str]:
    """The CPU's feature flags, spelled as in /proc/cpuinfo (``avx512_vnni``, ``asimddp``, ...)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    machine = platform.machine().lower()
    if machine in ("arm64", "aarch64"):  # macOS on Apple silicon: every chip has NEON
        feats = {"asimd"}
        if _sysctl("hw.optional.arm.FEAT_DotProd") == "1":
            feats.add("asimddp")
        return frozenset(feats)
    # other systems (Windows): what torch detected at import
    cap = torch.backends.cpu.get_cpu_capability().upper()
    if cap.startswith("AVX512"):
        return frozenset({"avx512f", "avx512bw", "avx512vl", "avx2", "fma", "f16c"})
    if cap.startswith("AVX2"):
        return frozenset({"avx2", "fma", "f16c"})
    return frozenset()


def _runnable(v: IsaVariant, feats: frozenset[str]) -> bool:
    return all(f in feats for f in v.needs) and (_SOURCE_DIR / v.source).exists()


def available_variants() -> list[str]:
    """Kernel variants this CPU can run, best first (e.g. ``["avx512-vnni", "avx512", "avx2", "c"]``)."""
    feats = cpu_features()
    return [v.name for v in ISA_VARIANTS if _runnable(v, feats)]


def available_isas() -> list[str]:
    """ISA families (``TERNARY_CPU_ISA`` values) this CPU can run, best first."""
    names = available_variants()
    return [f for f in FAMILIES if any(_BY_NAME[n].family == f for n in names)]


def _cache_dir() -> Path:
    env = flags.value("TERNARY_KERNEL_CACHE")
    if env:
        return Path(env)
    try:
        import platformdirs
    except ImportError:  # the runtime alone (no app dependencies installed)
        return Path.home() / ".cache" / "ternary-chat" / "kernels"
    return Path(platformdirs.user_cache_dir("ternary-chat")) / "kernels"


def _compiler() -> str:
    for cand in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cand and shutil.which(cand):
            return cand
    raise RuntimeError("no C compiler (cc/gcc/clang) found; the fast CPU kernel cannot be built")


def _sources_digest() -> bytes:
    """All kernel sources (every .c and .h): a change to the shared header rebuilds every variant."""
    h = hashlib.sha256()
    for p in sorted(_SOURCE_DIR.iterdir()):
        if p.suffix in (".c", ".h"):
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.digest()


def build_command(v: IsaVariant, cc: str, out: str, openmp: bool = True) -> list[str]:
    """The compiler command that builds variant ``v`` into the shared library ``out``."""
    # -fno-trapping-math (clang's default): lets gcc vectorise loops with selects, e.g. ds_exp's clamps in
    # SiLU (4 % of an AVX2 prefill when scalar); no result changes, only whether FP exceptions are observable
    return [cc, "-O3", "-std=c11", "-fno-trapping-math", "-shared", "-fPIC", "-pthread", *v.flags,
            *(["-fopenmp"] if openmp else []),
            f"-I{_SOURCE_DIR}", str(_SOURCE_DIR / v.source), "-o", out, "-lm"]


def _build(cc: str, v: IsaVariant, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for openmp in (True, False):  # Apple clang has no -fopenmp: single-threaded then
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        os.close(fd)
        cmd = build_command(v, cc, tmp, openmp)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode == 0:
            os.replace(tmp, out)  # atomic: another process sees no file or the whole new one
            return
        os.unlink(tmp)
        errors.append(f"{' '.join(cmd)}: {proc.stderr.strip()[-300:]}")
    raise RuntimeError(f"building the CPU ternary kernel {v.name} failed: " + " | ".join(errors))


def load_variant(name: str) -> ctypes.CDLL:
    """Build (once, cached on disk) and load kernel variant ``name`` (see ``ISA_VARIANTS``)."""
    if flags.value("TERNARY_CPU_KERNEL") == "0":
        raise RuntimeError("the C CPU kernel is disabled by TERNARY_CPU_KERNEL=0")
    if name not in _BY_NAME:
        raise ValueError(f"unknown CPU kernel variant {name!r} (known: {', '.join(_BY_NAME)})")
    with _lock:
        if name in _libs:
            return _libs[name]
        v = _BY_NAME[name]
        cc = _compiler()
        version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
        ident = _sources_digest() + version.encode() + f"{v}".encode()
        path = _cache_dir() / f"cpu_ternary_{v.name}_{hashlib.sha256(ident).hexdigest()[:20]}.so"
        if not path.exists():
            _build(cc, v, path)
        lib = ctypes.CDLL(str(path))  # torch is imported first, so libgomp.so.1 resolves to torch's
        p, i64 = ctypes.c_void_p, ctypes.c_int64
        lib.ternary_mm.argtypes = [p, p, p, p, i64, i64, i64, i64, i64, ctypes.c_int]
        lib.ternary_mm.restype = None
        lib.ternary_rows.argtypes = [p, i64, p, p, p, i64, i64]
        lib.ternary_rows.restype = None
        lib.quantize_q8.argtypes = [p, i64, i64, p, p, p]
        lib.quantize_q8.restype = None
        lib.ternary_mm_q8.argtypes = [p, p, p, p, p, p, i64, i64, i64, i64, i64, ctypes.c_int]
        lib.ternary_mm_q8.restype = None
        lib.ds_layers.argtypes = [p, p, p, i64, ctypes.c_int]  # the fused decode step (decode_step.py)
        lib.ds_layers.restype = None
        lib.ds_prompt.argtypes = [p, p, p, i64, i64, ctypes.c_int]  # a prompt chunk through the same step
        lib.ds_prompt.restype = ctypes.c_int
        lib.ds_scratch_floats.argtypes = [i64] * 6
        lib.ds_scratch_floats.restype = i64
        lib.kernel_isa.restype = ctypes.c_int
        lib.kernel_name.restype = ctypes.c_char_p
        got = lib.kernel_name().decode()
        if got != v.name:
            raise RuntimeError(f"CPU kernel built for {v.name} reports {got}: the compiler ignored its flags")
        _libs[name] = lib
        return lib


def _choose(isa: str | None) -> list[str]:
    """Variants to try for ``isa`` (a family, a variant name, or None = best), best first."""
    feats = cpu_features()
    if isa is None:
        return [v.name for v in ISA_VARIANTS if _runnable(v, feats)]
    if isa in _BY_NAME and isa not in FAMILIES:
        wanted = [_BY_NAME[isa]]
    elif isa in FAMILIES:
        wanted = [v for v in ISA_VARIANTS if v.family == isa]
    else:
        raise RuntimeError(f"TERNARY_CPU_ISA={isa!r} is not one of {', '.join(FAMILIES)}")
    ok = [v.name for v in wanted if _runnable(v, feats)]
    if not ok:
        missing = sorted({f for v in wanted for f in v.needs if f not in feats})
        raise RuntimeError(f"CPU kernel {isa!r} cannot run on this CPU (it lacks {', '.join(missing) or 'the source'}); "
                           f"this CPU can run: {', '.join(available_isas())}")
    return ok


def kernel_library(isa: str | None = None) -> ctypes.CDLL:
    """The kernel for ``isa`` (family, or None: ``TERNARY_CPU_ISA`` or the best this CPU runs)."""
    errors = []
    for name in _choose(isa or flags.value("TERNARY_CPU_ISA") or None):
        try:
            return load_variant(name)
        except (RuntimeError, OSError) as e:  # e.g. a compiler too old for -mavxvnni: next best
            errors.append(str(e))
    raise RuntimeError("no CPU ternary kernel could be built: " + " | ".join(errors))


def kernel_isa() -> int:
    """Vector width of the kernel in use: 512 (AVX-512), 256 (AVX2), 128 (NEON) or 0 (portable C)."""
    return int(kernel_library().kernel_isa())


def kernel_name() -> str:
    """Name of the kernel in use, e.g. ``avx512-vnni`` (shown in ``engine.info.backend``)."""
    return kernel_library().kernel_name().decode()


_activations_override: str | None = None
_kernel_threads = 0  # 0: torch.get_num_threads()


def set_kernel_threads(n: int) -> None:
    """Threads the C kernels use from now on (0: follow ``torch.get_num_threads()``).

    Why separate from torch's: during CPU decode the engine runs torch's many tiny ops on one
    thread (a second OpenMP thread only spins and, on a busy desktop, stalls every op at its
    barrier) while the matmuls -- nearly all of the work -- keep every core (see
    :meth:`runtime.engine.Engine`'s decode loop)."""
    global _kernel_threads
    if n < 0:
        raise ValueError(f"kernel threads must be >= 0, got {n}")
    _kernel_threads = int(n)


def kernel_threads() -> int:
    return _kernel_threads or torch.get_num_threads()


def kernel_threads_set() -> bool:
    """True while :func:`set_kernel_threads` holds a count of its own (not torch's)."""
    return _kernel_threads != 0


def set_default_activations(mode: str | None) -> None:
    """Process-wide activation mode for layers built from now on (None: back to the environment's).

    The engine's ``decode_activations`` setting reaches the CPU backend through this."""
    global _activations_override
    if mode is not None and mode not in ACTIVATIONS:
        raise ValueError(f"activations must be one of {', '.join(ACTIVATIONS)}, got {mode!r}")
    _activations_override = mode


def default_activations(kernel: str | None = None) -> str:
    """:func:`set_default_activations`'s mode, else ``TERNARY_CPU_ACTIVATIONS``, else the faster mode for
    ``kernel`` (a variant name): ``int8`` for the SIMD kernels, ``exact`` for portable C (its scalar
    int8 loop is slower than its fp32 one)."""
    if _activations_override is not None:
        return _activations_override
    env = (flags.value("TERNARY_CPU_ACTIVATIONS") or "").strip().lower()
    if env and env not in ACTIVATIONS:
        raise ValueError(f"TERNARY_CPU_ACTIVATIONS={env!r} is not one of {', '.join(ACTIVATIONS)}")
    return env or ("exact" if kernel == "c" else DEFAULT_ACTIVATIONS)


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
    """The t2 codes + fp16 scales as stored (2.125 bits/weight at g128, no copy); fp32 or int8 activations.

    ``backend`` reads e.g. ``cpu_ternary[avx512-vnni,int8]`` (kernel variant, activation mode);
    ``backend_family`` is always ``cpu_ternary``. Layers whose width or group size is not a multiple of
    32 use the exact path whatever ``activations`` says (int8 blocks are 32 wide).
    """

    backend = "cpu_ternary"
    backend_family = "cpu_ternary"

    def __init__(self, t: TernaryTensor, device: torch.device | str = "cpu",
                 activations: str | None = None) -> None:
        super().__init__(t)
        if torch.device(device).type != "cpu":
            raise ValueError(f"the cpu_ternary backend runs on the CPU, not on {device}")
        if self.group_size % 16 or self.in_features % 16:
            raise ValueError(f"cpu_ternary needs group size and width divisible by 16, got "
                             f"group {self.group_size}, width {self.in_features}")
        lib = kernel_library()
        act = default_activations(lib.kernel_name().decode()) if activations is None else activations
        if act not in ACTIVATIONS:
            raise ValueError(f"activations must be one of {', '.join(ACTIVATIONS)}, got {act!r}")
        if self.group_size % 32 or self.in_features % 32:
            act = "exact"
        self.activations = act
        self.register_buffer("codes", t2_codes(t), persistent=False)
        self.register_buffer("scales", t.scales.contiguous(), persistent=False)
        self._use_library(lib)

    def _use_library(self, lib: ctypes.CDLL) -> None:
        """Bind the kernel functions (tests swap in other ISA variants through this)."""
        self._lib = lib
        self._mm, self._quant, self._mm_q8 = lib.ternary_mm, lib.quantize_q8, lib.ternary_mm_q8
        self._int8 = self.activations == "int8"
        self.backend = f"cpu_ternary[{lib.kernel_name().decode()},{self.activations}]"
        self._codes_ptr, self._scales_ptr = self.codes.data_ptr(), self.scales.data_ptr()
        self._nb = self.in_features // 32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # fast path for what the engine passes (2-D contiguous fp32): decode calls this ~200 times
        # per token, so Python overhead per call matters (a few us per call)
        if x.dtype == torch.float32 and x.dim() == 2 and x.is_cpu and x.is_contiguous() \
                and x.shape[1] == self.in_features and self.codes.data_ptr() == self._codes_ptr \
                and self.scales.data_ptr() == self._scales_ptr:
            m = x.shape[0]
            y = torch.empty(m, self.out_features, dtype=torch.float32)
            if m:
                self._run(x.data_ptr(), y.data_ptr(), m)
            return y
        return self._forward_general(x)

    def _run(self, xp: int, yp: int, m: int) -> None:
        k, n = self.in_features, self.out_features
        if self._int8:
            # one buffer: d (fp32) and qsum (int32) per 32-block, then the int8 activations
            nb = m * self._nb
            buf = torch.empty(8 * nb + m * k, dtype=torch.uint8)
            bp = buf.data_ptr()
            self._quant(xp, m, k, bp + 8 * nb, bp, bp + 4 * nb)
            self._mm_q8(bp + 8 * nb, bp, bp + 4 * nb, self._codes_ptr, self._scales_ptr, yp, m, n, k,
                        self.group_size, n, kernel_threads())
        else:
            self._mm(xp, self._codes_ptr, self._scales_ptr, yp, m, n, k, self.group_size, n, kernel_threads())

    def _forward_general(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu":
            raise ValueError(f"cpu_ternary got an input on {x.device}")
        if x.shape[-1] != self.in_features:
            raise ValueError(f"input width {x.shape[-1]} != weight width {self.in_features}")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if x2.dtype != torch.float32 or not x2.is_contiguous():
            x2 = x2.to(torch.float32).contiguous()
        self._codes_ptr, self._scales_ptr = self.codes.data_ptr(), self.scales.data_ptr()
        m = x2.shape[0]
        y = torch.empty(m, self.out_features, dtype=torch.float32)
        if m:
            self._run(x2.data_ptr(), y.data_ptr(), m)
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
    """True when some C kernel can be built/loaded here (a C compiler is present).

    ``TERNARY_CPU_ISA`` is not applied here: a CPU that cannot run the forced ISA gets the clear
    error when a layer is built, not a silent fallback to another backend."""
    for name in available_variants():
        try:
            load_variant(name)
            return True
        except (RuntimeError, OSError):
            continue
    return False


if cpu_ternary_available():
    BACKENDS["cpu_ternary"] = CpuTernaryLinear
