#!/usr/bin/env bash
# Build llama-cpp-python for AVX2 only (no AVX-512) into a directory of its own, so that
# scripts/bench_cpu.py can time our AVX2 path (TERNARY_CPU_ISA=avx2) against a llama.cpp that
# cannot use AVX-512 either (issue 28: ">= 1.25x with the AVX2 path forced against a llama.cpp built
# for AVX2 only"). The .venv's own llama-cpp-python is left as it is.
#
#   bash scripts/build_llama_avx2.sh [TARGET_DIR]     # default: build/llama-cpp-avx2
#   .venv/bin/python scripts/bench_cpu.py --only ours,llama-avx2:TQ2_0 --isa avx2
#
# Same version as the .venv's llama-cpp-python; built from the source distribution (pip's wheel
# cache is bypassed: a cached wheel was built for this machine's native flags). GGML_NATIVE=OFF
# stops -march=native, which would turn AVX-512 back on on an AVX-512 machine; AVX2 + FMA + F16C
# is what every x86-64-v3 CPU (Haswell and later, Zen 1 and later) has. Takes several minutes on
# 2 cores; runs at the lowest CPU priority. Output: TARGET_DIR/llama_cpp (the bench checks that
# libggml-cpu there has no AVX-512 instruction).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$REPO/.venv/bin/python"
TARGET="${1:-$REPO/build/llama-cpp-avx2}"
VERSION="$("$PY" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')"
echo "building llama-cpp-python $VERSION (AVX2 only) into $TARGET"
mkdir -p "$TARGET"
export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF \
-DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX_VNNI=OFF \
-DGGML_BACKEND_DL=OFF -DGGML_CPU_ALL_VARIANTS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
nice -n 19 "$PY" -m pip install --no-deps --no-cache-dir --no-binary llama-cpp-python --upgrade \
    --target "$TARGET" "llama-cpp-python==$VERSION"
lib="$(ls "$TARGET"/llama_cpp/lib/libggml-cpu.so* 2>/dev/null | head -n 1 || true)"
if [ -z "$lib" ]; then
    echo "error: $TARGET/llama_cpp/lib/libggml-cpu.so not found after the build" >&2
    exit 1
fi
if objdump -d "$lib" | grep -qE '%zmm[0-9]'; then
    echo "error: $lib uses AVX-512 (zmm) registers; the AVX2-only build did not take" >&2
    exit 1
fi
echo "ok: $lib has no AVX-512 instruction"
