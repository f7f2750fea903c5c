#!/usr/bin/env bash
# Batched decoding (several streams at once) against llama.cpp's llama-batched-bench, in one device call,
# on the very same synthetic weights: bench_batched.py runs our engine at each stream count and writes
# those weights as GGUF, while llama.cpp (vendored in llama-cpp-python, carried as .llamacpp/src) builds
# for sm_90 in the background; then llama-batched-bench runs on that GGUF, then our engine once more
# (ours, llama.cpp, ours: both sides of the peer run).
# llama-batched-bench, per stream count B (-npl): B random prompts of PROMPT tokens decoded as one batch
# (S_PP = B*PROMPT / T_PP), then GEN steps of one token per stream (S_TG = B*GEN / T_TG, generation only,
# logits for every token, no sampling). The -npl list is given LLAMA_REPS times in one process so the
# first pass is a warm-up (CUDA graphs, allocations); the summary shows every pass and the median.
# Usage (device machine, repo root, carry .llamacpp):
#   MODEL=bonsai-8b STREAMS="1 4 8 16" PROMPT=128 GEN=128 DEADLINE=560 bash scripts/gpu/batched_side_by_side.sh
set -uo pipefail
OUT=${OUT:-/tmp/bsbs_out}
mkdir -p "$OUT"
DEADLINE=${DEADLINE:-560}
MODEL=${MODEL:-bonsai-8b}
STREAMS=${STREAMS:-"1 4 8 16"}
PROMPT=${PROMPT:-128}
GEN=${GEN:-128}
LLAMA_REPS=${LLAMA_REPS:-3}      # passes over the -npl list in one llama-batched-bench process
LLAMA_EXTRA=${LLAMA_EXTRA:-}     # extra llama-batched-bench flags, e.g. "-kvu" (unified KV cache)
export PYTHONUNBUFFERED=1
GG=/dev/shm/gguf
GGUF=$GG/$MODEL.gguf
BUILD=${LLAMA_BUILD_DIR:-.llamacpp_build}
mkdir -p "$GG"
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
stamp() { echo "[$(el)s] $*"; }
left() { echo $(( DEADLINE - $(el) )); }
min() { local m=$(( $1 < $2 ? $1 : $2 )); echo $(( m < 10 ? 10 : m )); }  # a timeout, never 0 (= none)

CSV=$(echo $STREAMS | tr ' ' ',')
MAXS=$(echo $STREAMS | tr ' ' '\n' | sort -n | tail -1)
# llama.cpp splits -c evenly over max(npl) sequences (non-unified KV) and pads each to 256 tokens;
# a (B, PROMPT, GEN) case that does not fit is silently skipped, so give every sequence PROMPT+GEN.
CTX=$(( MAXS * ( (PROMPT + GEN + 255) / 256 * 256 ) ))
NPL=$CSV; for _ in $(seq 2 "$LLAMA_REPS"); do NPL="$NPL,$CSV"; done

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# own process group (setsid) so the whole cmake/ninja/nvcc tree can be stopped at the end
setsid bash -c "trap - INT TERM; nice -n 19 bash scripts/gpu/llama_build.sh '$OUT' '$BUILD' ${LLAMA_JOBS:-13}" \
  > /dev/null 2>&1 < /dev/null &
BUILD_PID=$!
if [ -n "${PRE_TESTS:-}" ]; then  # a few GPU tests first (the build runs meanwhile)
  timeout "${PRE_TESTS_S:-150}" python3 -m pytest -q -x -p no:cacheprovider $PRE_TESTS > "$OUT/pre_tests.log" 2>&1
  stamp "pre tests rc=$?"; grep -E "passed|failed|FAILED|Error|assert" "$OUT/pre_tests.log" | tail -15
fi

ours() {  # tag, limit_s, [gguf to write]
  timeout "$2" python3 scripts/gpu/bench_batched.py --model "$MODEL" --streams "$CSV" --prompt "$PROMPT" --gen "$GEN" \
    --runs 3 ${3:+--write-gguf "$3"} --out "$OUT/ours_$1.json" > "$OUT/ours_$1.log" 2>&1
  local rc=$?
  stamp "ours $MODEL ($1) rc=$rc"
  grep '^{.*"streams"' "$OUT/ours_$1.log"
  grep -i "wrote" "$OUT/ours_$1.log"
  [ "$rc" -ne 0 ] && tail -15 "$OUT/ours_$1.log"
  return 0
}
ours first "$(min 300 $(( $(left) - 60 )))" "$GGUF"

while kill -0 "$BUILD_PID" 2>/dev/null && [ "$(left)" -gt 90 ]; do sleep 5; done
stamp "llama.cpp build: $(tail -1 "$OUT/llama_build.log" 2>/dev/null)"
tail -3 "$OUT/llama_build.log" 2>/dev/null
[ -x "$BUILD/bin/llama-batched-bench" ] || tail -15 "$OUT/llama_cmake.log" 2>/dev/null

if [ -x "$BUILD/bin/llama-batched-bench" ] && [ -f "$GGUF" ] && [ "$(left)" -gt 40 ]; then
  CMD=("$BUILD/bin/llama-batched-bench" -m "$GGUF" -c "$CTX" -b 2048 -ub 512 -npp "$PROMPT" -ntg "$GEN"
       -npl "$NPL" -ngl 99 -fa on --output-format jsonl $LLAMA_EXTRA)
  echo "${CMD[*]}" | tee "$OUT/llama_batched.cmd"
  timeout "$(min 240 $(( $(left) - 20 )))" "${CMD[@]}" > "$OUT/llama_batched.txt" 2> "$OUT/llama_batched.log"
  stamp "llama-batched-bench $MODEL rc=$?"
  [ -s "$OUT/llama_batched.txt" ] || tail -15 "$OUT/llama_batched.log"
else
  stamp "llama-batched-bench $MODEL skipped (binary: $([ -x "$BUILD/bin/llama-batched-bench" ] && echo yes || echo no)," \
    "gguf: $([ -f "$GGUF" ] && echo yes || echo no), left $(left)s)"
fi

[ "$(left)" -gt 120 ] && ours again "$(min 300 $(( $(left) - 15 )))"

# summary: llama.cpp rows (jsonl, or the markdown table if jsonl was not taken) and ours side by side
python3 - "$OUT" <<'PY'
import json, re, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])

def llama_rows():
    p = out / "llama_batched.txt"
    rows = []
    if not p.exists():
        return rows
    for line in p.read_text(errors="replace").splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                r = json.loads(line)
                rows.append((r["pl"], r["pp"], r["tg"], r["speed_pp"], r["speed_tg"]))
            except (ValueError, KeyError):
                pass
        elif re.match(r"^\|\s*\d", line):  # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
            c = [x.strip() for x in line.strip("|").split("|")]
            rows.append((int(c[2]), int(c[0]), int(c[1]), float(c[5]), float(c[7])))
    return rows

def ours(tag):
    res = {}
    p, log = out / f"ours_{tag}.json", out / f"ours_{tag}.log"
    items = []
    try:
        items = json.loads(p.read_text())
    except (OSError, ValueError):
        for line in (log.read_text(errors="replace").splitlines() if log.exists() else []):
            if line.startswith("{") and '"streams"' in line:
                try:
                    items.append(json.loads(line))
                except ValueError:
                    pass
    for r in items if isinstance(items, list) else []:
        if isinstance(r, dict) and "streams" in r:
            if r.get("path") == "single":  # the unbatched decode path, one stream
                print(f"ours ({tag}) single-stream path: decode {r.get('decode_tok_s')} tok/s")
            else:
                res[int(r["streams"])] = (r.get("aggregate_tok_s"), r.get("full_batch_tok_s"))
    return res

by = {}
for pl, pp, tg, spp, stg in llama_rows():
    by.setdefault(pl, []).append((spp, stg))
med = {}
if by:
    print("llama-batched-bench (S_PP = prompt tok/s over all streams, S_TG = generated tok/s over all streams;"
          " passes in order, median of passes after the first):")
for pl in sorted(by):
    v = by[pl]
    rest = v[1:] or v
    med[pl] = statistics.median(s for _, s in rest)
    print(f"  B={pl:3d}  S_TG {med[pl]:9.1f}  (passes {' / '.join(f'{s:.1f}' for _, s in v)})"
          f"  S_PP {statistics.median(p for p, _ in rest):9.1f}  (passes {' / '.join(f'{p:.0f}' for p, _ in v)})")
a, b = ours("first"), ours("again")
if a or b or med:
    num = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)
    fmt = lambda x: f"{x:.1f}" if num(x) else "-"
    rat = lambda x, y: f"{x / y:.2f}x" if num(x) and num(y) and y else "-"
    print("ours: window = first token to last over all streams (later prefills and the ramp inside); full batch ="
          " the steps that ran every stream (S_TG's definition). Runs: first / again")
    print("streams | ours window tok/s | ours full-batch tok/s | llama.cpp S_TG | window / S_TG | full-batch / S_TG")
    for s in sorted(set(a) | set(b) | set(med)):
        m = med.get(s)
        wa, fa = a.get(s, (None, None))
        wb, fb = b.get(s, (None, None))
        print(f"  {s:5d} | {fmt(wa)} / {fmt(wb)} | {fmt(fa)} / {fmt(fb)} | {fmt(m)} | {rat(wa, m)} / {rat(wb, m)}"
              f" | {rat(fa, m)} / {rat(fb, m)}")
PY
kill -- -"$BUILD_PID" 2>/dev/null
stamp done
