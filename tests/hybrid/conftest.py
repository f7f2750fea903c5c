"""Fixtures for the hybrid tests (helpers live in hybrid_helpers.py, importable by name)."""

from __future__ import annotations

import pytest
import torch
from hybrid_helpers import TINY_CONFIGS, build_tiny

from runtime.formats.model_data import ModelData


@pytest.fixture(scope="session")
def tiny_models() -> dict[str, tuple[torch.nn.Module, ModelData]]:
    return {n: build_tiny(n, seed=i) for i, n in enumerate(TINY_CONFIGS)}
