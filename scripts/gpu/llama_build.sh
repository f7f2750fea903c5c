#!/usr/bin/env bash
# Build llama.cpp's llama-bench and llama-batched-bench (both under tools/, so LLAMA_BUILD_TOOLS; only
# these two targets and what they link are compiled) for sm_90 from the carried source (.llamacpp/src,
# pruned ahead of time and trimmed here by llama_trim.py, which is idempotent) into BUILD; logs go to OUT,
# whose llama_build.log ends with "build rc=N at Ss".
# Usage (device machine, repo root): bash scripts/gpu/llama_build.sh OUT BUILD [JOBS]
set -uo pipefail
OUT=$1 BUILD=$2 JOBS=${3:-14}
if [ ! -x "$BUILD/bin/llama-bench" ] || [ ! -x "$BUILD/bin/llama-batched-bench" ]; then
  python3 scripts/gpu/llama_trim.py .llamacpp/src > "$OUT/llama_trim.log" 2>&1
  nice -n 19 cmake -S .llamacpp/src -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF \
    > "$OUT/llama_cmake.log" 2>&1 &&
  nice -n 19 cmake --build "$BUILD" --target llama-bench llama-batched-bench -j "$JOBS" > "$OUT/llama_build.log" 2>&1
fi
echo "build rc=$? at ${SECONDS}s" >> "$OUT/llama_build.log"
