"""Out of memory while loading: the engine asks the planner for a smaller plan, says so, and goes on."""

from __future__ import annotations

import pytest
import torch

from runtime.engine import Engine
from runtime.errors import OutOfMemoryError
from runtime.generation import DoneEvent, GenerationSettings, NoticeEvent
from runtime.model.qwen3 import Qwen3Model
from tests.engine.conftest import build_tiny


@pytest.fixture(scope="module")
def long_ctx_data():
    """A tiny model whose maximum context is long enough for the planner to have smaller plans."""
    return build_tiny(seed=1, max_position_embeddings=16384)[1]


def _fail_first(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[int]:
    """Make the first ``failures`` model builds raise torch's OOM; returns the contexts tried."""
    original = Qwen3Model.from_model_data.__func__  # type: ignore[attr-defined]
    tried: list[int] = []

    def build(cls, data, device="cpu", dtype=None, max_positions=None, **kw):
        tried.append(max_positions)
        if len(tried) <= failures:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return original(cls, data, device, dtype, max_positions, **kw)

    monkeypatch.setattr(Qwen3Model, "from_model_data", classmethod(build))
    return tried


def test_oom_at_load_falls_back_to_a_smaller_context_and_says_so(long_ctx_data, monkeypatch):
    tried = _fail_first(monkeypatch, failures=1)
    engine = Engine.load(long_ctx_data, device="cpu")
    assert len(tried) == 2 and tried[1] < tried[0]
    assert engine.info.context_length == tried[1]
    events = list(engine.generate("hello", GenerationSettings(max_new_tokens=3, temperature=0)))
    notices = [e.message for e in events if isinstance(e, NoticeEvent)]
    assert notices and "Out of memory" in notices[0] and f"{tried[1]} tokens" in notices[0]
    assert isinstance(events[-1], DoneEvent) and events[-1].stats.generated_tokens == 3
    again = list(engine.generate("hello", GenerationSettings(max_new_tokens=2, temperature=0)))
    assert not [e for e in again if isinstance(e, NoticeEvent)]  # said once


def test_oom_with_a_context_the_user_chose_is_reported_not_guessed(tiny_pair, monkeypatch):
    tried = _fail_first(monkeypatch, failures=1)
    with pytest.raises(OutOfMemoryError, match="256 tokens of context"):
        Engine.load(tiny_pair[1], device="cpu", context_length=256)
    assert tried == [256]


def test_oom_that_never_ends_gives_a_clear_error(tiny_pair, monkeypatch):
    _fail_first(monkeypatch, failures=10_000)
    with pytest.raises(OutOfMemoryError):
        Engine.load(tiny_pair[1], device="cpu")


def test_oom_while_decoding_halves_the_context_and_the_answer_goes_on(long_ctx_data, monkeypatch):
    engine = Engine.load(long_ctx_data, device="cpu")
    settings = GenerationSettings(max_new_tokens=12, temperature=0, ignore_eos=True)
    reference = list(engine.generate("hello there", settings))[-1].stats.token_ids
    ctx = engine.info.context_length

    engine = Engine.load(long_ctx_data, device="cpu")
    original = engine._forward
    calls = {"decode": 0}

    def forward(tokens, start):
        if len(tokens) == 1:
            calls["decode"] += 1
            if calls["decode"] == 5:
                raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return original(tokens, start)

    monkeypatch.setattr(engine, "_forward", forward)
    events = list(engine.generate("hello there", settings))
    notices = [e.message for e in events if isinstance(e, NoticeEvent)]
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert any(f"reduced to {ctx // 2} tokens" in n for n in notices)
    assert done.stats.token_ids == reference  # same answer, continued after the rebuild
    assert done.stats.context_length == ctx // 2 and engine.info.context_length == ctx // 2
    assert engine.model.max_positions == ctx // 2
    # the conversation goes on: the next message works and reuses the rebuilt cache
    nxt = list(engine.generate("hello there", GenerationSettings(max_new_tokens=3, temperature=0)))[-1]
    assert isinstance(nxt, DoneEvent) and nxt.stats.generated_tokens == 3


def test_oom_while_decoding_with_no_room_to_shrink_is_an_error(tiny_pair, monkeypatch):
    engine = Engine.load(tiny_pair[1], device="cpu", context_length=256)
    original = engine._forward

    def forward(tokens, start):
        if len(tokens) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return original(tokens, start)

    monkeypatch.setattr(engine, "_forward", forward)
    with pytest.raises(OutOfMemoryError, match="while generating"):
        list(engine.generate("hello", GenerationSettings(max_new_tokens=4, temperature=0, ignore_eos=True)))
