"""Sampling transforms against transformers' logits processors, and the Sampler's behaviour."""

from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from runtime.generation import GenerationSettings
from runtime.sampling import (
    Sampler,
    StopStringMatcher,
    apply_min_p,
    apply_presence_frequency,
    apply_repetition_penalty,
    apply_temperature,
    apply_top_k,
    apply_top_p,
)

VOCAB = 1000


def _scores(seed: int = 0, rows: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, VOCAB, generator=g) * 3


def _ids(seed: int = 1, n: int = 40) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (3, n), generator=g)


def _same(a: torch.Tensor, b: torch.Tensor) -> None:
    assert torch.equal(torch.isinf(a), torch.isinf(b))
    finite = ~torch.isinf(a)
    assert torch.allclose(a[finite], b[finite], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("t", [0.3, 0.7, 1.0, 1.5])
def test_temperature_matches_hf(t):
    s = _scores()
    _same(apply_temperature(s, t), TemperatureLogitsWarper(t)(_ids(), s.clone()))


@pytest.mark.parametrize("k", [1, 5, 20, 999])
def test_top_k_matches_hf(k):
    s = _scores(2)
    _same(apply_top_k(s, k), TopKLogitsWarper(k)(_ids(), s.clone()))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.85, 0.99])
def test_top_p_matches_hf(p):
    s = _scores(3)
    _same(apply_top_p(s, p), TopPLogitsWarper(p)(_ids(), s.clone()))


@pytest.mark.parametrize("p", [0.01, 0.1, 0.5])
def test_min_p_matches_hf(p):
    s = _scores(4)
    _same(apply_min_p(s, p), MinPLogitsWarper(p)(_ids(), s.clone()))


@pytest.mark.parametrize("penalty", [0.8, 1.1, 1.5])
def test_repetition_penalty_matches_hf(penalty):
    s = _scores(5)
    ids = _ids(6)
    seen = torch.zeros(3, VOCAB, dtype=torch.bool)
    seen.scatter_(1, ids, True)
    _same(apply_repetition_penalty(s, seen, penalty), RepetitionPenaltyLogitsProcessor(penalty)(ids, s.clone()))


def test_presence_and_frequency_penalty_openai_semantics():
    logits = torch.tensor([1.0, 2.0, -1.0, 0.5])
    counts = torch.tensor([0, 3, 1, 0])
    out = apply_presence_frequency(logits, counts, presence=0.5, frequency=0.25)
    assert torch.allclose(out, torch.tensor([1.0, 2.0 - 0.5 - 0.75, -1.0 - 0.5 - 0.25, 0.5]))


def _settings(**kw) -> GenerationSettings:
    base = dict(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                presence_penalty=0.0, frequency_penalty=0.0)
    base.update(kw)
    return GenerationSettings(**base)


def test_sampler_greedy_is_argmax_after_penalties():
    logits = torch.tensor([0.0, 5.0, 4.9, 1.0])
    s = Sampler(_settings(temperature=0.0, repetition_penalty=1.1), 4, prompt_ids=[1])
    assert s.sample(logits) == 2  # 5.0 / 1.1 < 4.9
    s2 = Sampler(_settings(temperature=0.0, presence_penalty=0.2), 4, prompt_ids=[])
    s2.observe(1)
    assert s2.sample(logits) == 2


def test_sampler_top_k_shortcut_gives_the_full_vocabulary_distribution():
    """The Sampler warps only the top-k candidates; that must equal warping the whole vocabulary."""
    torch.manual_seed(0)
    logits = torch.randn(VOCAB) * 2
    st = _settings(temperature=0.7, top_k=20, top_p=0.85, min_p=0.05)
    sampler = Sampler(st, VOCAB, prompt_ids=[])
    full = torch.softmax(sampler.warp(logits), -1)
    kth = torch.topk(logits, 20).values[-1]
    cand = torch.nonzero(logits >= kth).flatten()
    sub = torch.softmax(sampler.warp(logits[cand]), -1)
    rebuilt = torch.zeros(VOCAB)
    rebuilt[cand] = sub
    assert torch.allclose(rebuilt, full, atol=1e-6)
    # and the empirical distribution of sample() follows it
    draws = torch.tensor([Sampler(_settings(temperature=0.7, top_k=20, top_p=0.85, min_p=0.05, seed=i), VOCAB, [])
                          .sample(logits) for i in range(400)])
    assert set(draws.tolist()) <= set(torch.nonzero(full > 0).flatten().tolist())
    top = int(torch.argmax(full))
    assert abs((draws == top).float().mean().item() - full[top].item()) < 0.1


def test_sampler_seed_determinism():
    logits = torch.randn(VOCAB)
    a = [Sampler(_settings(seed=42), VOCAB, []).sample(logits) for _ in range(5)]
    assert len(set(a)) == 1
    seq1, seq2 = Sampler(_settings(seed=7), VOCAB, []), Sampler(_settings(seed=7), VOCAB, [])
    assert [seq1.sample(logits) for _ in range(20)] == [seq2.sample(logits) for _ in range(20)]
    seq3 = Sampler(_settings(seed=8), VOCAB, [])
    seq1 = Sampler(_settings(seed=7), VOCAB, [])
    assert [seq1.sample(logits) for _ in range(20)] != [seq3.sample(logits) for _ in range(20)]


def test_stop_string_split_across_pieces():
    m = StopStringMatcher(["<END>", "stop here"])
    out = [m.feed(x) for x in ["Hello wor", "ld <E", "N"]]
    assert "".join(out) == "Hello world "
    assert not m.stopped
    assert m.feed("D> trailing") == ""
    assert m.stopped


def test_stop_string_false_start_is_released():
    m = StopStringMatcher(["<END>"])
    assert m.feed("a <EN") == "a "
    assert m.feed("X") == "<ENX"
    assert m.flush() == ""
    m2 = StopStringMatcher(["\n\n"])
    assert m2.feed("line\n") == "line"
    assert m2.flush() == "\n"


def test_stop_string_earliest_match_wins():
    m = StopStringMatcher(["bb", "abc"])
    assert m.feed("xxabcbb") == "xx"
    assert m.stopped
