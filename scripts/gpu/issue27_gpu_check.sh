#!/usr/bin/env bash
# Device check for the document-search work (#27): the GPU suite (incl. the embedding model on CUDA) plus
# the engine GPU tests and the hybrid tests, then one 8B `ternary bench` to compare with the last H100/H200 run.
# Usage (device machine, repo root, carry .whl): bash scripts/gpu/issue27_gpu_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/issue27}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/fla_core-*.whl \
  && export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 420 python3 -m pytest -q -p no:cacheprovider -n 8 tests/gpu tests/engine/test_engine_gpu.py \
  tests/hybrid/test_hybrid_gpu.py tests/hybrid/test_hybrid_fused_step.py tests/engine/test_engine_embedding.py \
  > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" "$OUT/gpu_tests.log" | tail -25
timeout 150 python3 -m runtime bench --synthetic bonsai-8b --ctx 4096 --prompt-tokens 512 --gen 256 --runs 3 \
  --baseline none --json "$OUT/bench8b.json" > "$OUT/bench8b.log" 2>&1
echo "bench rc=$?"; tail -25 "$OUT/bench8b.log"
