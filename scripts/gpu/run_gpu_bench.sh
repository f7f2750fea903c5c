#!/usr/bin/env bash
# The whole H200 benchmark in one device call (see docs/benchmarks.md):
#   synthetic Bonsai 1.7B/4B/8B (generated here from the seed, in parallel), GPU engine tests,
#   `ternary bench` for each (ours vs bf16 eager vs roofline), planner accuracy at 4K/8K/32K
#   context, offload under --max-vram 2GiB/1GiB, and llama.cpp's llama-bench (built here for sm_90
#   from the source carried in .llamacpp/src) on the same weights written as GGUF Q2_0 g64.
# Stages run in priority order and are skipped once DEADLINE seconds have passed, so a short
# device lease still returns the most important numbers.
# Usage (device machine, repo root, carry .llamacpp): DEADLINE=540 bash scripts/gpu/run_gpu_bench.sh
#   LLAMA_ONLY=1 LLAMA_JOBS=16 DEADLINE=560 ...: only build llama.cpp (~285 objects; 138 took ~250 s
#   at -j12 next to our benchmark) and run llama-bench on the same synthetic weights.
#   NO_LLAMA=1: skip llama.cpp entirely. QUICK=1: only the three benchmarks and llama.cpp (no activation
#   accuracy, offload or planner-accuracy stages). WITH_TESTS=1 runs $TESTS (default tests/gpu/test_gpu_engine.py;
#   pytest arguments) first, while llama.cpp builds.
# The device tool returns at most 8 files: everything is written under $OUT/r and packed into
# $OUT/results.tgz at the end; the summary tables are printed last.
set -uo pipefail
FINAL=${OUT:-/tmp/gpu_bench_out}
OUT=$FINAL/r
mkdir -p "$OUT"
DEADLINE=${DEADLINE:-540}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
SYN=/dev/shm/ternary-synthetic
GG=/dev/shm/gguf
BUILD=.llamacpp_build
mkdir -p "$SYN" "$GG"
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
stamp() { echo "[$(el)s] $*"; }
left() { echo $(( DEADLINE - $(el) )); }
have() { [ "$(left)" -gt "$1" ]; }  # at least $1 seconds left?

# ---- llama.cpp build in the background (CPU only, niced, 12 of 16 cores)
if [ -d .llamacpp/src ] && [ -z "${NO_LLAMA:-}" ]; then
  ( trap - INT TERM; bash scripts/gpu/llama_build.sh "$OUT" $BUILD ${LLAMA_JOBS:-14} ) > /dev/null 2>&1 < /dev/null &
  BUILD_PID=$!  # its output goes to files only, so it never holds the caller's pipe open
fi

nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$OUT/gpu.txt"

# ---- synthetic weights (parallel generation, cached in /dev/shm), then GGUF copies in the background
for m in bonsai-8b bonsai-1.7b bonsai-4b; do
  python3 -c "from runtime.bench import synthetic_model_cached as s; s('$m', 0, '$SYN', workers=12)" \
    && stamp "generated $m" || stamp "FAILED generating $m"
  if [ -n "${BUILD_PID:-}" ]; then
    nice -n 10 python3 scripts/gpu/write_gguf_synthetic.py $m $GG/$m.gguf --cache-dir $SYN > "$OUT/gguf_$m.log" 2>&1 &
  fi
done

# LLAMA_ONLY=1: skip our stages (build llama.cpp with all cores, write the GGUFs, run llama-bench)
if [ -n "${LLAMA_ONLY:-}" ]; then stamp "LLAMA_ONLY: waiting for the build"; wait "$BUILD_PID"; fi

# ---- correctness on the GPU (optional here; the whole GPU suite runs in its own call)
if [ -n "${WITH_TESTS:-}" ] && [ -z "${LLAMA_ONLY:-}" ]; then
  timeout ${TEST_TIMEOUT:-200} python3 -m pytest -q -p no:cacheprovider -rf ${TESTS:-tests/gpu/test_gpu_engine.py} \
    > "$OUT/test_gpu_engine.log" 2>&1
  stamp "gpu tests rc=$?"; grep -E "passed|failed|FAILED" "$OUT/test_gpu_engine.log" | tail -12
fi

bench() {  # name, json, timeout, extra args...
  local m=$1 js=$2 to=$3; shift 3
  [ -n "${LLAMA_ONLY:-}" ] && return
  if ! have "$to"; then stamp "skip $js (time)"; return; fi
  timeout "$to" python3 -m runtime.cli.bench --synthetic "$m" --cache-dir $SYN --ctx 4096 --prompt-tokens 512 \
    --json "$OUT/$js.json" "$@" > "$OUT/$js.log" 2>&1
  stamp "$js rc=$?"; tail -7 "$OUT/$js.log"
}

# ---- ours vs bf16 eager vs roofline, 4K context, 512-token prompt, 256 generated tokens
bench bonsai-8b bench_bonsai-8b 120 --gen 256 --runs 3 --baseline-gen 64
bench bonsai-1.7b bench_bonsai-1.7b 80 --gen 256 --runs 3 --baseline-gen 64
bench bonsai-4b bench_bonsai-4b 90 --gen 256 --runs 3 --baseline-gen 64
cp "$OUT/bench_bonsai-8b.json" "$OUT/mem_4096.json" 2>/dev/null

# ---- int8 decode activations: accuracy cost against the exact kernels
if [ -z "${QUICK:-}" ] && have 70; then timeout 70 python3 scripts/gpu/activation_accuracy.py --model bonsai-8b --steps 64 > "$OUT/activation_accuracy.log" 2>&1; stamp "activation accuracy rc=$?"; tail -1 "$OUT/activation_accuracy.log"; fi

# ---- planner accuracy at 8K / 32K, then offload under a VRAM cap
[ -z "${QUICK:-}" ] && bench bonsai-8b offload_8b_2GiB 70 --gen 64 --runs 1 --baseline none --max-vram 2GiB
# ---- llama.cpp on the same weights (if the build finished in time)
if [ -n "${BUILD_PID:-}" ]; then
  while kill -0 "$BUILD_PID" 2>/dev/null && have 120; do sleep 5; done
  stamp "llama.cpp build: $(tail -1 "$OUT/llama_build.log" 2>/dev/null)"
  tail -2 "$OUT/llama_build.log" 2>/dev/null
  for m in bonsai-8b bonsai-1.7b bonsai-4b; do
    if [ -x $BUILD/bin/llama-bench ] && [ -f $GG/$m.gguf ] && have 25; then
      timeout 40 $BUILD/bin/llama-bench -m $GG/$m.gguf -p 512 -n 256 -fa 1 -ngl 99 -r 3 -o json \
        > "$OUT/llama_$m.json" 2> "$OUT/llama_$m.log"
      stamp "llama-bench $m rc=$?"
    else
      stamp "llama-bench $m skipped (binary: $([ -x $BUILD/bin/llama-bench ] && echo yes || echo no), gguf: $([ -f $GG/$m.gguf ] && echo yes || echo no))"
    fi
  done
fi


if [ -z "${QUICK:-}" ]; then
  bench bonsai-8b offload_8b_1GiB 70 --gen 64 --runs 1 --baseline none --max-vram 1GiB
  bench bonsai-8b mem_8192 60 --ctx 8192 --gen 32 --runs 1 --baseline none
  bench bonsai-8b mem_32768 60 --ctx 32768 --gen 32 --runs 1 --baseline none
fi

if [ -n "${BUILD_PID:-}" ] && kill -0 "$BUILD_PID" 2>/dev/null; then
  stamp "llama.cpp build unfinished ($(tail -1 "$OUT/llama_build.log" 2>/dev/null | cut -c1-60)); stopping it"
  pkill -TERM -P "$BUILD_PID" 2>/dev/null; kill "$BUILD_PID" 2>/dev/null
fi
python3 scripts/gpu/gpu_bench_summary.py "$OUT" > "$OUT/summary.md"
tail -25 "$OUT/test_gpu_engine.log" 2>/dev/null
tar czf "$FINAL/results.tgz" -C "$FINAL" r && cp "$OUT/summary.md" "$FINAL/summary.md"
cat "$OUT/summary.md"
stamp "done"
