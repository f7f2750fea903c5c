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
