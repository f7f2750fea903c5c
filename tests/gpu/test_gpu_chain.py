"""Chained int8 decode activations (runtime/kernels/triton_chain.py) compiled for the GPU: at the
Bonsai-8B shapes with their tuned tiles (2-row programs that complete a 16-value group together,
split-K, dual gate/up, PDL), the chain mat-vec equals the two-launch W2A8 mat-vec bit for bit where
no norm is deferred, its quantised output equals quantising its output, and the fused decode step
with the chain stays within int8 rounding of the step without it, inside a CUDA graph."""

from __future__ import annotations

import pytest
import torch

from runtime.formats.codecs import pack_t2
from runtime.generation import GenerationSettings
from runtime.gpu_decode import CHAIN_ENV, GraphDecoder, fused_qwen3_step, graph_safe_embedding
from runtime.kernels import triton_attention as ta
from runtime.kernels import triton_chain as tc
from runtime.kernels import triton_linear as tlin
from runtime.model.qwen3 import Qwen3Model
from tests import model_factory as mf

pytestmark = pytest.mark.gpu
DEV = torch.device("cuda", 0)
G = 128


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def _weights(n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device=DEV).manual_seed(seed)
    codes = torch.randint(0, 3, (n, k), dtype=torch.uint8, device=DEV, generator=gen)
    scales = (torch.rand(n, k // G, device=DEV, generator=gen) * 0.02 + 0.005).half()
    return pack_t2(codes), scales


def _assert_same_layout(a: torch.Tensor, b: torch.Tensor) -> None:
    ra, rb = a.view(a.shape[0], 7, -1), b.view(b.shape[0], 7, -1)
    assert torch.equal(ra[:, :4], rb[:, :4]) and torch.equal(ra[:, 5], rb[:, 5])  # codes and int8 sums
    torch.testing.assert_close(ra[:, [4, 6]].contiguous().view(torch.float32),
                               rb[:, [4, 6]].contiguous().view(torch.float32), rtol=1e-5, atol=1e-30)


@pytest.mark.parametrize("cfg", [None, ("q8", 2, 4096, 1, 2), ("q8", 4, 2048, 1, 2), ("q8", 8, 1024, 4, 4),
                                 ("q8", 16, 1024, 1, 8), ("q8", 32, 512, 1, 8)])
@pytest.mark.parametrize("n,k,dual", [(4096, 4096, False), (12288, 4096, True), (4096, 12288, False)])
def test_gpu_chain_matvec_equals_two_launch_path(n, k, dual, cfg):
    torch.manual_seed(n + k)
    codes, scales = _weights(n, k, 1)
    up = _weights(n, k, 2) if dual else (None, None)
    x = torch.randn(1, k, device=DEV, dtype=torch.bfloat16)
    resid = None if dual else torch.randn(1, n, device=DEV, dtype=torch.bfloat16)
    q = tc.chain_quantize(x, tc.chain_buffer(1, k, DEV))
    q_out = tc.chain_buffer(1, n, DEV)
    nxt = (torch.rand(n, device=DEV) + 0.5).to(torch.bfloat16)
    # None: the tiles the two-launch path tuned for this shape (the chain looks them up the same way)
    cfg = cfg or tc.chain_config(1, codes, scales, G, torch.bfloat16, norm=False, dual=dual, residual=resid is not None)
    with torch.inference_mode():
        y = tc.chain_matvec(q, codes, scales, G, dtype=torch.bfloat16, residual=resid, up_codes=up[0], up_scales=up[1],
                            q_out=q_out, q_out_norm=None if dual else nxt, config=cfg)
        two = tlin._gemv(x, codes, scales, G, "t2", residual=resid, up_codes=up[0], up_scales=up[1],
                         config=cfg)
    assert torch.equal(y, two)
    _assert_same_layout(q_out, tc.chain_quantize(y, tc.chain_buffer(1, n, DEV), None if dual else nxt))
    # replayed from a graph (counters reset in-launch, PDL edges): the same bits every time
    g = torch.cuda.CUDAGraph()
    q2 = tc.chain_buffer(1, n, DEV)
    with torch.cuda.graph(g):
        y2 = tc.chain_matvec(q, codes, scales, G, dtype=torch.bfloat16, residual=resid, up_codes=up[0],
                             up_scales=up[1], q_out=q2, q_out_norm=None if dual else nxt, config=cfg)
    for _ in range(3):
        q2.zero_()
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(y2, y) and torch.equal(q2, q_out)


def test_gpu_chain_deferred_norm_close_to_normalised_input():
    n, k = 6144, 4096
    codes, scales = _weights(n, k, 3)
    x = torch.randn(1, k, device=DEV, dtype=torch.bfloat16) * 3
    nw = (torch.rand(k, device=DEV) + 0.5).to(torch.bfloat16)
    q = tc.chain_quantize(x, tc.chain_buffer(1, k, DEV), nw)
    y = tc.chain_matvec(q, codes, scales, G, dtype=torch.bfloat16, norm_eps=1e-6)
    two = tlin.fused_rmsnorm_matvec(x, nw, 1e-6, codes, scales, G)
    exact = tlin.ternary_dequantize(codes, scales, G).float() @ \
        (x.float() * torch.rsqrt(x.float().pow(2).mean() + 1e-6) * nw.float()).reshape(-1)
    assert rel(y, two) < 1e-2  # both int8; the chain rounds x * w in fp32, not rmsnorm(x) in bf16 (measured 5.8e-3)
    assert rel(y, exact) < 2e-2


def test_gpu_attention_chain_output_8b_shape():
    hq, hkv, d, max_pos, length = 32, 8, 128, 4096, 1500
    q = torch.randn(hq, d, device=DEV, dtype=torch.bfloat16)
    kc = torch.randn(hkv, max_pos, d, device=DEV, dtype=torch.bfloat16)
    vc = torch.randn(hkv, max_pos, d, device=DEV, dtype=torch.bfloat16)
    seq = torch.tensor([length], device=DEV)
    qa = tc.chain_buffer(1, hq * d, DEV)
    o = ta.decode_attention(q, kc, vc, seq, d ** -0.5, q_out=qa)
    assert torch.equal(o, ta.decode_attention(q, kc, vc, seq, d ** -0.5))
    _assert_same_layout(qa, tc.chain_quantize(o.reshape(1, -1), tc.chain_buffer(1, hq * d, DEV)))


def _graph_logits(md, chain: bool, monkeypatch, prompt: list[int], teacher: list[int]) -> list[torch.Tensor]:
    """Logits of the captured fused step along a fixed token sequence (teacher forcing)."""
    monkeypatch.setenv(CHAIN_ENV, "1" if chain else "0")
    model = Qwen3Model.from_model_data(md, DEV, dtype=torch.bfloat16, max_positions=128)
    model.embed = graph_safe_embedding(model.embed)
    step = fused_qwen3_step(model)
    assert step is not None
    assert step.__qualname__.startswith("_chained_qwen3_step") == chain
    out = []
    with torch.inference_mode():
        model.forward(torch.tensor(prompt, device=DEV), torch.arange(len(prompt), device=DEV), kv_len=len(prompt))
        tok = torch.zeros(1, dtype=torch.long, device=DEV)
        pos = torch.zeros(1, dtype=torch.long, device=DEV)
        tok.fill_(teacher[0])
        pos.fill_(len(prompt))
        step(tok, pos)  # warm-up (tuning) outside the capture; rewrites the same KV slot below
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            logits = step(tok, pos)
        for i, t in enumerate(teacher):
            tok.fill_(t)
            pos.fill_(len(prompt) + i)
            g.replay()
            out.append(logits.clone())
    return out


def test_gpu_fused_step_with_chain_tracks_the_two_launch_step(monkeypatch):
    cfg = mf.tiny_qwen3_config(num_hidden_layers=4)
    md = mf.hf_model_to_model_data(mf.make_ternary_hf_model(cfg, seed=9), mf.tiny_tokenizer())
    prompt = [5, 17, 250, 3, 99, 42, 7, 120]
    teacher = [7, 250, 3, 11, 12, 13, 99, 5, 17, 42]
    a = _graph_logits(md, True, monkeypatch, prompt, teacher)
    b = _graph_logits(md, False, monkeypatch, prompt, teacher)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert torch.isfinite(x).all()
        assert rel(x, y) < 2e-2, (i, rel(x, y))


def test_gpu_engine_decodes_with_the_chain(monkeypatch):
    """Through the graph decoder, greedy: the chained step runs captured and produces tokens."""
    monkeypatch.setenv(CHAIN_ENV, "1")
    cfg = mf.tiny_qwen3_config(num_hidden_layers=2)
    md = mf.hf_model_to_model_data(mf.make_ternary_hf_model(cfg, seed=4), mf.tiny_tokenizer())
    model = Qwen3Model.from_model_data(md, DEV, dtype=torch.bfloat16, max_positions=64)
    model.embed = graph_safe_embedding(model.embed)
    step = fused_qwen3_step(model)
    dec = GraphDecoder(step, model.vocab_size, DEV)
    prompt = [5, 17, 250, 3]
    with torch.inference_mode():
        dec.configure(GenerationSettings(temperature=0.0), prompt)
        first = dec.sample_first(model.forward(torch.tensor(prompt, device=DEV), torch.arange(len(prompt), device=DEV),
                                               last_only=True)[-1])
        toks = [first] + list(dec.tokens(first, len(prompt), 15))
    assert dec.use_graph and dec.graph_replays == 15, dec.fallback_reason
    assert len(toks) == 16 and all(0 <= t < model.vocab_size for t in toks)
