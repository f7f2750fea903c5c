"""Constrained decoding hooks (``Engine.generate(..., constraint=...)``), with small constraints written here:
the mask applies before sampling, the constraint advances with every token, a finished constraint ends the
answer with finish reason "stop", EOS comes only when allowed."""

from __future__ import annotations

import pytest
import torch

from runtime.engine import Engine
from runtime.errors import TernaryError
from runtime.generation import DoneEvent, GenerationSettings

SAMPLE = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0,
              frequency_penalty=0.0, max_new_tokens=24, seed=5)


@pytest.fixture(scope="module")
def engine(tiny_pair):
    return Engine.load(tiny_pair[1], device="cpu", context_length=512)  # room for a tool schema prompt


class EvenIds:
    """Only even token ids, never the ``forbidden`` ones (EOS here); never finished."""

    def __init__(self, vocab: int, forbidden: tuple[int, ...] = ()) -> None:
        self.mask = torch.zeros(vocab, dtype=torch.bool)
        self.mask[0::2] = True
        self.mask[list(forbidden)] = False
        self.advanced: list[int] = []

    def allowed_tokens(self) -> torch.Tensor:
        return self.mask

    def advance(self, token_id: int) -> None:
        if not self.mask[token_id]:
            raise AssertionError(f"token {token_id} was not allowed")
        self.advanced.append(token_id)

    def is_finished(self) -> bool:
        return False


class FixedSequence:
    """Exactly ``tokens``, then finished."""

    def __init__(self, vocab: int, tokens: list[int]) -> None:
        self.vocab, self.tokens, self.n = vocab, tokens, 0

    def allowed_tokens(self) -> torch.Tensor:
        mask = torch.zeros(self.vocab, dtype=torch.bool)
        if self.n < len(self.tokens):
            mask[self.tokens[self.n]] = True
        return mask

    def advance(self, token_id: int) -> None:
        if token_id != self.tokens[self.n]:
            raise AssertionError(f"expected {self.tokens[self.n]}, got {token_id}")
        self.n += 1

    def is_finished(self) -> bool:
        return self.n == len(self.tokens)


def _done(events) -> DoneEvent:
    done = list(events)[-1]
    assert isinstance(done, DoneEvent)
    return done


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_token_respects_the_mask_and_advances_the_constraint(engine, temperature):
    eos = tuple(engine.tokenizer.eos_token_ids)
    c = EvenIds(engine.model.vocab_size, forbidden=eos)
    done = _done(engine.generate("Hello there", GenerationSettings(**{**SAMPLE, "temperature": temperature}),
                                 constraint=c))
    assert len(done.stats.token_ids) == SAMPLE["max_new_tokens"] and all(t % 2 == 0 for t in done.stats.token_ids)
    assert c.advanced == done.stats.token_ids
    assert done.stats.finish_reason == "length"  # never finished, EOS never allowed


def test_unconstrained_sampling_does_produce_odd_ids(engine):
    """Guard against a vacuous mask test: the same settings without the constraint are not all even."""
    done = _done(engine.generate("Hello there", GenerationSettings(**{**SAMPLE, "ignore_eos": True})))
    assert any(t % 2 for t in done.stats.token_ids)


def test_a_finished_constraint_ends_with_stop(engine):
    want = [11, 40, 7, 99]
    c = FixedSequence(engine.model.vocab_size, want)
    done = _done(engine.generate("Hello", GenerationSettings(**SAMPLE), constraint=c))
    assert done.stats.token_ids == want and done.stats.finish_reason == "stop"
    assert done.text == engine.tokenizer.decode(want)


def test_eos_only_when_the_constraint_allows_it(engine):
    eos = min(engine.tokenizer.eos_token_ids)
    vocab = engine.model.vocab_size
    forced = FixedSequence(vocab, [eos])  # only EOS allowed: the answer ends at once, nothing generated
    done = _done(engine.generate("Hello", GenerationSettings(**SAMPLE), constraint=forced))
    assert done.stats.token_ids == [] and done.stats.finish_reason == "stop"
    assert forced.n == 0  # the EOS that ends the answer is not fed to the constraint


def test_constraint_runs_on_generate_tokens_and_a_bad_one_is_refused(engine):
    c = FixedSequence(engine.model.vocab_size, [3, 4])
    done = _done(engine.generate_tokens([1, 2, 3], GenerationSettings(**SAMPLE), constraint=c))
    assert done.stats.token_ids == [3, 4] and done.stats.finish_reason == "stop"
    with pytest.raises(TernaryError):
        engine.generate("Hello", GenerationSettings(**SAMPLE), constraint=object())


def test_a_constraint_that_allows_nothing_is_an_error(engine):
    class Nothing(FixedSequence):
        def allowed_tokens(self) -> torch.Tensor:
            return torch.zeros(self.vocab, dtype=torch.bool)

    with pytest.raises(TernaryError, match="allows no next token"):
        list(engine.generate("Hello", GenerationSettings(**SAMPLE), constraint=Nothing(engine.model.vocab_size, [1])))


def test_tools_reach_the_chat_template(engine):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    msgs = [{"role": "user", "content": "weather?"}]
    with_tools = engine.render_prompt(msgs, tools=tools)
    assert "get_weather" in with_tools and "get_weather" not in engine.render_prompt(msgs)
    assert engine.count_tokens(msgs, tools=tools) == len(engine.encode_prompt(msgs, tools=tools)) > \
        engine.count_tokens(msgs)
    done = _done(engine.generate(msgs, GenerationSettings(**{**SAMPLE, "max_new_tokens": 2}), tools=tools))
    assert done.stats.prompt_tokens == engine.count_tokens(msgs, tools=tools)
