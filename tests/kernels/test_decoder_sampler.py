"""The sampler's fused kernel (``runtime.kernels.triton.sampling.DecoderSampler``) against the torch reference
(``runtime.sampling``), under the Triton interpreter: the same fp32 penalized and scaled logits, the same candidate
set, the same greedy token (ties included) and the same decode-loop state."""

from __future__ import annotations

import pytest
import torch

from runtime.generation import GenerationSettings
from runtime.gpu_decode import GraphDecoder
from runtime.kernels.triton.sampling import DECODER_BLOCK, DecoderSampler
from runtime.sampling import P_TEMPERATURE, SamplingPlan, TokenSampler, candidates, penalize

V = 3 * DECODER_BLOCK + 77  # four programs, the last one partly masked


def _state(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(V, generator=g) * 3
    seen = torch.rand(V, generator=g) < 0.2
    counts = torch.where(torch.rand(V, generator=g) < 0.05, torch.randint(1, 4, (V,), generator=g), 0).to(torch.int32)
    return logits, seen, counts


def _decoder(fused: bool, step=None) -> GraphDecoder:
    return GraphDecoder(step or (lambda t, p: None), V, "cpu", use_graph=False, fused_sampling=fused)


@pytest.mark.parametrize("rep,presence,freq", [(1.0, 0.0, 0.0), (1.3, 0.4, 0.25), (0.7, -0.2, 0.1)])
def test_scaled_logits_and_candidates_equal_the_reference(rep: float, presence: float, freq: float) -> None:
    logits, seen, counts = _state(1)
    params = torch.tensor([0.7, 0.9, 0.02, rep, presence, freq])
    settings = GenerationSettings(temperature=0.7, top_k=40, top_p=0.9, min_p=0.02, repetition_penalty=rep,
                                  presence_penalty=presence, frequency_penalty=freq)
    ref = TokenSampler(V, "cpu", fused=False)
    ref.configure(settings, [])
    ref.seen.copy_(seen)
    ref.counts.copy_(counts)
    expect = penalize(logits, seen, counts, params, ref.plan) / params[P_TEMPERATURE]
    assert torch.equal(ref.scaled(logits), expect)
    got = DecoderSampler(V, "cpu").scaled(logits, seen, counts, params)
    assert torch.equal(got, expect)
    # every plan the sampler can run picks the same candidates from both
    for plan in (ref.plan, SamplingPlan(greedy=False, top_p=True), SamplingPlan(greedy=False, min_p=True)):
        (p1, i1), (p2, i2) = candidates(got, params, plan), candidates(expect, params, plan)
        assert torch.equal(p1, p2) and (i1 is i2 is None or torch.equal(i1, i2))


def test_neutral_penalties_are_bit_identical_when_skipped() -> None:
    """The reference skips neutral penalties (CPU speed); the kernel always computes them: same numbers."""
    logits, seen, counts = _state(4)
    logits[[3, 9]] = float("-inf")
    params = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    skipped = penalize(logits, seen, counts, params, SamplingPlan())
    assert torch.equal(skipped, penalize(logits, seen, counts, params))
    assert torch.equal(skipped, DecoderSampler(V, "cpu").scaled(logits, seen, counts, params))


@pytest.mark.parametrize("where", [5, DECODER_BLOCK + 3, V - 1])
def test_greedy_step_picks_the_reference_argmax_and_advances_the_state(where: int) -> None:
    logits, seen, counts = _state(2)
    logits[where] = 50.0  # the winner, in the first, a middle and the masked last block
    logits[where + 1 if where + 1 < V else 0] = 50.0 / 1.5  # a seen rival the penalty must not favour
    seen[where] = True
    settings = GenerationSettings(temperature=0.0, repetition_penalty=1.5, presence_penalty=0.3, frequency_penalty=0.2)
    ref, fused = _decoder(False), _decoder(True)
    assert ref.sampler.kernel is None and fused.sampler.kernel is not None
    for d in (ref, fused):
        d.configure(settings, [])
        d.sampler.seen.copy_(seen)
        d.sampler.counts.copy_(counts)
        d.tok.fill_(-1)
        d.pos.fill_(41)
    ref.step = fused.step = lambda t, p: logits
    ref._body()
    fused._body()
    assert int(fused.tok) == int(ref.tok) and int(fused.pos) == int(ref.pos) == 42
    assert int(ref.tok) == int(torch.argmax(penalize(logits, seen, counts, ref.sampler.params)))
    assert torch.equal(fused.sampler.seen, ref.sampler.seen) and torch.equal(fused.sampler.counts, ref.sampler.counts)
    assert int(fused.sampler.kernel.counter) == 0  # the arrival counter is reset for the next step


@pytest.mark.parametrize("fused", [False, True])
def test_greedy_ties_take_the_first_index_like_torch_argmax(fused: bool) -> None:
    logits = torch.full((V,), -3.0)
    logits[[7, DECODER_BLOCK + 1, 2 * DECODER_BLOCK]] = 2.0  # equal maxima in three blocks
    dec = _decoder(fused, lambda t, p: logits)
    dec.configure(GenerationSettings(temperature=0.0), [])
    dec._body()
    assert int(dec.tok) == 7 == int(torch.argmax(logits))
    assert dec.sample_first(logits) == 7


def test_fused_and_eager_decoders_give_the_same_tokens() -> None:
    """A toy step whose logits depend on the token and position: 12 greedy tokens with penalties."""
    table = torch.randn(V, V // 64, generator=torch.Generator().manual_seed(3))
    proj = torch.randn(V // 64, V, generator=torch.Generator().manual_seed(4))

    def step(tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return (table[tok[0]] * (1 + 0.01 * pos.float())) @ proj

    settings = GenerationSettings(temperature=0.0, repetition_penalty=1.2, presence_penalty=0.3)
    runs = []
    for fused in (False, True):
        dec = _decoder(fused, step)
        dec.configure(settings, [1, 2, 3])
        runs.append(list(dec.tokens(5, 3, 12)))
    assert runs[0] == runs[1] and len(set(runs[0])) > 1


def test_fused_and_eager_samplers_draw_the_same_tokens_for_a_seed() -> None:
    """Sampling (not greedy): the kernel's scaled logits feed the same candidates and the same race."""
    logits, _, _ = _state(5)
    settings = GenerationSettings(temperature=0.8, top_k=50, top_p=0.9, min_p=0.01, repetition_penalty=1.2,
                                  frequency_penalty=0.1, seed=11)
    runs = []
    for fused in (False, True):
        s = TokenSampler(V, "cpu", fused=fused)
        s.configure(settings, [1, 2, 3])
        runs.append([s.sample(logits) for _ in range(6)])
    assert runs[0] == runs[1] and len(set(runs[0])) > 1


def test_greedy_rows_equal_one_greedy_step_per_row() -> None:
    """Continuous batching's one launch for every greedy row: each row's token, position, ``seen`` and ``counts``
    equal a ``greedy_step`` of that row alone (own penalties, winners in different blocks, a padded logits width
    and parameter rows), and every row's arrival counter is reset."""
    rows, width = 3, V + 13
    kernel = DecoderSampler(V, "cpu")
    logits = torch.randn(rows, width, generator=torch.Generator().manual_seed(5)) * 3
    seen, counts = torch.zeros(rows, V, dtype=torch.bool), torch.zeros(rows, V, dtype=torch.int32)
    params = torch.zeros(rows, 8)
    for r, (where, rep) in enumerate([(5, 1.5), (DECODER_BLOCK + 3, 1.0), (V - 1, 2.0)]):
        _, seen[r], counts[r] = _state(10 + r)
        logits[r, where] = 40.0
        logits[r, where - 1] = 40.0 * rep - 1.0  # with rep > 1 it wins only if its repetition penalty is skipped
        seen[r, where - 1], seen[r, where] = True, False
        counts[r, where - 1:where + 1] = 0  # presence/frequency leave the pair alone
        params[r, :6] = torch.tensor([0.0, 1.0, 0.0, rep, 0.1 * r, 0.05])
    tok, pos = torch.full((rows + 1,), -1), torch.tensor([3, 10, 20, 99])
    argmax = [int(torch.argmax(penalize(logits[r, :V], seen[r], counts[r], params[r, :6]))) for r in range(rows)]
    expect = []
    for r in range(rows):  # one row at a time through the single-row launch
        s, c, t, p = seen[r].clone(), counts[r].clone(), torch.full((1,), -1), pos[r:r + 1].clone()
        kernel.greedy_step(logits[r], s, c, params[r], t, p)
        expect.append((int(t), int(p), s, c))
    kernel.greedy_rows(logits, seen, counts, params, tok, pos)
    for r, (t, p, s, c) in enumerate(expect):
        assert (int(tok[r]), int(pos[r])) == (t, p) and t == argmax[r], r
        assert torch.equal(seen[r], s) and torch.equal(counts[r], c), r
    assert [int(tok[rows]), int(pos[rows])] == [-1, 99]  # a row past R is not touched
    assert int(kernel.row_counter.sum()) == 0
    assert [int(t) for t in tok[:rows]] == [5, DECODER_BLOCK + 3, V - 1]  # each rival lost to its penalty or value
    with pytest.raises(ValueError, match="greedy_rows"):
        kernel.greedy_rows(logits, seen[:, :-1], counts, params, tok, pos)
