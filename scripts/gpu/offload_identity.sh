#!/usr/bin/env bash
# #3's offload target in one device call: synthetic Bonsai-8B under `--max-vram 1GiB` (half its packed
# weights) against the uncapped run, each `ternary bench` in its own process (as a user runs them), for a
# prompt of one prefill chunk (512) and one of two (700); then 4K and 32K uncapped for TTFT and the
# planner's accuracy, and the mapped-offload GPU tests. JSON and log per run under $OUT/r, packed into
# $OUT/results.tgz (the device tool returns at most 8 files); summary printed last.
# Usage (device machine, repo root, carry .whl): DEADLINE=560 bash scripts/gpu/offload_identity.sh
set -uo pipefail
FINAL=${OUT:-/tmp/offload_identity}; OUT=$FINAL/r; mkdir -p "$OUT"
DEADLINE=${DEADLINE:-560}
export PYTHONUNBUFFERED=1
SYN=/dev/shm/ternary-synthetic; mkdir -p "$SYN"
left() { echo $(( DEADLINE - SECONDS )); }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl \
  && export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
bench() {  # name, then bench arguments
  local name=$1; shift
  if [ "$(left)" -lt 40 ]; then echo "[${SECONDS}s] $name skipped (time)"; return; fi
  timeout $(( $(left) - 10 )) python3 -m runtime.cli.bench --synthetic bonsai-8b --cache-dir "$SYN" --baseline none \
    --json "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "[${SECONDS}s] $name rc=$rc"; [ $rc -ne 0 ] && tail -5 "$OUT/$name.log"
}
bench full_512 --ctx 1024 --prompt-tokens 512 --gen 64 --runs 3
bench cap1g_512 --ctx 1024 --prompt-tokens 512 --gen 64 --runs 3 --max-vram 1GiB
bench full_700 --ctx 1024 --prompt-tokens 700 --gen 64 --runs 1
bench cap1g_700 --ctx 1024 --prompt-tokens 700 --gen 64 --runs 1 --max-vram 1GiB
if [ "$(left)" -gt 120 ]; then
  timeout $(( $(left) - 60 )) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_mapped_offload.py > "$OUT/tests.log" 2>&1
  echo "[${SECONDS}s] mapped tests rc=$?"; tail -15 "$OUT/tests.log"
fi
bench full_4k --ctx 4096 --prompt-tokens 512 --gen 256 --runs 3
bench full_32k --ctx 32768 --prompt-tokens 512 --gen 64 --runs 1
python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
R = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}
for name, r in R.items():
    o, p = r["ours"], r["plan"]
    print(f"{name}: plan {p['offload_mode']} gpu_layers={p['layers_on_gpu']} chunk={p['prefill_chunk']} ctx={p['context_length']} "
          f"decode {o['decode_tok_s']:.1f} tok/s runs={[round(x, 1) for x in o['decode_tok_s_runs']]} ttft {o['ttft_s']*1e3:.1f} ms "
          f"prefill {o['prefill_tok_s']:.0f} peak {o['peak_allocated_bytes']/2**30:.3f} GiB pred {r['predicted_allocated_bytes']/2**30:.3f} "
          f"(ratio {o['peak_vs_plan']:.3f}) device {(o['device_used_bytes']-r['device_used_before_bytes'])/2**30:.3f} / "
          f"{r['predicted_total_bytes']/2**30:.3f} GiB roofline {o.get('fraction_of_roofline', 0):.3f} det={o['deterministic']}")
for a, b in (("full_512", "cap1g_512"), ("full_700", "cap1g_700"), ("full_512", "full_4k")):
    if a in R and b in R:
        x, y = R[a]["ours"]["tokens"], R[b]["ours"]["tokens"]
        n = min(len(x), len(y))
        first = next((i for i in range(n) if x[i] != y[i]), n)
        print(f"{b} vs {a}: tokens identical={x[:n] == y[:n]} (first {n}; first difference at {first})")
PY
tar czf "$FINAL/results.tgz" -C "$FINAL" r
