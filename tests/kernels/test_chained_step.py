"""The fused Qwen3 decode step with int8 activations handed from kernel to kernel
(runtime.gpu_decode._chained_qwen3_step) against the same step with a quantisation launch before
every mat-vec, and against the engine's forward — Triton interpreter, fp16 (the int8 path serves
16-bit activations; the interpreter's bf16 ``tl.dot`` is unreliable)."""

from __future__ import annotations

import pytest
import torch

import runtime.kernels.triton_linear  # noqa: F401  (registers the "triton" linear backend)
from runtime import gpu_decode
from runtime.model import qwen3
from runtime.model.qwen3 import Qwen3Model
from tests import model_factory as mf

PROMPT = [5, 17, 250, 3, 99, 42, 7]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


@pytest.fixture(scope="module")
def tiny_md():
    cfg = mf.tiny_qwen3_config(num_hidden_layers=2, hidden_size=128, intermediate_size=256)
    return mf.hf_model_to_model_data(mf.make_ternary_hf_model(cfg, seed=11), mf.tiny_tokenizer())


def _model(md, monkeypatch) -> Qwen3Model:
    """Triton linears on the CPU, with q/k/v and gate/up row-fused as the CUDA build makes them."""
    orig = qwen3.linear_factory

    def factory(*args, **kwargs):
        make = orig(*args, **kwargs)
        make.fuse_rows = True
        return make

    with monkeypatch.context() as mp:
        mp.setattr(qwen3, "linear_factory", factory)
        m = Qwen3Model.from_model_data(md, "cpu", dtype=torch.float16, max_positions=32, backend="triton")
    m.embed = gpu_decode.graph_safe_embedding(m.embed)
    return m


def test_chained_step_tracks_the_engine_forward(tiny_md, monkeypatch):
    """Prefill by a CPU-backend model (the interpreter's prefill kernels are slow), its KV cache copied
    into the Triton-built model, then two decode steps through the chain against the CPU model's
    forward on the same tokens (int8 activations: within their rounding)."""
    ref = Qwen3Model.from_model_data(tiny_md, "cpu", dtype=torch.float32, max_positions=32)
    model = _model(tiny_md, monkeypatch)
    with torch.inference_mode():
        ref.forward(torch.tensor(PROMPT), torch.arange(len(PROMPT)), kv_len=len(PROMPT))
        model.cache.k.copy_(ref.cache.k.to(model.cache.k.dtype))
        model.cache.v.copy_(ref.cache.v.to(model.cache.v.dtype))
        monkeypatch.setenv(gpu_decode.CHAIN_ENV, "1")
        chained = gpu_decode.fused_qwen3_step(model)
        assert chained is not None and chained.__qualname__.startswith("_chained_qwen3_step")
        monkeypatch.setenv(gpu_decode.CHAIN_ENV, "0")
        plain = gpu_decode.fused_qwen3_step(model)
        assert plain is not None and not plain.__qualname__.startswith("_chained_qwen3_step")
        for i, tok in enumerate([7, 250]):
            t, p = torch.tensor([tok]), torch.tensor([len(PROMPT) + i])
            got, want = chained(t, p), ref.forward(t, p)[-1]
            assert torch.isfinite(got).all()
            assert rel(got, want) < 5e-2, (i, rel(got, want))
        new = slice(len(PROMPT), len(PROMPT) + 2)  # the K entries the chain wrote, as the forward did
        assert rel(model.cache.k[:, :, new], ref.cache.k[:, :, new]) < 2e-2
