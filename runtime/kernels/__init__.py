"""Compute kernels. ``linear.py`` dispatches a ternary matmul to the best backend for the device:
torch reference (any device), CPU fast path, Triton (CUDA). Kernels never know file formats."""
