"""Offload wrappers and the decode runner on the CPU: same numbers as the plain model."""

from __future__ import annotations

import pytest
import torch

from runtime.generation import GenerationSettings
from runtime.gpu_decode import GraphDecoder
from runtime.offload import HostComputedLayer, LayerStreamer, Placement
from runtime.planner import ModelSizes, plan_memory
from runtime.sampling import candidates, penalize
from tests.planner.conftest import build_tiny, tiny_model_data

PROMPT = [5, 17, 250, 3, 99, 42, 7]


def run_sequence(model, steps: int = 6) -> list[torch.Tensor]:
    """Prefill the prompt, then greedy-decode ``steps`` tokens one at a time; all logits."""
    ids = torch.tensor(PROMPT)
    out = [model.forward(ids, torch.arange(len(PROMPT)), last_only=True)[-1]]
    pos = len(PROMPT)
    for _ in range(steps):
        tok = torch.argmax(out[-1]).reshape(1)
        out.append(model.forward(tok, torch.tensor([pos]))[-1])  # kv_len=None: the graph-shaped step
        pos += 1
    return out


def assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_host_computed_layers_match(tiny_md):
    ref = run_sequence(build_tiny(tiny_md))
    model = build_tiny(tiny_md)
    for i in (2, 3):
        model.layers[i] = HostComputedLayer(model.layers[i], "cpu")
    got = run_sequence(model)
    assert_same(ref, got)
    # the wrapped layers used their own cache, not the model's
    assert model.layers[2]._cache is not None and float(model.layers[2]._cache.k.abs().sum()) > 0
    assert float(model.cache.k[2].abs().sum()) == 0.0


def test_streamed_layers_match_and_share_two_slots(tiny_md):
    ref = run_sequence(build_tiny(tiny_md))
    model = build_tiny(tiny_md)
    streamer = LayerStreamer("cpu")
    for i in (1, 2, 3):
        model.layers[i] = streamer.adopt(model.layers[i])
    streamer.finish()
    assert len(streamer.slots) == 2 and not streamer.resident
    slot0 = streamer.slots[0]
    lo, hi = slot0.data_ptr(), slot0.data_ptr() + slot0.numel()
    for i in (1, 3):  # streamed layers 0 and 2 of the streamer run from slot 0
        ptrs = [b.data_ptr() for n, b in model.layers[i].block.named_buffers() if "norm" not in n]
        assert ptrs and all(lo <= p < hi for p in ptrs)
    assert streamer.host_bytes >= sum(b.numel() * b.element_size() for b in model.layers[2].block.buffers())
    assert_same(ref, run_sequence(model))
    assert_same(ref, run_sequence(build_tiny(tiny_md)))  # and again (slots were overwritten in between)


def test_streamer_requires_finish(tiny_md):
    model = build_tiny(tiny_md)
    streamer = LayerStreamer("cpu")
    model.layers[3] = streamer.adopt(model.layers[3])
    with pytest.raises(RuntimeError, match="finish"):
        run_sequence(model, steps=0)


def test_placement_from_plan():
    # a budget so small that the planner must put layers on the host (tied: the table must stay)
    tiny_md = tiny_model_data(tie=True)
    kw = dict(ctx_cap=256, min_margin_bytes=0, margin_fraction=0.0, prefill_chunk=16, offload_mode="stream")
    full = plan_memory(tiny_md, 2**40, **kw)
    layer = ModelSizes.from_model_data(tiny_md).layer_bytes[0]
    plan = plan_memory(tiny_md, full.predicted.total - 1, **kw)  # one byte short of everything on the GPU
    assert plan.layers_on_cpu == 3 and plan.predicted.offload_staging == 2 * layer  # 3 streamed: two slots
    assert plan.layers_on_cpu > 0
    ref = run_sequence(build_tiny(tiny_md))
    model = build_tiny(tiny_md)
    pl = Placement(plan, "cpu")
    for i in range(len(model.layers)):
        model.layers[i] = pl.wrap_layer(i, model.layers[i])
    pl.finish()
    assert pl.graph_safe == (plan.embedding_device == "gpu")
    assert_same(ref, run_sequence(model))


def test_decoder_greedy_matches_manual_loop(tiny_md):
    model = build_tiny(tiny_md)
    ref = [int(torch.argmax(x)) for x in run_sequence(model, steps=8)]
    model = build_tiny(tiny_md)
    logits = model.forward(torch.tensor(PROMPT), torch.arange(len(PROMPT)), last_only=True)[-1]
    dec = GraphDecoder(lambda t, p: model.forward(t, p)[-1], model.vocab_size, "cpu")
    dec.configure(GenerationSettings(temperature=0.0), PROMPT)
    first = dec.sample_first(logits)
    toks = [first] + list(dec.tokens(first, len(PROMPT), 8))
    assert toks == ref
    assert int(dec.pos) == len(PROMPT) + 8


def test_decoder_sampling_is_seeded(tiny_md):
    def run(seed):
        model = build_tiny(tiny_md)
        logits = model.forward(torch.tensor(PROMPT), torch.arange(len(PROMPT)), last_only=True)[-1]
        dec = GraphDecoder(lambda t, p: model.forward(t, p)[-1], model.vocab_size, "cpu")
        dec.configure(GenerationSettings(temperature=1.5, top_k=50, top_p=0.95, seed=seed), PROMPT)
        first = dec.sample_first(logits)
        return [first] + list(dec.tokens(first, len(PROMPT), 10))

    a, b, c = run(1), run(1), run(2)
    assert a == b and a != c


@pytest.mark.parametrize("top_k,top_p,min_p,rep", [(0, 1.0, 0.0, 1.0), (20, 0.85, 0.0, 1.0), (0, 0.7, 0.05, 1.3),
                                                   (40, 0.9, 0.1, 1.1), (5, 1.0, 0.0, 0.8)])
def test_decoder_distribution_matches_hf_warpers(top_k, top_p, min_p, rep):
    """The decoder's candidates (runtime.sampling, the engine's sampler too) = transformers' processors."""
    from transformers.generation.logits_process import (
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    g = torch.Generator().manual_seed(top_k * 7 + int(top_p * 100))
    vocab = 300
    logits = torch.randn(vocab, generator=g) * 3
    prompt = [1, 2, 3, 50, 51]
    s = GenerationSettings(temperature=0.7, top_k=top_k, top_p=top_p, min_p=min_p, repetition_penalty=rep,
                           presence_penalty=0.0, frequency_penalty=0.0, seed=0)
    warpers = [RepetitionPenaltyLogitsProcessor(rep), TemperatureLogitsWarper(0.7)] + \
        ([TopKLogitsWarper(top_k)] if top_k else []) + [TopPLogitsWarper(top_p)] + \
        ([MinPLogitsWarper(min_p)] if min_p else [])
    x = logits[None].clone()
    for w in warpers:
        x = w(torch.tensor([prompt]), x)
    want = torch.softmax(x[0], -1)
    dec = GraphDecoder(lambda t, p: logits, vocab, "cpu")
    dec.configure(s, prompt)
    sampler = dec.sampler
    probs, idx = candidates(sampler.scaled(logits), sampler.params, sampler.plan)
    got = torch.zeros(vocab)
    got[idx if idx is not None else torch.arange(vocab)] = probs / probs.sum()
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_decoder_penalties_follow_hf_and_openai():
    vocab = 64
    logits = torch.randn(vocab, generator=torch.Generator().manual_seed(3))
    s = GenerationSettings(temperature=0.0, repetition_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.25)
    dec = GraphDecoder(lambda t, p: logits, vocab, "cpu")
    dec.configure(s, [1, 2])
    for t in (7, 7, 9):
        dec.sampler.record(torch.tensor([t]))
    seen = torch.zeros(vocab, dtype=torch.bool)
    seen[[1, 2, 7, 9]] = True
    want = torch.where(seen, torch.where(logits < 0, logits * 1.5, logits / 1.5), logits)
    counts = torch.zeros(vocab)
    counts[7], counts[9] = 2, 1
    want = want - 0.5 * (counts > 0).float() - 0.25 * counts
    got = penalize(logits, dec.sampler.seen, dec.sampler.counts, dec.sampler.params, dec.sampler.plan)
    torch.testing.assert_close(got, want)
