#!/usr/bin/env bash
# One device call: measure mat-vec/prefill launch configs afresh (quick candidate set) per model and, in the same
# process, time them against the shipped configs (scripts/gpu/engine_27b.py configs "shipped,retuned"). The fresh
# configs land in $OUT/k_<model>/ (merge them into runtime/kernels/tuned/<gpu>.json).
# Usage (device machine, repo root): OUT=/tmp/x MODELS="bonsai-8b bonsai-27b" CONFIGS=shipped,retuned GEN=128 \
#   bash scripts/gpu/retune_compare.sh
set -uo pipefail
OUT=${OUT:-/tmp/retune}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl \
  && export PYTHONPATH=/tmp/site:$PWD
summ() { grep '^{' "$1" | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l)
    print({k: r.get(k) for k in ('model', 'config', 'decode_tok_s', 'decode_tok_s_runs', 'ttft_ms', 'prefill_tok_s',
                                 'max_allocated_GB', 'tokens_equal_first_config', 'same_tokens_every_run', 'error')})"
  grep -v '^{' "$1" | grep -v Warn | tail -2 | cut -c1-200; }
for m in ${MODELS:-bonsai-8b bonsai-27b bonsai-27b-ptq1}; do
  date -u
  TERNARY_KERNELS_CACHE=$OUT/k_$m timeout ${MODEL_S:-230} python3 scripts/gpu/engine_27b.py --model "$m" \
    --configs "${CONFIGS:-shipped,retuned}" --gen "${GEN:-128}" --out "/tmp/e_$m" > "$OUT/e_$m.log" 2>&1
  echo "$m rc=$?"; summ "$OUT/e_$m.log"
done
date -u
