"""Launch configs measured by scripts/gpu/bench_kernels.py, one JSON per GPU model (package data)."""
