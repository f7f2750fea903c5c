"""Fixtures for the hybrid tests (helpers live in hybrid_helpers.py, importable by name)."""

from __future__ import annotations

import os

import pytest
import torch
from hybrid_helpers import TINY_CONFIGS, build_tiny

from runtime.formats.model_data import ModelData

# CUDA-only module: not even imported without a GPU (CI runs -m "not gpu"), so nothing is skipped
collect_ignore_glob = [] if torch.cuda.is_available() else ["test_hybrid_gpu.py"]
# Triton kernels run on the CPU only under the interpreter (CI sets TRITON_INTERPRET=1)
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    collect_ignore_glob += ["test_hybrid_triton.py", "test_hybrid_fused_step.py"]


@pytest.fixture(scope="session")
def tiny_models() -> dict[str, tuple[torch.nn.Module, ModelData]]:
    return {n: build_tiny(n, seed=i) for i, n in enumerate(TINY_CONFIGS)}
