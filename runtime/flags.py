"""Every ``TERNARY_*`` environment variable the project reads: name, default, meaning and reader, in one table.

Why: the variables steer kernels, tuning and decode paths from many modules; listed here (and in
docs/kernels.md, which a test keeps in step) a reader finds them all in one place, and every read goes
through :func:`value` / :func:`integer`, so an unknown name is an error instead of a silently ignored setting.
Reads happen when the caller asks (some modules read once at import; the table says which).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    """One environment variable: ``default`` is what an unset variable reads as (``None``: no value)."""

    name: str
    default: str | None
    values: str
    meaning: str
    read_by: str


FLAGS: tuple[Flag, ...] = (
    Flag("TERNARY_DECODE_ACTIVATIONS", "int8", "int8, exact",
         "GPU decode mat-vecs quantise x to int8 (dp4a/dp2a) or keep it fp32 (anything else reads as int8)",
         "runtime.kernels.triton.matvec (at import)"),
    Flag("TERNARY_KERNELS_TUNE", None, "full",
         "full: time every mat-vec candidate on a shape's first use, not only the quick set",
         "runtime.kernels.triton.matvec"),
    Flag("TERNARY_KERNELS_RETUNE", "0", "0, 1",
         "1: ignore the shipped tuning table for this GPU model and measure",
         "runtime.kernels.triton.tuning"),
    Flag("TERNARY_KERNELS_CACHE", None, "folder, off",
         "folder for this machine's measured Triton launch configs; off: none is read or written",
         "runtime.kernels.triton.tuning"),
    Flag("TERNARY_PDL", "1", "0, 1",
         "0: no programmatic dependent launch (Hopper and newer) for the Triton kernels",
         "runtime.kernels.triton.pdl (each launch)"),
    Flag("TERNARY_ATTN_MIN_SPLIT", "0", "integer",
         "minimum keys per split of split-KV decode attention, every head size",
         "runtime.kernels.triton.attention (at import)"),
    Flag("TERNARY_ATTN_PREFETCH", "4", "integer",
         "K/V tiles per split program pulled into L2 before the PDL wait (0: none)",
         "runtime.kernels.triton.attention (at import)"),
    Flag("TERNARY_ATTN_MERGE_WARPS", "1", "integer",
         "warps per program of the split-KV merge",
         "runtime.kernels.triton.attention (each launch)"),
    Flag("TERNARY_ATTN_CONFIG", None, "block_s:warps:splits[:min_keys]",
         "decode attention launch config for head sizes above 128 (splits 0: the default count)",
         "runtime.kernels.triton.attention (each launch)"),
    Flag("TERNARY_ATTN_CONFIG_NARROW", None, "block_s:warps:splits[:min_keys]",
         "the same for head sizes up to 128",
         "runtime.kernels.triton.attention (each launch)"),
    Flag("TERNARY_ATTN_MERGE_Q8", "1", "0, 1",
         "0: the Qwen3 fused step merges attention splits in-launch instead of writing o_proj's int8 input",
         "runtime.model.qwen3_step (step build)"),
    Flag("TERNARY_GDN_BLOCK_DV", "32", "power of two",
         "value columns per program of the fused DeltaNet decode kernel (>= DV: one program per head)",
         "runtime.kernels.triton.deltanet (at import)"),
    Flag("TERNARY_FUSED_HYBRID", "1", "0, 1",
         "anything but 1: decode the Qwen3.5 hybrid through the graph-captured forward, not the fused step",
         "runtime.model.qwen35.model (decode_step)"),
    Flag("TERNARY_FUSED_SAMPLING", "1", "0, 1",
         "0: the graph decoder samples with torch ops instead of the one-launch Triton sampler",
         "runtime.sampling (TokenSampler build)"),
    Flag("TERNARY_GRAPH_PREFILL", "1", "0, 1",
         "0: prefill runs eagerly instead of as captured CUDA graphs",
         "runtime.prefill"),
    Flag("TERNARY_CPU_ISA", None, "avx512, avx2, neon, c",
         "force one family of the C CPU kernel (an error if this CPU lacks it)",
         "runtime.kernels.cpu.ternary"),
    Flag("TERNARY_CPU_ACTIVATIONS", None, "int8, exact",
         "activation mode of the C CPU kernels (unset: int8 on SIMD kernels, exact on portable C)",
         "runtime.kernels.cpu.ternary"),
    Flag("TERNARY_CPU_KERNEL", "1", "0, 1",
         "0: do not build or use the C CPU kernel",
         "runtime.kernels.cpu.ternary"),
    Flag("TERNARY_KERNEL_CACHE", None, "folder",
         "where the compiled C CPU kernel is kept (default: the OS cache folder)",
         "runtime.kernels.cpu.ternary"),
    Flag("TERNARY_CHAT_HOME", None, "folder",
         "one folder for models, settings, logs and caches instead of the platform folders",
         "runtime.hub.paths, app, runtime.kernels.triton.tuning"),
    Flag("TERNARY_CHAT_RESOURCES", None, "folder",
         "where catalog.json and the app's resources are read from",
         "runtime.hub.catalog, app"),
    Flag("TERNARY_ARM_TOOLCHAIN", None, "folder",
         "the aarch64 cross toolchain of the NEON tests (default .venv/arm-toolchain)",
         "tests/cpu/test_cpu_neon_qemu.py, scripts/install_arm_toolchain.sh"),
)

_BY_NAME: dict[str, Flag] = {f.name: f for f in FLAGS}


def flag(name: str) -> Flag:
    """The table entry of ``name``; a name not in the table is a programming error."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not a known TERNARY_* flag (add it to runtime/flags.py)") from None


def value(name: str) -> str | None:
    """The variable's text now, or its table default when unset."""
    f = flag(name)
    return os.environ.get(name, f.default)


def integer(name: str) -> int:
    """The variable as an integer, with a message naming it when it is not one."""
    text = value(name)
    try:
        return int(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name}={text!r} is not an integer") from None


def markdown_table() -> str:
    """The table as docs/kernels.md prints it (a test checks the two agree)."""
    rows = ["| Variable | Values | Default | Meaning | Read by |", "|---|---|---|---|---|"]
    for f in FLAGS:
        default = f"`{f.default}`" if f.default is not None else "unset"
        rows.append(f"| `{f.name}` | {f.values} | {default} | {f.meaning} | {f.read_by} |")
    return "\n".join(rows)


__all__ = ["FLAGS", "Flag", "flag", "integer", "markdown_table", "value"]
