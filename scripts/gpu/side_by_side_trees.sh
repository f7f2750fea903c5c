#!/usr/bin/env bash
# Side by side in one device call: scripts/gpu/engine_27b.py (the engine as the app runs it) in a baseline tree
# (e.g. `git archive <commit>` unpacked into .base/ and carried) and in the working tree, alternately, on the same
# machine. ORDER is a list of TREE:MODEL:CONFIGS (TREE = base or new; CONFIGS as engine_27b.py --configs). Prints
# one line per configuration: decode tok/s (median and runs), warm TTFT, max allocated, tokens vs the first.
# Usage (device machine, repo root): BASE=.base GEN=256 ORDER="base:bonsai-8b:shipped new:bonsai-8b:shipped" \
#   bash scripts/gpu/side_by_side_trees.sh
set -uo pipefail
BASE=${BASE:-.base}
OUTD=${OUT:-/tmp/sbs_trees}
mkdir -p "$OUTD"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl \
  2>/dev/null || true  # the 27B's DeltaNet prefill kernels, when carried
ROOT=$PWD
i=0
for item in $ORDER; do
  tree=${item%%:*}; rest=${item#*:}; model=${rest%%:*}; configs=${rest#*:}
  dir=$([ "$tree" = base ] && echo "$ROOT/$BASE" || echo "$ROOT")
  i=$((i + 1))
  (cd "$dir" && PYTHONPATH=/tmp/site:$dir timeout ${ENGINE_S:-200} python3 scripts/gpu/engine_27b.py --model "$model" \
     --configs "$configs" --gen "${GEN:-256}" --runs 3 --out "/tmp/sbs_$i" > "$OUTD/sbs_$i.jsonl" 2> "/tmp/sbs_$i.log")
  echo "[$SECONDS s] $tree $model rc=$?"
  python3 - "$OUTD/sbs_$i.jsonl" "$tree" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    print(f"  {sys.argv[2]:4s} {r['model']:16s} {r['config']:44s} decode {r.get('decode_tok_s')} {r.get('decode_tok_s_runs')} "
          f"ttft {r.get('ttft_ms')} ms, max_alloc {r.get('max_allocated_GB')} GB, same runs {r.get('same_tokens_every_run')}, "
          f"= first cfg {r.get('tokens_equal_first_config')}, tokens[:6] {r.get('first_tokens', [])[:6]} {r.get('error', '')}")
PY
  grep -i "error\|Traceback" "/tmp/sbs_$i.log" | head -3
done
