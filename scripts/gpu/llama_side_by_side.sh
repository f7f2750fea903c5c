#!/usr/bin/env bash
# llama.cpp (vendored in llama-cpp-python, carried as .llamacpp/src) against our engine, in one device
# call, on the very same synthetic weights: engine_27b.py runs each model through our engine and writes
# those weights as GGUF Q2_0 g64, while llama.cpp builds for sm_90 in the background; then llama-bench
# runs on each GGUF, then our engine once more (engine, llama, engine: both sides of the peer run).
# Usage (device machine, repo root, carry .llamacpp): MODELS="bonsai-8b bonsai-27b" DEADLINE=560 bash $0
set -uo pipefail
OUT=${OUT:-/tmp/sbs_out}
mkdir -p "$OUT"
DEADLINE=${DEADLINE:-560}
MODELS=${MODELS:-"bonsai-8b bonsai-27b"}
GEN=${GEN:-256}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl \
  && export PYTHONPATH=/tmp/site:$PWD  # the 27B's DeltaNet prefill kernels
GG=/dev/shm/gguf
BUILD=.llamacpp_build
mkdir -p "$GG"
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
stamp() { echo "[$(el)s] $*"; }
left() { echo $(( DEADLINE - $(el) )); }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
( trap - INT TERM; bash scripts/gpu/llama_build.sh "$OUT" $BUILD ${LLAMA_JOBS:-13} ) > /dev/null 2>&1 < /dev/null &
BUILD_PID=$!

ours() {  # model, tag
  timeout 200 python3 scripts/gpu/engine_27b.py --model "$1" --configs full --gen "$GEN" --runs 3 --out "$OUT/$2_$1" \
    ${3:+--write-gguf "$3"} > "$OUT/$2_$1.jsonl" 2> "$OUT/$2_$1.log"
  stamp "ours $1 ($2) rc=$?"; grep -o '"decode_tok_s_runs": \[[^]]*\]\|"ttft_ms": [0-9.]*\|"prefill_tok_s": [0-9.]*' "$OUT/$2_$1.jsonl" | tr '\n' ' '; echo
  grep "wrote" "$OUT/$2_$1.log"
}
for m in $MODELS; do ours "$m" first "$GG/$m.gguf"; done
while kill -0 "$BUILD_PID" 2>/dev/null && [ "$(left)" -gt 90 ]; do sleep 5; done
stamp "llama.cpp build: $(tail -1 "$OUT/llama_build.log" 2>/dev/null)"
tail -3 "$OUT/llama_build.log"
for m in $MODELS; do
  if [ -x $BUILD/bin/llama-bench ] && [ -f "$GG/$m.gguf" ] && [ "$(left)" -gt 40 ]; then
    timeout 120 $BUILD/bin/llama-bench -m "$GG/$m.gguf" -p 512 -n "$GEN" -fa 1 -ngl 99 -r 3 -o json \
      > "$OUT/llama_$m.json" 2> "$OUT/llama_$m.log"
    stamp "llama-bench $m rc=$?"
    python3 - "$OUT/llama_$m.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    print(f"  n_prompt={r['n_prompt']} n_gen={r['n_gen']} avg_ts={r['avg_ts']:.1f} samples={[round(x, 1) for x in r['samples_ts']]}")
PY
  else
    stamp "llama-bench $m skipped"; tail -5 "$OUT/llama_$m.log" 2>/dev/null
  fi
done
for m in $MODELS; do [ "$(left)" -gt 120 ] && ours "$m" again; done
kill "$BUILD_PID" 2>/dev/null
stamp done
