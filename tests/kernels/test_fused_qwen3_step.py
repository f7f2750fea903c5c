"""The fused Qwen3 decode step (``gpu_decode.fused_qwen3_step``, the 8B's CUDA-graph step) under the Triton
interpreter: equal to the model's own forward, token by token from an empty cache (the GPU suite checks it
after a prefill, in bf16 and inside a graph)."""

from __future__ import annotations

import pytest
import torch

import runtime.kernels.triton_linear  # noqa: F401  (registers the "triton" linear backend)
from runtime.gpu_decode import fused_qwen3_step
from runtime.model import qwen3
from runtime.model.qwen3 import Qwen3Model
from tests import model_factory as mf


@pytest.fixture(scope="module")
def tiny():
    cfg = mf.tiny_qwen3_config(num_hidden_layers=1, hidden_size=128, intermediate_size=256, head_dim=32)
    return mf.hf_model_to_model_data(mf.make_ternary_hf_model(cfg, seed=5), mf.tiny_tokenizer())


def _model(md, backend: str, monkeypatch) -> Qwen3Model:
    with mf.row_layout(monkeypatch, qwen3):
        return Qwen3Model.from_model_data(md, "cpu", dtype=torch.float32, max_positions=16, backend=backend)


def test_fused_qwen3_step_equals_forward(tiny, monkeypatch) -> None:
    a, b = _model(tiny, "triton", monkeypatch), _model(tiny, "reference", monkeypatch)
    with torch.inference_mode():
        step = fused_qwen3_step(a)
        assert step is not None
        for i, tok in enumerate([7, 250, 3]):
            t, p = torch.tensor([tok]), torch.tensor([i])
            got, want = step(t, p), b.forward(t, p)[-1].float()
            assert float((got - want).norm() / want.norm()) < 1e-4, i
        torch.testing.assert_close(a.cache.k[:, :, :3], b.cache.k[:, :, :3], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(a.cache.v[:, :, :3], b.cache.v[:, :, :3], atol=1e-5, rtol=1e-5)
