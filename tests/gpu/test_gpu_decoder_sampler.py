"""The graph decoder's one-launch sampler (``runtime.kernels.triton.sampling.DecoderSampler``) on the GPU at the Bonsai vocabulary,
against the eager torch ops it replaces: same fp32 numbers, same token and state, same graph-decoded tokens."""

from __future__ import annotations

import pytest
import torch

from runtime.generation import GenerationSettings
from runtime.gpu_decode import GraphDecoder, fused_qwen3_step
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
        torch.cuda.synchronize()
        assert int(fused._host[100 % 2]) == int(fused.tok)  # written by the kernel into pinned host memory
        assert torch.equal(fused.seen, ref.seen) and torch.equal(fused.counts, ref.counts)
        if trial == 3 and params[3] == 1.0:
            assert int(fused.tok) == 11


def _graph_tokens(md, monkeypatch, sampler: str, n: int = 32) -> list[int]:
    monkeypatch.setenv("TERNARY_FUSED_SAMPLING", sampler)
    model = Qwen3Model.from_model_data(md, DEV, dtype=torch.bfloat16, max_positions=256)
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


def test_graph_decoded_tokens_unchanged_by_the_one_launch_sampler(monkeypatch):
    """bf16, int8 decode activations (the default), repetition penalty: the graph-decoded greedy tokens with the
    one-launch sampler (token written straight to pinned host memory) equal those of the eager torch sampler."""
    cfg = mf.tiny_qwen3_config(num_hidden_layers=4)
    md = mf.hf_model_to_model_data(mf.make_ternary_hf_model(cfg, seed=7), mf.tiny_tokenizer())
    assert _graph_tokens(md, monkeypatch, "1") == _graph_tokens(md, monkeypatch, "0")
