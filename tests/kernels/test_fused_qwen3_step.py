"""The fused Qwen3 decode step (``Qwen3Model.decode_step``, the 8B's CUDA-graph step) under the Triton
interpreter: equal to the model's own forward, token by token from an empty cache (the GPU suite checks it
after a prefill, in bf16 and inside a graph)."""

from __future__ import annotations

import pytest
import torch

import runtime.kernels.triton.backend  # noqa: F401  (registers the "triton" linear backend)
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
        step = a.decode_step()
        assert step is not None
        for i, tok in enumerate([7, 250, 3]):
            t, p = torch.tensor([tok]), torch.tensor([i])
            got, want = step(t, p), b.forward(t, p)[-1].float()
            assert float((got - want).norm() / want.norm()) < 1e-4, i
        torch.testing.assert_close(a.cache.k[:, :, :3], b.cache.k[:, :, :3], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(a.cache.v[:, :, :3], b.cache.v[:, :, :3], atol=1e-5, rtol=1e-5)


def test_fused_step_with_the_merge_writing_o_proj_int8_input(tiny, monkeypatch) -> None:
    """fp16 with int8 decode activations: the step whose attention merge writes the o_proj's int8 planes
    (TERNARY_ATTN_MERGE_Q8, the default) gives the same logits, bit for bit, as the step with the in-launch merge
    and a quantisation launch; it actually takes that path (a buffer is handed to the attention)."""
    from runtime.kernels.triton import attention as ta
    from runtime.kernels.triton import matvec

    handed = []
    real = ta.decode_attention

    def spy(*args, **kw):
        handed.append(kw.get("q8_out") is not None)
        return real(*args, **kw)

    monkeypatch.setattr(ta, "decode_attention", spy)
    # the interpreter's default mat-vec config is an exact kernel: take the persistent int8 one, as on the GPU
    monkeypatch.setattr(matvec, "_gemv_config", lambda *a: ("q8p", 2, 0, 1, 2))
    old = matvec.decode_activations()
    matvec.set_decode_activations("int8")
    try:
        logits = {}
        for flag in ("0", "1"):
            monkeypatch.setenv("TERNARY_ATTN_MERGE_Q8", flag)
            with mf.row_layout(monkeypatch, qwen3):
                m = Qwen3Model.from_model_data(tiny, "cpu", dtype=torch.float16, max_positions=16, backend="triton")
            with torch.inference_mode():
                step = m.decode_step()
                assert step is not None
                logits[flag] = [step(torch.tensor([tok]), torch.tensor([i])) for i, tok in enumerate([7, 250, 3])]
    finally:
        matvec.set_decode_activations(old)
    assert handed == [False] * 3 + [True] * 3
    for a, b in zip(logits["0"], logits["1"], strict=True):
        assert torch.isfinite(a).all() and torch.equal(a, b)
