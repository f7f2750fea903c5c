"""The hybrid through the public Engine API (CPU): greedy text equals our model's own greedy loop,
and a second prompt that is not a pure extension of the first does not reuse stale recurrent state."""

from __future__ import annotations

import torch
from hybrid_helpers import build_tiny, our_greedy

from runtime.engine import Engine
from runtime.generation import DoneEvent, GenerationSettings
from runtime.model.qwen35 import Qwen35Model
from runtime.synthetic import synthetic_tokenizer

GREEDY = GenerationSettings(temperature=0.0, max_new_tokens=12, ignore_eos=True)


def _text(engine: Engine, prompt: str) -> str:
    done = [e for e in engine.generate(prompt, GREEDY) if isinstance(e, DoneEvent)]
    return done[0].text


def test_hybrid_engine_greedy_and_prefix_handling():
    _, data = build_tiny("gqa_2x", seed=5)
    data.tokenizer = synthetic_tokenizer()  # byte-level: token id == byte value (< 96 here)
    engine = Engine.load(data, device="cpu", context_length=128, backend="reference")
    assert engine.info.arch == "qwen35"
    first = _text(engine, "HELLO, WORLD 1")
    model = Qwen35Model.from_model_data(data, max_positions=128, backend="reference")
    ids = list(b"HELLO, WORLD 1")
    assert first == bytes(our_greedy(model, ids, 12)).decode("latin-1")
    # shares a prefix with the cached conversation but is not its extension: must not reuse state
    second = _text(engine, "HELLO, THERE 2")
    fresh = Engine.load(data, device="cpu", context_length=128, backend="reference")
    assert second == _text(fresh, "HELLO, THERE 2")
    with torch.no_grad():
        assert second == bytes(our_greedy(model, list(b"HELLO, THERE 2"), 12)).decode("latin-1")
