"""Compute kernels. ``linear.py`` dispatches a ternary matmul to the best backend for the device: torch
reference (any device), the C CPU kernel, Triton (CUDA, the ``triton`` package). Kernels never know file
formats; docs/kernels.md describes each module."""
