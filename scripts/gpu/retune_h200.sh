#!/usr/bin/env bash
# Re-measure the shipped launch configs for this GPU, for both decode-activation modes, and write
# runtime/kernels/triton/tuned/<gpu>.json (copied to $OUT too). Usage on the GPU machine: bash scripts/gpu/retune_h200.sh
set -uo pipefail
OUT=${OUT:-/tmp/retune}
mkdir -p "$OUT/a8" "$OUT/ex"
export PYTHONUNBUFFERED=1 TERNARY_KERNELS_RETUNE=1 TERNARY_KERNELS_TUNE=full
for m in ${MODELS:-bonsai-8b}; do
  TERNARY_DECODE_ACTIVATIONS=int8 python3 scripts/gpu/bench_kernels.py --skip-tests --no-bf16-chain --model $m --out "$OUT/a8/$m" > "$OUT/a8_$m.log" 2>&1
  echo "int8 $m rc=$?"; tail -12 "$OUT/a8/$m/bench_kernels.md"
  TERNARY_DECODE_ACTIVATIONS=exact python3 scripts/gpu/bench_kernels.py --skip-tests --no-bf16-chain --model $m --out "$OUT/ex/$m" > "$OUT/ex_$m.log" 2>&1
  echo "exact $m rc=$?"; tail -4 "$OUT/ex/$m/bench_kernels.md"
done
python3 - "$OUT" <<'PY'
import json, sys, glob, torch
from pathlib import Path
out = Path(sys.argv[1])
name = torch.cuda.get_device_name().lower().replace(" ", "-")
dst = Path("runtime/kernels/triton/tuned") / f"{name}.json"
merged = json.loads(dst.read_text()) if dst.exists() else {}
for f in sorted(glob.glob(str(out / "*" / "*" / "tuned_configs.json"))):
    merged.update(json.loads(Path(f).read_text()))
dst.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
(out / "tuned.json").write_text(dst.read_text())
print("tuned configs:", len(merged), "->", dst)
PY
