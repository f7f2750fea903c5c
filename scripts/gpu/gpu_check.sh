#!/usr/bin/env bash
# One device call after a change to the runtime: the GPU test suite, then `ternary bench` on the synthetic 8B
# side by side with a baseline tree (`git archive <commit> runtime | tar -x -C .oldtree`, carried), and the
# synthetic 27B hybrid through the same Engine-driven bench.
# ENGINE_SIDE="bonsai-27b bonsai-8b" adds scripts/gpu/engine_27b.py (the Engine itself, one greedy prompt,
# median of 3) in both trees for those synthetic models: the same measurement on both sides, tokens compared
# (the old tree carries its own copy: `git archive <commit> runtime scripts/gpu/engine_27b.py`).
# SKIP_TESTS=1 skips the test suite (a second call). TREES="" skips the bench.
# Usage (device machine, repo root, carry .whl and .oldtree): bash scripts/gpu/gpu_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_check}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/fla_core-*.whl \
  && export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout ${TESTS_S:-330} python3 -m pytest -q -p no:cacheprovider -n 16 tests/gpu tests/engine/test_engine_gpu.py \
    tests/hybrid/test_hybrid_gpu.py tests/hybrid/test_hybrid_fused_step.py > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$? in $(( $(date +%s) - T0 )) s"; grep -E "passed|failed|FAILED|Error" "$OUT/gpu_tests.log" | tail -25
fi
B="--synthetic bonsai-8b --ctx 4096 --prompt-tokens 512 --gen 256 --runs 3 --baseline none --cache-dir /tmp/syn"
for tree in ${TREES-new old new old}; do
  if [ $tree = old ]; then dir=.oldtree; pp=/tmp/site:$PWD/.oldtree; else dir=.; pp=/tmp/site:$PWD; fi
  (cd $dir && PYTHONPATH=$pp timeout 150 python3 -m runtime bench $B --json "$OUT/bench8b_$tree.json" \
     > "$OUT/bench8b_$tree.log" 2>&1); echo "8B $tree rc=$?"; grep -E "^ours|roofline" "$OUT/bench8b_$tree.log"
done
if [ -n "${WITH_27B:-}" ]; then
  timeout ${B27_S:-200} python3 -m runtime bench --synthetic bonsai-27b --ctx 4096 --prompt-tokens 512 --gen 128 \
    --runs 3 --baseline none --cache-dir /tmp/syn --json "$OUT/bench27b.json" > "$OUT/bench27b.log" 2>&1
  echo "27B rc=$?"; tail -8 "$OUT/bench27b.log"
fi
for m in ${ENGINE_SIDE:-}; do
  for tree in new old; do
    if [ $tree = old ]; then dir=.oldtree; pp=/tmp/site:$PWD/.oldtree; else dir=.; pp=/tmp/site:$PWD; fi
    (cd $dir && PYTHONPATH=$pp timeout ${ENGINE_S:-240} python3 scripts/gpu/engine_27b.py --model $m --configs full \
       --ctx 4096 --prompt-tokens 512 --gen 128 --runs 3 --out "$OUT/engine_${m}_$tree" > "$OUT/engine_${m}_$tree.log" 2>&1)
    echo "engine $m $tree rc=$?"
  done
  python3 - "$OUT/engine_${m}_new/engine_27b.json" "$OUT/engine_${m}_old/engine_27b.json" <<'PY'
import json, sys
new, old = (json.load(open(p))[0] for p in sys.argv[1:3])
for k in ("decode_tok_s", "decode_tok_s_runs", "prefill_tok_s", "ttft_ms", "max_allocated_GB", "error"):
    print(f"  {k}: new {new.get(k)}  old {old.get(k)}")
if new.get("decode_tok_s") and old.get("decode_tok_s"):
    print(f"  decode new/old {new['decode_tok_s'] / old['decode_tok_s']:.4f}  prefill new/old "
          f"{new['prefill_tok_s'] / old['prefill_tok_s']:.4f}  same tokens: {new.get('tokens') == old.get('tokens')}")
PY
done
