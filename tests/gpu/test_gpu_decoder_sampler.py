"""The sampler's fused kernel (``runtime.kernels.triton.sampling.DecoderSampler``) on the GPU at the Bonsai vocabulary
against the torch reference (``runtime.sampling``): same fp32 numbers, same candidates, same token and state, same
graph-decoded tokens."""

from __future__ import annotations

import pytest
import torch

from runtime.generation import GenerationSettings
from runtime.gpu_decode import GraphDecoder
from runtime.model.qwen3 import Qwen3Model
from runtime.model.qwen3_step import qwen3_decode_step as fused_qwen3_step
from runtime.sampling import TokenSampler, candidates, penalize
from tests import model_factory as mf

pytestmark = pytest.mark.gpu
DEV = torch.device("cuda", 0)
V = 151669  # the Bonsai vocabulary


@pytest.mark.parametrize("settings", [GenerationSettings(temperature=0.0),
                                      GenerationSettings(temperature=0.7, top_k=40, top_p=0.9, min_p=0.02,
                                                         repetition_penalty=1.3, presence_penalty=0.4,
                                                         frequency_penalty=0.25)])
def test_decoder_sampler_equals_the_reference(settings):
    g = torch.Generator(device=DEV).manual_seed(0)
    for trial in range(4):
        logits = torch.randn(V, device=DEV, generator=g) * 4
        if trial == 3:
            logits[[11, 90000, 151000]] = logits.max() + 1  # a three-way tie across blocks: the first wins

        def step(t, p, logits=logits):
            return logits

        ref = GraphDecoder(step, V, DEV, use_graph=False, fused_sampling=False)
        fused = GraphDecoder(step, V, DEV, use_graph=False)
        assert fused.sampler.kernel is not None and ref.sampler.kernel is None  # on by default on CUDA
        for d in (ref, fused):
            d.configure(settings, [])
            d.sampler.seen.copy_(torch.rand(V, device=DEV, generator=torch.Generator(device=DEV).manual_seed(trial)) < 0.3)
            d.sampler.counts.copy_((torch.arange(V, device=DEV) % 97 == trial).to(torch.int32))
            d.pos.fill_(100)
        s = fused.sampler
        scaled = s.scaled(logits)
        assert torch.equal(scaled, ref.sampler.scaled(logits))
        assert torch.equal(scaled, penalize(logits, s.seen, s.counts, s.params) / s.params[0])
        (p1, i1), (p2, i2) = (candidates(x, s.params, s.plan) for x in (scaled, ref.sampler.scaled(logits)))
        assert torch.equal(p1, p2) and (i1 is i2 is None or torch.equal(i1, i2))
        if not s.plan.greedy:
            continue
        ref._body()
        fused._body()
        assert int(fused.tok) == int(ref.tok) and int(fused.pos) == int(ref.pos) == 101
        torch.cuda.synchronize()
        assert int(fused._host[100 % 2]) == int(fused.tok)  # written by the kernel into pinned host memory
        assert torch.equal(fused.sampler.seen, ref.sampler.seen)
        assert torch.equal(fused.sampler.counts, ref.sampler.counts)
        if trial == 3:
            assert int(fused.tok) == 11


def test_seeded_sampling_repeats_on_the_gpu():
    logits = torch.randn(V, device=DEV, generator=torch.Generator(device=DEV).manual_seed(1)) * 3
    settings = GenerationSettings(temperature=0.8, top_k=50, top_p=0.9, seed=123)
    runs = []
    for _ in range(2):
        s = TokenSampler(V, DEV)
        s.configure(settings, [1, 2, 3])
        runs.append([s.sample(logits) for _ in range(8)])
    assert runs[0] == runs[1] and len(set(runs[0])) > 1


def _graph_tokens(md, monkeypatch, sampler: str, n: int = 32) -> list[int]:
    monkeypatch.setenv("TERNARY_FUSED_SAMPLING", sampler)
    model = Qwen3Model.from_model_data(md, DEV, dtype=torch.bfloat16, max_positions=256)
    step = fused_qwen3_step(model)
    assert step is not None
    dec = GraphDecoder(step, model.vocab_size, DEV)
    assert (dec.sampler.kernel is not None) == (sampler == "1")
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
