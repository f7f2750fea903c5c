"""Fixtures for planner/offload/decoder tests: a tiny random ternary Qwen3 built with the synthetic
generator (no transformers needed), prepared on the CPU with the reference backend so the
results are deterministic on any machine."""

from __future__ import annotations

import pytest
import torch

from runtime.formats.model_data import DenseTensor, ModelData, TernaryTensor
from runtime.model.config import ModelConfig
from runtime.synthetic import synthetic_tensors


def tiny_config(layers: int = 4, tie: bool = False) -> ModelConfig:
    return ModelConfig(arch="qwen3", vocab_size=300, hidden_size=128, intermediate_size=256, num_layers=layers,
                       num_heads=4, num_kv_heads=2, head_dim=32, max_position_embeddings=256,
                       tie_word_embeddings=tie, rope_theta=10000.0)


def tiny_model_data(layers: int = 4, tie: bool = False, seed: int = 0, dense: bool = True) -> ModelData:
    """Random ternary tiny Qwen3. ``dense`` stores the matrices dequantized (fp32), which the model
    runs with plain ``F.linear``: the same values, ~50x faster than the reference ternary backend,
    and these tests compare a model with itself (wrapped vs not), not kernels."""
    cfg = tiny_config(layers, tie)
    tensors = dict(synthetic_tensors(cfg, seed=seed))
    if dense:
        tensors = {n: DenseTensor(t.dequantize(torch.float32)) if isinstance(t, TernaryTensor) else t
                   for n, t in tensors.items()}
    return ModelData(config=cfg, tensors=tensors, name="tiny")


def build_tiny(md: ModelData, max_positions: int = 64):
    from runtime.model.qwen3 import Qwen3Model

    return Qwen3Model.from_model_data(md, "cpu", dtype=torch.float32, max_positions=max_positions,
                                      backend="reference")


@pytest.fixture(scope="module")
def tiny_md() -> ModelData:
    return tiny_model_data()
