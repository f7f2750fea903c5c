"""Launch configurations of the ternary mat-vec and GEMM: the candidate tables, timing, and the cache.

Why: the fastest tile shape depends on the GPU model and the matrix shape and is found only by timing, so a
shape is measured once (:func:`_bench`: CUDA-graph replays with a cold L2) and remembered. Shipped tables
(``tuned/<gpu-model>.json``) are loaded first, then this machine's own cache (:func:`tuned_cache_file`).
Where the numbers in the tables were measured: docs/kernels.md.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import torch
import triton

from runtime import flags
from runtime.kernels.triton.launch import INTERPRET, is_mapped

TUNED_DIR = Path(__file__).with_name("tuned")  # shipped tables, one per GPU model (<gpu-name>.json)

# Mat-vec candidates per variant (docs/kernels.md explains each variant and where the tables were measured).
# exact fp32 kernel: (BLOCK_N, BLOCK_K, SPLIT_K, num_warps)
_GEMV_CANDIDATES = [(8, 1024, 1, 4), (8, 1024, 4, 4)]
# prepared-x variant (one tiny permute/normalise launch first): ("xp", BLOCK_N, BLOCK_K, SPLIT_K, warps)
_XP_CANDIDATES = [("xp", 8, 1024, 1, 4), ("xp", 16, 1024, 1, 8), ("xp", 16, 512, 1, 4)]
# the same with 4^-j pre-scaled x (3 instructions per weight); a long BLOCK_K makes a 4096-wide row one
# iteration, so no program waits on its own next load
_X3_CANDIDATES = [("x3", 8, 1024, 1, 4), ("x3", 16, 1024, 1, 8), ("x3", 16, 512, 1, 4), ("x3", 32, 512, 1, 8),
                  ("x3", 8, 1024, 4, 4), ("x3", 16, 1024, 4, 8), ("x3", 4, 4096, 1, 4), ("x3", 8, 4096, 1, 8),
                  ("x3", 8, 2048, 1, 4)]
# tensor-core mat-vec: ("dot" | "dotp", BLOCK_N, 0, SPLIT_K, num_warps); t2 only, any M <= 16 (the batched decode
# step: weights decoded once for all rows; split-K gives a 4096-row matrix enough programs for every SM); "dotp"
# decodes weight pairs into packed 16-bit floats (16-bit x only; fp32 x takes the "dot" decode)
_DOT_CANDIDATES = [("dot", 64, 0, 1, 4), ("dot", 128, 0, 1, 4), ("dot", 32, 0, 4, 4), ("dot", 64, 0, 4, 4),
                   ("dotp", 64, 0, 1, 4), ("dotp", 128, 0, 1, 4), ("dotp", 32, 0, 2, 4), ("dotp", 32, 0, 4, 4),
                   ("dotp", 64, 0, 2, 4), ("dotp", 64, 0, 4, 4), ("dotp", 64, 0, 8, 4), ("dotp", 128, 0, 2, 8),
                   ("dotp", 128, 0, 4, 8), ("dotp", 16, 0, 4, 4), ("dotp", 64, 0, 4, 8)]
# what a shape of 2+ rows times on first use besides the int8 variants (the full set under TERNARY_KERNELS_TUNE=full)
_QUICK_DOT = [("dotp", 64, 0, 1, 4), ("dotp", 32, 0, 4, 4), ("dotp", 64, 0, 2, 4), ("dotp", 64, 0, 4, 4),
              ("dotp", 128, 0, 2, 8)]
# the quick sets below are what a shape's first use times (each candidate costs a compile on a machine's first
# run); TERNARY_KERNELS_TUNE=full times every candidate
_QUICK_GEMV = [(8, 1024, 1, 4), ("xp", 8, 1024, 1, 4), ("xp", 16, 512, 1, 4), ("x3", 8, 1024, 1, 4),
               ("x3", 4, 4096, 1, 4), ("dot", 128, 0, 1, 4)]
# int8 activations + dp4a (W2A8): ("q8", BLOCK_N, BLOCK_K, SPLIT_K, warps); used only when decode
# activations are "int8" (see set_decode_activations)
_Q8_CANDIDATES = [("q8", 2, 4096, 1, 2), ("q8", 4, 4096, 1, 2), ("q8", 4, 4096, 1, 4), ("q8", 8, 2048, 1, 4),
                  ("q8", 8, 1024, 1, 4), ("q8", 16, 1024, 1, 8), ("q8", 16, 512, 1, 4), ("q8", 4, 2048, 1, 2),
                  ("q8", 8, 4096, 1, 8), ("q8", 32, 512, 1, 8), ("q8", 8, 1024, 4, 4), ("q8", 4, 1024, 3, 4),
                  ("q8", 16, 256, 1, 4)]
# the same with 4-word chunks (scale per chunk, convert-free offset; G >= 64): ("q8c", BLOCK_N, BLOCK_K, ...)
_Q8C_CANDIDATES = [("q8c", 4, 4096, 1, 2), ("q8c", 2, 4096, 1, 2), ("q8c", 8, 1024, 1, 4), ("q8c", 4, 2048, 1, 2),
                   ("q8c", 8, 2048, 1, 4), ("q8c", 4, 4096, 1, 4), ("q8c", 8, 4096, 1, 4), ("q8c", 16, 512, 1, 4),
                   ("q8c", 16, 1024, 1, 8), ("q8c", 2, 8192, 1, 2), ("q8c", 4, 8192, 1, 4), ("q8c", 8, 1024, 4, 4),
                   ("q8c", 4, 1024, 3, 4)]
# persistent (a few programs per SM walk the row tiles, next tile loaded while computing this one):
# ("q8p", BLOCK_N, BLOCK_K, programs per SM, warps); BLOCK_K 0 = a whole row per step, as a power-of-two block
# of words plus a power-of-two tail (K = 5120: 256 + 64 words). One-warp programs (the last two) reduce each row
# inside a warp (no shared-memory step) and spend fewer instructions per weight word
_Q8P_CANDIDATES = [("q8p", 2, 4096, 8, 2), ("q8p", 4, 4096, 4, 2), ("q8p", 4, 4096, 8, 2), ("q8p", 2, 4096, 16, 2),
                   ("q8p", 8, 2048, 4, 4), ("q8p", 4, 2048, 8, 2), ("q8p", 8, 1024, 4, 4), ("q8p", 4, 4096, 4, 4),
                   ("q8p", 8, 4096, 2, 4), ("q8p", 8, 4096, 4, 8), ("q8p", 2, 8192, 8, 4), ("q8p", 4, 8192, 4, 4),
                   ("q8p", 16, 1024, 4, 8), ("q8p", 2, 2048, 16, 2), ("q8p", 8, 1024, 4, 2),
                   ("q8p", 2, 0, 8, 2), ("q8p", 4, 0, 8, 2), ("q8p", 4, 0, 4, 2), ("q8p", 2, 0, 8, 4),
                   ("q8p", 4, 0, 4, 4), ("q8p", 8, 0, 4, 4), ("q8p", 2, 0, 16, 1), ("q8p", 2, 0, 8, 1)]
# batched decode (2-64 rows; measured up to 16): q8p's whole-row walk with every row of x per program, so each weight tile is read and
# its code planes masked once per batch: ("q8m", BLOCK_N, 0, programs per SM, warps). Larger row tiles share each
# x load among more weight rows (x is re-read from L1 per tile and row)
_Q8M_CANDIDATES = [("q8m", 4, 0, 8, 1), ("q8m", 2, 0, 16, 1), ("q8m", 8, 0, 4, 1), ("q8m", 4, 0, 4, 2),
                   ("q8m", 2, 0, 8, 2), ("q8m", 8, 0, 4, 2), ("q8m", 4, 0, 4, 4), ("q8m", 2, 0, 8, 4),
                   ("q8m", 8, 0, 4, 4), ("q8m", 8, 0, 2, 4), ("q8m", 16, 0, 2, 4), ("q8m", 16, 0, 2, 8),
                   ("q8m", 8, 0, 4, 8), ("q8m", 4, 0, 8, 2)]
# H100, 2026-12-07 (scripts/gpu/bench_batched_matvec.py): one-warp 4-row tiles won qkv, o and the LM head at 4-16
# rows, 2-row ones gate_up; the 12288-wide down projection wanted more warps (it spilled at 2)
_QUICK_Q8M = [("q8m", 4, 0, 8, 1), ("q8m", 2, 0, 16, 1), ("q8m", 8, 0, 4, 1), ("q8m", 4, 0, 4, 2),
              ("q8m", 2, 0, 8, 4), ("q8m", 4, 0, 4, 4)]
# batched decode on int8 tensor cores (2-64 rows, M padded to 16): ("q8t", BLOCK_N, X_ON_M, SPLIT_K, warps); the
# third field 1 puts x on the MMA's M side (mma.sync tiles), 0 the weights (warp-group MMAs from 64 weight rows).
# Timed on the H100 (docs/kernels.md): 1.6-4.2x slower than the best q8m or dotp config at every 8B shape at 8 and 16 rows,
# so timed only under TERNARY_KERNELS_TUNE=full
_Q8T_CANDIDATES = [("q8t", 64, 0, 1, 4), ("q8t", 64, 0, 2, 4), ("q8t", 128, 0, 1, 4), ("q8t", 128, 0, 2, 8),
                   ("q8t", 64, 1, 1, 4), ("q8t", 64, 1, 2, 4), ("q8t", 128, 1, 1, 4), ("q8t", 32, 1, 2, 2)]
# batched decode on int8 tensor cores fed from registers (2-16 rows): ("q8w", 16 weight rows, -, -, warps), the
# warps of a program taking the scale groups in turn (_gemv_q8w_kernel)
_Q8W_CANDIDATES = [("q8w", 16, 0, 1, 4), ("q8w", 16, 0, 1, 8), ("q8w", 16, 0, 1, 2), ("q8w", 16, 0, 1, 16)]
# the full-tune winners for Bonsai-8B shapes first: small programs, many loads in flight
_QUICK_Q8 = [("q8", 2, 4096, 1, 2), ("q8", 4, 4096, 1, 2), ("q8", 4, 2048, 1, 2), ("q8", 8, 1024, 1, 4),
             ("q8", 4, 4096, 1, 4), ("q8", 16, 512, 1, 4), ("q8c", 4, 4096, 1, 2), ("q8c", 2, 4096, 1, 2),
             ("q8c", 8, 1024, 1, 4), ("q8c", 4, 2048, 1, 2), ("q8p", 2, 4096, 8, 2), ("q8p", 4, 4096, 4, 2),
             ("q8p", 4, 4096, 8, 2), ("q8p", 8, 2048, 4, 4), ("q8p", 8, 1024, 4, 2), ("q8p", 2, 0, 8, 2),
             ("q8p", 4, 0, 8, 2), ("q8p", 2, 0, 8, 4), ("q8p", 4, 0, 4, 4), ("q8p", 2, 0, 16, 1), ("q8p", 2, 0, 8, 1)]
# int8 activations for t3 weights (dp2a on in-register base-3 digits): ("q3", BLOCK_N, BLOCK_W, SPLIT_K,
# warps) with BLOCK_W in int32 words of codes (20 weights each); int8 mode, t3 layouts that _q3_ok accepts
_Q3_CANDIDATES = [("q3", 2, 256, 1, 2), ("q3", 4, 128, 1, 2), ("q3", 4, 256, 1, 4), ("q3", 8, 64, 1, 4),
                  ("q3", 8, 128, 1, 4), ("q3", 16, 64, 1, 4), ("q3", 2, 512, 1, 4), ("q3", 2, 128, 2, 2),
                  ("q3", 4, 128, 2, 4), ("q3", 8, 128, 4, 4), ("q3", 16, 128, 1, 8), ("q3", 4, 64, 3, 2),
                  ("q3", 16, 64, 2, 4), ("q3", 32, 32, 1, 4), ("q3", 32, 32, 2, 4)]
_QUICK_Q3 = [("q3", 2, 256, 1, 2), ("q3", 4, 128, 1, 2), ("q3", 8, 64, 1, 4), ("q3", 2, 128, 2, 2),
             ("q3", 16, 64, 1, 4)]
_INTERPRET_GEMV = (16, 64, 1, 4)
_INTERPRET_Q3 = ("q3", 16, 16, 2, 4)  # small tiles for the interpreter tests (split-K exercised)
# prefill GEMM (the "mm" path): (BLOCK_M, BLOCK_N, warps)
_MM_CANDIDATES = [(64, 64, 4), (128, 64, 8), (64, 128, 8), (128, 128, 8)]

# measured or loaded configs by _key(...): shared by matvec and gemm, which reach it as tuning._tuned
_tuned: dict[str, tuple] = {}
_lock = threading.Lock()


def _key(*parts: object) -> str:
    return "|".join(str(p) for p in parts)


def load_tuned(path: str | os.PathLike) -> int:
    """Merge launch configs measured earlier (``dump_tuned``) so the first call needs no tuning."""
    data = json.loads(Path(path).read_text())
    with _lock:
        for k, v in data.items():
            _tuned.setdefault(k, tuple(v) if isinstance(v, list) else v)
    return len(data)


def dump_tuned() -> dict[str, object]:
    with _lock:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in _tuned.items()}


TUNE_CACHE_ENV = "TERNARY_KERNELS_CACHE"  # folder for this machine's measured configs; "off" disables


def tuned_cache_file(gpu_name: str, root: str | os.PathLike | None = None) -> Path:
    """This machine's measured launch configs for one GPU model and Triton version.

    Why: timing every new shape costs about a minute on a 27B's first answer; remembering the
    winners makes every later start as fast as a GPU with a shipped file. The folder is
    ``$TERNARY_KERNELS_CACHE``, else ``$TERNARY_CHAT_HOME/cache/kernels``, else the OS cache folder.
    """
    if root is None:
        root = flags.value(TUNE_CACHE_ENV)
    if root is None:
        home = flags.value("TERNARY_CHAT_HOME")
        if home:
            root = Path(home).expanduser() / "cache" / "kernels"
        else:
            try:
                import platformdirs

                root = Path(platformdirs.user_cache_dir("ternary-chat", appauthor=False)) / "kernels"
            except ImportError:  # the runtime alone (no app dependencies installed)
                root = Path.home() / ".cache" / "ternary-chat" / "kernels"
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in gpu_name.lower().replace(" ", "-"))
    return Path(root) / f"{slug}-triton{triton.__version__}.json"


def _user_tuned_file() -> Path | None:
    if INTERPRET or not torch.cuda.is_available() or flags.value(TUNE_CACHE_ENV) == "off":
        return None
    return tuned_cache_file(torch.cuda.get_device_name())


def save_tuned(path: str | os.PathLike) -> None:
    """Write every known config to ``path`` atomically (a crash never leaves half a file)."""
    from runtime.atomic import write_json_atomic

    write_json_atomic(path, dump_tuned())


def _remember(key: str, value: tuple) -> None:
    """Keep a freshly measured config and add it to this machine's cache file (best effort)."""
    with _lock:
        _tuned[key] = value
    try:
        f = _user_tuned_file()
        if f is not None:
            save_tuned(f)
    except OSError:  # a read-only or full cache folder only costs re-tuning next time
        pass


def _device_tuned_file() -> Path | None:
    """Shipped launch configs for this GPU model, unless ``TERNARY_KERNELS_RETUNE=1`` asks to measure."""
    if INTERPRET or not torch.cuda.is_available() or flags.value("TERNARY_KERNELS_RETUNE") == "1":
        return None
    name = torch.cuda.get_device_name().lower().replace(" ", "-")
    p = TUNED_DIR / f"{name}.json"
    return p if p.exists() else None


def _flush_bytes(dev: torch.device) -> int:
    """Twice the L2 (16..96 MiB): enough writes to evict whatever the timed kernel left there."""
    l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 48 << 20) or (48 << 20)
    return max(16 << 20, min(96 << 20, 2 * l2))


def _bench(fn) -> float:
    """ms per call of ``fn`` with a cold L2, without Python launch cost: CUDA graphs of
    (flush, fn) x R minus flush x R. Plain do_bench would time the ~10 us Triton launch.
    The flush buffer lives only for the measurement, so tuning leaves no VRAM behind."""
    dev = torch.device("cuda", torch.cuda.current_device())
    with torch.inference_mode(False):  # tuned inside inference_mode, zeroed inside the graphs
        buf = torch.empty(_flush_bytes(dev), dtype=torch.uint8, device=dev)
    fn()
    torch.cuda.synchronize()
    reps = 8
    graphs = []
    for with_fn in (True, False):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                buf.zero_()
                if with_fn:
                    fn()
        graphs.append(g)
    times = []
    for g in graphs:
        g.replay()
        ts = []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        times.append(sorted(ts)[2])
    return max(times[0] - times[1], 1e-6) / reps


def _device_copies(device: torch.device, *tensors: torch.Tensor | None) -> list[torch.Tensor | None] | None:
    """Device copies of the mapped ones among ``tensors`` (others as given), for tuning only: a
    launch config is timed once per shape, so the copy lives for a few milliseconds. ``None`` when
    the device has no room for it (e.g. a mapped LM head larger than what the plan keeps free)."""
    try:
        return [t.to(device) if t is not None and is_mapped(t) else t for t in tensors]
    except torch.cuda.OutOfMemoryError:
        return None


def _tensors_to_time(device: torch.device, *tensors: torch.Tensor | None) -> list[torch.Tensor | None] | None:
    """What a launch config is timed on, or ``None`` when it cannot be timed: inside a graph capture
    (the graph's eager warm-up has tuned it), or a mapped matrix without room for a device copy. A
    mapped weight is timed on a copy: timed in place it would time PCIe, and a config picked for the
    bus could round differently from the one the same shape gets when resident, so the output would
    depend on the VRAM cap."""
    if torch.cuda.is_current_stream_capturing():
        return None
    return _device_copies(device, *tensors)


def _load_saved() -> None:
    """Load the shipped table for this GPU model, then this machine's cache (shipped configs win over this
    machine's quick ones): at import, so the first call of a known shape needs no tuning."""
    try:
        files = [_device_tuned_file(), _user_tuned_file()]
    except Exception:  # noqa: BLE001 - no cache location: kernels still work, they only re-tune
        files = [_device_tuned_file()]
    for f in files:
        if f is not None and f.exists():
            try:
                load_tuned(f)
            except (OSError, ValueError):  # a damaged cache file is ignored and rewritten by the next tuning
                pass


_load_saved()
