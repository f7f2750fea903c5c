"""Trim the carried llama.cpp source so its CUDA build fits one device call (peer benchmark only).

Removes the quantized-matmul (MMQ) template instances of types the benchmark never loads and the
FlashAttention tile instances of head sizes no Bonsai model has; each removed dispatch case
aborts with a message instead of linking a missing symbol. Nothing of llama.cpp's Q2_0/Q1_0/Q4_0/
Q8_0 paths or of the FlashAttention MMA/vector kernels changes. Usage: python3 llama_trim.py SRC

``--prune`` (run once on this machine, not at build time) first deletes what no CUDA build of
llama-bench / llama-batched-bench reads, so the carried tree stays small (176 MiB -> ~25 MiB): docs,
models, media, tests, examples, pocs, benches, gguf-py, app, the server/UI/CLI tools, the non-CUDA
ggml backends. Every folder an unconditional add_subdirectory() names (tools/mtmd, vendor/*) stays.
Recreate: the llama-cpp-python 0.3.36 sdist's vendor/llama.cpp copied to .llamacpp/src, then
``python3 scripts/gpu/llama_trim.py --prune .llamacpp/src``.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

KEEP_MMQ = {"Q1_0", "Q2_0", "Q4_0", "Q8_0"}
KEEP_TILE = {(128, 128), (256, 256)}
PRUNE = [
    ".git", ".github", ".devops", ".gemini", ".pi", "docs", "models", "media", "tests", "examples", "pocs",
    "benches", "gguf-py", "conversion", "app", "ci", "skills", "requirements", "scripts", "grammars",
    "tools/ui", "tools/server", "tools/tuning", "tools/cli", "flake.nix", "build-xcframework.sh",
] + [f"ggml/src/ggml-{b}" for b in ("blas", "cann", "et", "hexagon", "hip", "metal", "musa", "opencl", "openvino",
                                    "rpc", "sycl", "virtgpu", "vulkan", "webgpu", "zdnn", "zendnn")]


def prune(src: Path) -> None:
    """Delete the parts of the source tree no CUDA build of the two benchmark tools reads."""
    paths = [src / p for p in PRUNE] + sorted(src.glob("convert_*.py"))
    for p in paths:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()


def main() -> int:
    args = sys.argv[1:]
    if args and args[0] == "--prune":
        args = args[1:]
        prune(Path(args[0]))
    cuda = Path(args[0]) / "ggml/src/ggml-cuda"
    inst = cuda / "template-instances"
    removed = 0
    mmq = cuda / "mmq.cu"
    text = mmq.read_text()

    def sub_mmq(m: re.Match) -> str:
        return m.group(0) if m.group(2) in KEEP_MMQ else f'{m.group(1)}GGML_ABORT("MMQ {m.group(2)} not built");'

    text = re.sub(r"^(\s*)mul_mat_q_case<GGML_TYPE_([A-Z0-9_]+)[^>]*>\(ctx, args, stream\);", sub_mmq, text, flags=re.M)
    mmq.write_text(text)
    for f in inst.glob("mmq-instance-*.cu"):
        if f.stem.removeprefix("mmq-instance-").upper() not in KEEP_MMQ:
            f.unlink()
            removed += 1
    tile = cuda / "fattn-tile.cu"
    text = tile.read_text()

    def sub_tile(m: re.Match) -> str:
        dims = (int(m.group(2)), int(m.group(3)))
        return m.group(0) if dims in KEEP_TILE else f'{m.group(1)}GGML_ABORT("FA tile {dims} not built");'

    text = re.sub(r"^(\s*)ggml_cuda_flash_attn_ext_tile_case<\s*(\d+),\s*(\d+)>\(ctx, dst\);", sub_tile, text, flags=re.M)
    tile.write_text(text)
    for f in inst.glob("fattn-tile-instance-dkq*-dv*.cu"):
        m = re.match(r"fattn-tile-instance-dkq(\d+)-dv(\d+)", f.stem)
        if m and (int(m.group(1)), int(m.group(2))) not in KEEP_TILE:
            f.unlink()
            removed += 1
    print(f"llama_trim: removed {removed} template instances")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
