"""The one sampler (``runtime.sampling``) against transformers' logits processors, its draws against the
distribution they define, and stop strings."""

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
    SamplingPlan,
    StopStringMatcher,
    TokenSampler,
    candidates,
    penalize,
    sampling_values,
    token_logprobs,
)

VOCAB = 1000


def _scores(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(VOCAB, generator=g) * 3


def _ids(seed: int = 1, n: int = 40) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (1, n), generator=g)


def _settings(**kw) -> GenerationSettings:
    base = dict(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                presence_penalty=0.0, frequency_penalty=0.0)
    base.update(kw)
    return GenerationSettings(**base)


def _params(**kw) -> torch.Tensor:
    return torch.tensor(sampling_values(_settings(**kw)))


def _distribution(scaled: torch.Tensor, params: torch.Tensor, plan: SamplingPlan) -> torch.Tensor:
    """The candidates as a full-vocabulary probability vector (what the race draws from)."""
    probs, idx = candidates(scaled, params, plan)
    full = torch.zeros(VOCAB)
    full[idx if idx is not None else torch.arange(VOCAB)] = probs
    return full / full.sum()


def _hf_distribution(scores: torch.Tensor, *warpers) -> torch.Tensor:
    x = scores[None].clone()
    for w in warpers:
        x = w(_ids(), x)
    return torch.softmax(x[0], -1)


@pytest.mark.parametrize("t", [0.3, 0.7, 1.0, 1.5])
def test_temperature_matches_hf(t):
    s = _scores()
    sampler = TokenSampler(VOCAB, "cpu", fused=False)
    sampler.configure(_settings(temperature=t), [])
    expect = TemperatureLogitsWarper(t)(_ids(), s[None].clone())[0]
    torch.testing.assert_close(sampler.scaled(s), expect, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("k", [1, 5, 20, 999])
def test_top_k_matches_hf(k):
    s = _scores(2)
    got = _distribution(s, _params(top_k=k), SamplingPlan(greedy=False, top_k=k))
    torch.testing.assert_close(got, _hf_distribution(s, TopKLogitsWarper(k)), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.85, 0.99])
def test_top_p_matches_hf(p):
    s = _scores(3)
    got = _distribution(s, _params(top_p=p), SamplingPlan(greedy=False, top_p=True))
    torch.testing.assert_close(got, _hf_distribution(s, TopPLogitsWarper(p)), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("p", [0.01, 0.1, 0.5])
def test_min_p_matches_hf(p):
    s = _scores(4)
    got = _distribution(s, _params(min_p=p), SamplingPlan(greedy=False, min_p=True))
    torch.testing.assert_close(got, _hf_distribution(s, MinPLogitsWarper(p)), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("t,k,p,m", [(0.7, 20, 0.85, 0.05), (1.3, 0, 0.9, 0.0), (0.5, 40, 1.0, 0.1), (1.0, 0, 1.0, 0.02)])
def test_the_whole_chain_matches_hf_in_hf_order(t, k, p, m):
    s = _scores(5)
    sampler = TokenSampler(VOCAB, "cpu", fused=False)
    sampler.configure(_settings(temperature=t, top_k=k, top_p=p, min_p=m), [])
    got = _distribution(sampler.scaled(s), sampler.params, sampler.plan)
    warpers = [TemperatureLogitsWarper(t)] + ([TopKLogitsWarper(k)] if k else []) + [TopPLogitsWarper(p)] + \
        ([MinPLogitsWarper(m)] if m else [])
    torch.testing.assert_close(got, _hf_distribution(s, *warpers), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("penalty", [0.8, 1.1, 1.5])
def test_repetition_penalty_matches_hf(penalty):
    s = _scores(5)
    ids = _ids(6)
    seen = torch.zeros(VOCAB, dtype=torch.bool)
    seen[ids[0]] = True
    got = penalize(s, seen, torch.zeros(VOCAB, dtype=torch.int32), _params(repetition_penalty=penalty))
    torch.testing.assert_close(got, RepetitionPenaltyLogitsProcessor(penalty)(ids, s[None].clone())[0])


def test_presence_and_frequency_penalty_openai_semantics():
    logits = torch.tensor([1.0, 2.0, -1.0, 0.5])
    counts = torch.tensor([0, 3, 1, 0], dtype=torch.int32)
    params = torch.tensor(sampling_values(_settings(presence_penalty=0.5, frequency_penalty=0.25)))
    out = penalize(logits, counts > 0, counts, params, SamplingPlan(presence_frequency=True))
    assert torch.allclose(out, torch.tensor([1.0, 2.0 - 0.5 - 0.75, -1.0 - 0.5 - 0.25, 0.5]))


def _sampler(settings: GenerationSettings, prompt=(), vocab: int = VOCAB) -> TokenSampler:
    s = TokenSampler(vocab, "cpu", fused=False)
    s.configure(settings, list(prompt))
    return s


def test_sampler_greedy_is_argmax_after_penalties():
    logits = torch.tensor([0.0, 5.0, 4.9, 1.0])
    s = _sampler(_settings(temperature=0.0, repetition_penalty=1.1), [1], vocab=4)
    assert s.sample(logits) == 2  # 5.0 / 1.1 < 4.9
    s2 = _sampler(_settings(temperature=0.0, presence_penalty=0.2), vocab=4)
    s2.record(torch.tensor([1]))
    assert s2.sample(logits) == 2
    assert int(s2.counts[2]) == 1 and bool(s2.seen[2])  # sample() records what it drew


def test_sampler_draws_follow_the_distribution():
    """The exponential race draws from the candidates' distribution: frequencies over many draws match the
    probabilities HF's warpers define (total variation well below sampling noise of a wrong distribution)."""
    torch.manual_seed(0)
    logits = torch.randn(VOCAB) * 2
    st = _settings(temperature=0.7, top_k=20, top_p=0.85, min_p=0.05, seed=3)
    expect = _hf_distribution(logits, TemperatureLogitsWarper(0.7), TopKLogitsWarper(20), TopPLogitsWarper(0.85),
                              MinPLogitsWarper(0.05))
    sampler = _sampler(st)
    draws = 4000
    hist = torch.zeros(VOCAB)
    for _ in range(draws):
        hist[sampler.next_token(logits)] += 1  # next_token: no penalty state changes between draws
    assert set(torch.nonzero(hist).flatten().tolist()) <= set(torch.nonzero(expect > 0).flatten().tolist())
    assert int((expect > 0).sum()) > 3  # the test can tell sampling from greedy
    assert 0.5 * (hist / draws - expect).abs().sum() < 0.04


def test_top_k_never_sorts_the_vocabulary(monkeypatch):
    def no_sort(*a, **k):
        raise AssertionError("top-k must not sort the whole vocabulary")

    logits = _scores(7)
    sampler = _sampler(_settings(temperature=0.7, top_k=20, top_p=0.85, min_p=0.05, seed=1))
    monkeypatch.setattr(torch, "sort", no_sort)
    assert 0 <= sampler.sample(logits) < VOCAB
    plain = _sampler(_settings(temperature=0.7, seed=1))  # no truncation: no sort either
    assert 0 <= plain.sample(logits) < VOCAB


def test_sampler_seed_determinism():
    logits = torch.randn(VOCAB)
    a = [_sampler(_settings(seed=42)).sample(logits) for _ in range(5)]
    assert len(set(a)) == 1
    seq1, seq2 = _sampler(_settings(seed=7)), _sampler(_settings(seed=7))
    assert [seq1.sample(logits) for _ in range(20)] == [seq2.sample(logits) for _ in range(20)]
    seq3 = _sampler(_settings(seed=8))
    seq1 = _sampler(_settings(seed=7))
    assert [seq1.sample(logits) for _ in range(20)] != [seq3.sample(logits) for _ in range(20)]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_allowed_mask_applies_before_penalties_and_sampling(temperature):
    logits = _scores(8)
    allowed = torch.zeros(VOCAB, dtype=torch.bool)
    allowed[torch.arange(0, VOCAB, 2)] = True  # only even ids
    s = _sampler(_settings(temperature=temperature, top_k=5, repetition_penalty=1.3, seed=2))
    toks = [s.sample(logits, allowed) for _ in range(30)]
    assert all(t % 2 == 0 for t in toks)
    if temperature == 0.0:
        best_even = int(torch.argmax(logits.masked_fill(~allowed, float("-inf"))))
        assert toks[0] == best_even
    short = torch.zeros(10, dtype=torch.bool)
    short[3] = True  # a shorter mask allows nothing beyond it
    assert s.sample(logits, short) == 3


def test_token_logprobs_are_the_raw_log_softmax():
    logits = _scores(9)
    lp = torch.log_softmax(logits, -1)
    chosen, top = token_logprobs(logits, 17, 5)
    assert chosen == pytest.approx(float(lp[17]), abs=1e-6)
    assert [i for i, _ in top] == torch.topk(lp, 5).indices.tolist()
    assert [v for _, v in top] == sorted((v for _, v in top), reverse=True)
    assert token_logprobs(logits, 17, 0)[1] == []


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
