#!/usr/bin/env bash
# One device call: the GPU test suite, then the 27B fused decode step per kernel (t3 with the int8
# q3 mat-vec and exact; t2 with q8), then the 27B through the engine under VRAM caps.
# Usage (device machine, repo root, carry .whl): DEADLINE=560 STAGES="tests diag engine" bash scripts/gpu/check_27b.sh
set -uo pipefail
OUT=${OUT:-/tmp/check27b}; mkdir -p "$OUT"
DEADLINE=${DEADLINE:-560}
STAGES=${STAGES:-"tests diag engine"}
export PYTHONUNBUFFERED=1
T0=$(date +%s)
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl \
  && export PYTHONPATH=/tmp/site:$PWD
for st in $STAGES; do
  L=$(left); [ "$L" -lt 30 ] && { echo "skip $st (no time)"; continue; }
  case $st in
    tests) timeout $(( L < 240 ? L : 240 )) python3 -m pytest -q -p no:cacheprovider -n 6 -rf --tb=line tests/gpu \
             tests/engine/test_engine_gpu.py tests/hybrid/test_hybrid_gpu.py > "$OUT/gpu_tests.log" 2>&1
           echo "[$(( $(date +%s) - T0 ))s] tests rc=$?"; tail -12 "$OUT/gpu_tests.log" | cut -c1-400 ;;
    speed) timeout 120 python3 -m pytest -q -p no:cacheprovider -s tests/gpu/test_gpu_t3_q8.py -k speed > "$OUT/q3_speed.log" 2>&1
           echo "[$(( $(date +%s) - T0 ))s] q3 speed rc=$?"; grep -iE "us|GB/s" "$OUT/q3_speed.log" | head -40 | cut -c1-200 ;;
    diag)  timeout $(( L < 200 ? L : 200 )) python3 scripts/gpu/diag_step_trace_27b.py --out "$OUT" \
             --models bonsai-27b-ptq1,bonsai-27b --modes int8,exact > "$OUT/diag.log" 2>&1
           echo "[$(( $(date +%s) - T0 ))s] diag rc=$?"
           python3 -c "
import json
for r in json.load(open('$OUT/diag27b.json')):
    print({k: v for k, v in r.items() if k not in ('by_kernel', 'first_layers')})
    for x in r.get('by_kernel', [])[:6]: print('   ', x)" ;;
    engine) timeout $(( L - 5 )) python3 scripts/gpu/engine_27b.py --out "$OUT/ptq1" ${ENGINE_ARGS:-} > "$OUT/engine.log" 2>&1
           echo "[$(( $(date +%s) - T0 ))s] engine rc=$?"; grep '^{' "$OUT/engine.log" | cut -c1-1500; grep -v '^{' "$OUT/engine.log" | tail -4
           L=$(left); [ "$L" -gt 60 ] && timeout $(( L - 5 )) python3 scripts/gpu/engine_27b.py --out "$OUT/t2" --model bonsai-27b \
             --configs full ${ENGINE_ARGS:-} > "$OUT/engine_t2.log" 2>&1
           echo "[$(( $(date +%s) - T0 ))s] engine t2 rc=$?"; grep '^{' "$OUT/engine_t2.log" | cut -c1-1500 ;;
  esac
done
