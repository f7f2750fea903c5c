#!/usr/bin/env bash
# The whole H200 benchmark in one device call (see docs/benchmarks.md):
#   synthetic Bonsai 1.7B/4B/8B (generated here from the seed, in parallel), GPU engine tests,
#   `ternary bench` for each (ours vs bf16 eager vs roofline), offload under --max-vram 2GiB/1GiB,
#   planner accuracy at 4K/8K/32K context, and llama.cpp's llama-bench (built here for sm_90 from
#   the source carried in .llamacpp/src) on the same weights written as GGUF Q2_0 g64.
# Usage (device machine, repo root): bash scripts/gpu/run_gpu_bench.sh [quick]
# Results: $OUT/*.json, $OUT/*.log, and the summary tables at the end of the output.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_bench_out}
mkdir -p "$OUT"
MODE=${1:-full}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
SYN=/dev/shm/ternary-synthetic
GG=/dev/shm/gguf
mkdir -p "$SYN" "$GG"
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*"; }

nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$OUT/gpu.txt"

# ---- llama.cpp build in the background (CPU only; niced so it disturbs the GPU timings less)
BUILD=.llamacpp_build
if [ -d .llamacpp/src ] && [ "$MODE" = full ]; then
  ( if [ ! -x $BUILD/bin/llama-bench ]; then
      nice -n 19 cmake -S .llamacpp/src -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF > "$OUT/llama_cmake.log" 2>&1 &&
      nice -n 19 cmake --build $BUILD --target llama-bench -j 12 > "$OUT/llama_build.log" 2>&1
    fi; echo "build rc=$?" >> "$OUT/llama_build.log" ) &
  BUILD_PID=$!
fi

MODELS="bonsai-1.7b bonsai-4b bonsai-8b"
[ "$MODE" = quick ] && MODELS="bonsai-1.7b"

# ---- synthetic weights (parallel generation, cached in /dev/shm)
for m in $MODELS; do
  python3 -c "from runtime.bench import synthetic_model_cached as s; s('$m', 0, '$SYN', workers=14)" \
    && stamp "generated $m" || stamp "FAILED generating $m"
done

# ---- GGUF Q2_0 copies for llama-bench, in the background
if [ "$MODE" != "nollama" ] && [ "$MODE" != quick ]; then
  for m in $MODELS; do
    nice -n 10 python3 scripts/gpu/write_gguf_synthetic.py $m $GG/$m.gguf --cache-dir $SYN > "$OUT/gguf_$m.log" 2>&1 &
  done
fi

# ---- GPU engine tests
timeout 240 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_gpu_engine.py 2>&1 | tee "$OUT/test_gpu_engine.log" | tail -15
stamp "gpu engine tests done"

# ---- our benchmark with the bf16 baseline and the roofline
for m in $MODELS; do
  timeout 200 python3 -m runtime.cli.bench --synthetic $m --cache-dir $SYN --ctx 4096 --prompt-tokens 512 --gen 256 \
    --runs 3 --baseline-gen 64 --json "$OUT/bench_$m.json" > "$OUT/bench_$m.log" 2>&1
  stamp "bench $m rc=$?"; tail -8 "$OUT/bench_$m.log"
done
[ "$MODE" = quick ] && exit 0

# ---- offload under a VRAM cap (same weights and prompt: the tokens must be identical)
for cap in 2GiB 1GiB; do
  timeout 150 python3 -m runtime.cli.bench --synthetic bonsai-8b --cache-dir $SYN --ctx 4096 --prompt-tokens 512 \
    --gen 64 --runs 1 --baseline none --max-vram $cap --json "$OUT/offload_8b_$cap.json" > "$OUT/offload_8b_$cap.log" 2>&1
  stamp "offload $cap rc=$?"; tail -6 "$OUT/offload_8b_$cap.log"
done

# ---- planner accuracy: measured peak vs plan at 4K (above), 8K and 32K context
cp "$OUT/bench_bonsai-8b.json" "$OUT/mem_4096.json" 2>/dev/null
for ctx in 8192 32768; do
  timeout 120 python3 -m runtime.cli.bench --synthetic bonsai-8b --cache-dir $SYN --ctx $ctx --prompt-tokens 512 \
    --gen 32 --runs 1 --baseline none --json "$OUT/mem_$ctx.json" > "$OUT/mem_$ctx.log" 2>&1
  stamp "mem $ctx rc=$?"
done

# ---- llama.cpp on the same weights
if [ -n "${BUILD_PID:-}" ]; then
  stamp "waiting for the llama.cpp build"
  wait $BUILD_PID; tail -3 "$OUT/llama_build.log"
  wait  # GGUF writers
  for m in $MODELS; do
    if [ -x $BUILD/bin/llama-bench ] && [ -f $GG/$m.gguf ]; then
      timeout 120 $BUILD/bin/llama-bench -m $GG/$m.gguf -p 512 -n 256 -fa 1 -ngl 99 -r 3 -o json \
        > "$OUT/llama_$m.json" 2> "$OUT/llama_$m.log"
      stamp "llama-bench $m rc=$?"
    fi
  done
fi

python3 scripts/gpu/gpu_bench_summary.py "$OUT" | tee "$OUT/summary.md"
stamp "done"
