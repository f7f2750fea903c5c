"""Time to first token (issue 26, item 4): wall time from the request to the first token, prefill
included — from ``Engine.generate``'s ``started_at`` (the app's Send) or the call itself — and the
same figure in ``ternary generate --json``."""

from __future__ import annotations

import json
import time

import pytest

from runtime.cli import main
from runtime.engine import Engine
from runtime.generation import DoneEvent, GenerationSettings
from tests import model_factory as mf

SLOW_PREFILL_S = 0.2


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    cfg = mf.tiny_qwen3_config()
    model = mf.make_ternary_hf_model(cfg, seed=5)
    return mf.write_hf_folder(model, mf.tiny_tokenizer(), tmp_path_factory.mktemp("ttft") / "tiny")


def _done(events) -> DoneEvent:
    return [e for e in events if isinstance(e, DoneEvent)][-1]


def test_ttft_counts_from_the_send_timestamp(tiny_engine):
    settings = GenerationSettings(temperature=0.0, max_new_tokens=3, ignore_eos=True)
    tiny_engine.reset()
    sent = time.perf_counter() - 0.25  # the user pressed Send 0.25 s before the engine was asked
    st = _done(tiny_engine.generate([{"role": "user", "content": "Hello"}], settings, started_at=sent)).stats
    assert 0.25 <= st.ttft_s <= st.total_s <= time.perf_counter() - sent
    # a stamp "from the future" (another clock) is ignored: counted from the call instead
    tiny_engine.reset()
    st = _done(tiny_engine.generate([{"role": "user", "content": "Hello"}], settings,
                                    started_at=time.perf_counter() + 100)).stats
    assert 0 < st.ttft_s < 5


def test_ttft_includes_prefill_even_when_the_generator_starts_late(tiny_engine):
    """The events are pulled by a worker that may start iterating later than the call."""
    settings = GenerationSettings(temperature=0.0, max_new_tokens=3, ignore_eos=True)
    tiny_engine.reset()
    t0 = time.perf_counter()
    events = tiny_engine.generate([{"role": "user", "content": "Hello again"}], settings)
    time.sleep(0.2)  # e.g. the GUI thread busy before the worker iterates
    st = _done(events).stats
    assert st.ttft_s >= 0.2
    prefill_s = (st.prompt_tokens - st.reused_prompt_tokens) / st.prefill_tok_s
    assert prefill_s <= st.ttft_s <= time.perf_counter() - t0


def test_generate_json_ttft_is_wall_time_with_prefill(folder, capsys, monkeypatch):
    real_forward = Engine._forward

    def slow_forward(self, ids, pos):  # make the prefill measurably slow
        if len(ids) > 1:
            time.sleep(SLOW_PREFILL_S)
        return real_forward(self, ids, pos)

    monkeypatch.setattr(Engine, "_forward", slow_forward)
    t0 = time.perf_counter()
    rc = main(["generate", str(folder), "--prompt", "Hello there", "--chat", "--max-new-tokens", "4",
               "--temperature", "0", "--ignore-eos", "--device", "cpu", "--ctx", "128", "--json"])
    wall = time.perf_counter() - t0
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert SLOW_PREFILL_S <= out["ttft_s"] <= out["total_s"] <= wall
    assert out["prefill_tok_s"] > 0
    assert out["prompt_tokens"] / out["prefill_tok_s"] <= out["ttft_s"]  # the prefill is inside the figure
