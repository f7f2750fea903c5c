#!/usr/bin/env bash
# The session's last device call: the whole GPU test suite (4 workers), then the graph-prefill
# TTFT benchmark, then the 27B benchmark with whatever time is left. Everything goes to $OUT.
# Usage (device machine, repo root, carry .whl): DEADLINE=250 bash scripts/gpu/final_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/final}; mkdir -p "$OUT"
DEADLINE=${DEADLINE:-250}
export PYTHONUNBUFFERED=1
T0=$(date +%s)
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl \
  && export PYTHONPATH=/tmp/site:$PWD
timeout ${TEST_TIMEOUT:-120} python3 -m pytest -q -p no:cacheprovider -n 4 tests/gpu tests/engine/test_engine_gpu.py \
  tests/hybrid/test_hybrid_gpu.py > "$OUT/gpu_tests.log" 2>&1
echo "[$(( $(date +%s) - T0 ))s] gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/gpu_tests.log" | tail -25
if [ "$(left)" -gt 50 ]; then
  timeout 50 python3 scripts/gpu/bench_prefill.py --runs 3 --no-engine --out "$OUT" > "$OUT/prefill.log" 2>&1
  echo "[$(( $(date +%s) - T0 ))s] prefill rc=$?"; tail -1 "$OUT/prefill.log" | cut -c1-1500
fi
L=$(left)
if [ "$L" -gt 40 ]; then
  timeout $(( L - 5 )) python3 scripts/gpu/bench_27b.py --models bonsai-27b-ptq1 --prefill 1024 --graph-steps 200 \
    --out "$OUT" > "$OUT/bench_27b.log" 2>&1
  echo "[$(( $(date +%s) - T0 ))s] 27b rc=$?"; grep '^{' "$OUT/bench_27b.log" | tail -2 | cut -c1-2500; tail -3 "$OUT/bench_27b.log"
fi
