"""Launches folded into neighbours in the decode step, on the GPU at real sizes: the decoder's one-launch
sampler (``triton_sampling.DecoderSampler``) against the eager torch ops it replaces, and decode attention
writing the o_proj's int8 input (``q8_out``) against the quantisation launch it saves — same bits, same tokens."""

from __future__ import annotations

import pytest
import torch
import triton

from runtime.generation import GenerationSettings
from runtime.gpu_decode import GraphDecoder, fused_qwen3_step, graph_safe_embedding
from runtime.kernels import triton_linear as tlin
from runtime.kernels.triton_attention import decode_attention
from runtime.model.qwen3 import Qwen3Model
from tests import model_factory as mf

pytestmark = pytest.mark.gpu
DEV = torch.device("cuda", 0)
V = 151669  # the Bonsai vocabulary


@pytest.mark.parametrize("params", [[1.0, 1.0, 0.0, 1.0, 0.0, 0.0], [0.7, 1.0, 0.0, 1.3, 0.4, 0.25]])
def test_decoder_sampler_equals_the_eager_ops(params):
    g = torch.Generator(device=DEV).manual_seed(0)
    for trial in range(4):
        logits = torch.randn(V, device=DEV, generator=g) * 4
        if trial == 3:
            logits[[11, 90000, 151000]] = logits.max() + 1  # a three-way tie across blocks: the first wins
        def step(t, p, logits=logits):
            return logits

        ref = GraphDecoder(step, V, DEV, use_graph=False, fused_sampling=False)
        fused = GraphDecoder(step, V, DEV, use_graph=False)
        assert fused.sampler is not None  # on by default on CUDA
        for d in (ref, fused):
            d.params.copy_(torch.tensor(params))
            d.seen.copy_(torch.rand(V, device=DEV, generator=torch.Generator(device=DEV).manual_seed(trial)) < 0.3)
            d.counts.copy_((torch.arange(V, device=DEV) % 97 == trial).to(torch.int32))
            d.pos.fill_(100)
        scaled = fused.sampler.scaled(logits, fused.seen, fused.counts, fused.params)
        assert torch.equal(scaled, ref._penalized(logits) / ref.params[0])
        ref._body()
        fused._body()
        assert int(fused.tok) == int(ref.tok) and int(fused.pos) == int(ref.pos) == 101
        assert torch.equal(fused.seen, ref.seen) and torch.equal(fused.counts, ref.counts)
        if trial == 3 and params[3] == 1.0:
            assert int(fused.tok) == 11


@pytest.mark.parametrize("hq,hkv,dim,length", [(32, 8, 128, 700), (32, 8, 128, 4000), (24, 4, 256, 900)])
def test_attention_int8_planes_equal_the_quantisation_launch(hq, hkv, dim, length):
    """8B and 27B attention shapes in bf16: the planes written by the attention launch are those
    ``_quant_x_kernel`` makes of its output, and the o_proj mat-vec on them gives the same bits."""
    g = torch.Generator(device=DEV).manual_seed(1)
    q = torch.randn(hq, dim, device=DEV, generator=g).bfloat16()
    kc = torch.randn(hkv, 4096, dim, device=DEV, generator=g).bfloat16()
    vc = torch.randn(hkv, 4096, dim, device=DEV, generator=g).bfloat16()
    seq = torch.tensor([length], device=DEV)
    planes = tlin.quant_x_planes(1, hq * dim, torch.bfloat16, DEV)
    assert planes is not None
    planes.fill_(-7)
    o = decode_attention(q, kc, vc, seq, dim ** -0.5, q8_out=planes)
    kw = hq * dim // 16
    expect = torch.empty_like(planes)
    x = o.reshape(1, -1)
    tlin._quant_x_kernel[(1, triton.cdiv(kw, 64))](x, x.stride(0), x, expect, hq * dim, kw, 1e-6, 0.0, BLOCK_W=64,
                                                    NORM=False, NORM_QWEN3=True, NORM_BLOCK=64, USE_GDC=False)
    torch.cuda.synchronize()
    assert torch.equal(planes, expect)
    codes = torch.randint(0, 256, (hq * dim, hq * dim // 4), dtype=torch.uint8, device=DEV, generator=g)
    scales = (torch.rand(hq * dim, hq * dim // 128, device=DEV, generator=g) * 0.02).half()
    for cfg in [("q8p", 2, 0, 8, 1), ("q8", 4, 4096, 1, 2), ("q8c", 8, 1024, 1, 4)]:
        plain = tlin.ternary_matvec(x, codes, scales, 128, config=cfg)
        given = tlin.ternary_matvec(x, codes, scales, 128, config=cfg, x_int8=planes)
        assert torch.equal(plain, given), cfg


def _graph_tokens(md, monkeypatch, attn_q8: str, sampler: str, n: int = 32) -> list[int]:
    monkeypatch.setenv("TERNARY_ATTN_Q8", attn_q8)
    monkeypatch.setenv("TERNARY_FUSED_SAMPLING", sampler)
    model = Qwen3Model.from_model_data(md, DEV, dtype=torch.bfloat16, max_positions=256)
    model.embed = graph_safe_embedding(model.embed)
    step = fused_qwen3_step(model)
    assert step is not None
    dec = GraphDecoder(step, model.vocab_size, DEV)
    assert (dec.sampler is not None) == (sampler == "1")
    prompt = [5, 17, 250, 3, 99, 42, 7, 120]
    ids = torch.tensor(prompt, device=DEV)
    with torch.inference_mode():
        dec.configure(GenerationSettings(temperature=0.0, repetition_penalty=1.1), prompt)
        first = dec.sample_first(model.forward(ids, torch.arange(len(prompt), device=DEV), last_only=True)[-1])
        out = [first] + list(dec.tokens(first, len(prompt), n - 1))
    assert dec.use_graph and dec.graph_replays == n - 1, dec.fallback_reason
    return out


def test_fused_step_tokens_unchanged_by_the_folded_launches(monkeypatch):
    """bf16, int8 decode activations (the default): the graph-decoded greedy tokens with the attention's int8
    output and the one-launch sampler equal those with the separate launches."""
    cfg = mf.tiny_qwen3_config(num_hidden_layers=4)
    md = mf.hf_model_to_model_data(mf.make_ternary_hf_model(cfg, seed=7), mf.tiny_tokenizer())
    base = _graph_tokens(md, monkeypatch, "0", "0")
    assert _graph_tokens(md, monkeypatch, "1", "0") == base
    assert _graph_tokens(md, monkeypatch, "1", "1") == base
