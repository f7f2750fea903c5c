"""The graph decoder's one-launch sampler (``runtime.kernels.triton.sampling.DecoderSampler``) against the decoder's own
eager torch ops, under the Triton interpreter: the same fp32 numbers and the same token, state included."""

from __future__ import annotations

import pytest
import torch

from runtime.generation import GenerationSettings
from runtime.gpu_decode import GraphDecoder
from runtime.kernels.triton.sampling import DECODER_BLOCK, DecoderSampler

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
def test_scaled_logits_equal_the_eager_ops(rep: float, presence: float, freq: float) -> None:
    logits, seen, counts = _state(1)
    dec = _decoder(False)
    dec.params.copy_(torch.tensor([0.7, 1.0, 0.0, rep, presence, freq]))
    dec.seen.copy_(seen)
    dec.counts.copy_(counts)
    expect = dec._penalized(logits) / dec.params[0]
    got = DecoderSampler(V, "cpu").scaled(logits, dec.seen, dec.counts, dec.params)
    assert torch.equal(got, expect)


@pytest.mark.parametrize("where", [5, DECODER_BLOCK + 3, V - 1])
def test_greedy_step_picks_the_eager_argmax_and_advances_the_state(where: int) -> None:
    logits, seen, counts = _state(2)
    logits[where] = 50.0  # the winner, in the first, a middle and the masked last block
    logits[where + 1 if where + 1 < V else 0] = 50.0 / 1.5  # a seen rival the penalty must not favour
    seen[where] = True
    ref, fused = _decoder(False), _decoder(True)
    for d in (ref, fused):
        d.params.copy_(torch.tensor([1.0, 1.0, 0.0, 1.5, 0.3, 0.2]))
        d.seen.copy_(seen)
        d.counts.copy_(counts)
        d.tok.fill_(-1)
        d.pos.fill_(41)
    ref.step = fused.step = lambda t, p: logits
    ref._body()
    fused._body()
    assert int(fused.tok) == int(ref.tok) and int(fused.pos) == int(ref.pos) == 42
    assert torch.equal(fused.seen, ref.seen) and torch.equal(fused.counts, ref.counts)
    assert int(fused.sampler.counter) == 0  # the arrival counter is reset for the next step


def test_greedy_ties_take_the_first_index_like_torch_argmax() -> None:
    logits = torch.full((V,), -3.0)
    logits[[7, DECODER_BLOCK + 1, 2 * DECODER_BLOCK]] = 2.0  # equal maxima in three blocks
    dec = _decoder(True, lambda t, p: logits)
    dec.configure(GenerationSettings(temperature=0.0), [])
    dec._body()
    assert int(dec.tok) == 7 == int(torch.argmax(logits))


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
