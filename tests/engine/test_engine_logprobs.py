"""Token log-probabilities from the engine (``logprobs=k``): TokenEvents before their text, values equal to
log_softmax of a reference forward (transformers on the same ternary weights), top lists sorted, greedy tokens
unchanged by asking, nothing emitted when not asked."""

from __future__ import annotations

import pytest
import torch

from runtime.engine import Engine
from runtime.errors import InvalidSettingError
from runtime.generation import DoneEvent, GenerationSettings, NoticeEvent, TextEvent, TokenEvent

GREEDY = dict(temperature=0.0, repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
              ignore_eos=True, max_new_tokens=10)
PROMPT = "The quick brown fox"


@pytest.fixture(scope="module")
def engine(tiny_pair):
    return Engine.load(tiny_pair[1], device="cpu", context_length=256)


def _run(engine: Engine, settings: GenerationSettings, **kw) -> list:
    return [e for e in engine.generate(PROMPT, settings, **kw) if not isinstance(e, NoticeEvent)]


def test_logprobs_equal_log_softmax_of_a_reference_forward(engine, tiny_pair):
    events = _run(engine, GenerationSettings(**GREEDY), logprobs=4)
    done = events[-1]
    assert isinstance(done, DoneEvent)
    toks = [e for e in events if isinstance(e, TokenEvent)]
    assert [t.token_id for t in toks] == done.stats.token_ids and len(toks) == 10
    prompt = engine.encode_prompt(PROMPT)
    seq = prompt + done.stats.token_ids[:-1]
    with torch.inference_mode():
        hf = torch.log_softmax(tiny_pair[0](torch.tensor([seq])).logits[0, len(prompt) - 1:].float(), -1)
        engine.reset()  # the reference prefill below rewrites the cache; the engine re-prefills next time
        own = engine.model(torch.tensor(seq), torch.arange(len(seq)), kv_len=len(seq))[len(prompt) - 1:]
        ref = torch.log_softmax(own.float(), -1)
    for i, t in enumerate(toks):
        # the engine's own forward over the whole sequence at once: the same numbers
        assert t.logprob == pytest.approx(float(ref[i, t.token_id]), abs=1e-5)
        # transformers on the same ternary weights: within the CPU kernels' int8 activations
        assert t.logprob == pytest.approx(float(hf[i, t.token_id]), abs=3e-2)
        assert len(t.top) == 4
        assert [v for _, _, v in t.top] == sorted((v for _, _, v in t.top), reverse=True)
        assert [i_ for i_, _, _ in t.top] == torch.topk(ref[i], 4).indices.tolist()
        assert [v for _, _, v in t.top] == pytest.approx(torch.topk(ref[i], 4).values.tolist(), abs=1e-5)
        # greedy without penalties: the chosen token is the best one
        assert t.top[0][0] == t.token_id and t.top[0][2] == t.logprob
        assert t.token_bytes == engine.tokenizer.token_bytes(t.token_id) and all(isinstance(b, bytes) for _, b, _ in t.top)


def test_token_event_comes_before_the_text_it_produces(engine):
    events = _run(engine, GenerationSettings(**GREEDY), logprobs=0)
    seen_tokens = 0
    for e in events:
        if isinstance(e, TokenEvent):
            seen_tokens += 1
            assert e.top == []
        elif isinstance(e, TextEvent):
            assert seen_tokens > 0
    assert seen_tokens == len(events[-1].stats.token_ids)


def test_greedy_tokens_are_the_same_with_and_without_logprobs(engine):
    plain = _run(engine, GenerationSettings(**GREEDY))
    asked = _run(engine, GenerationSettings(**GREEDY), logprobs=2)
    assert not any(isinstance(e, TokenEvent) for e in plain)  # None: no TokenEvent at all
    assert plain[-1].stats.token_ids == asked[-1].stats.token_ids
    assert plain[-1].text == asked[-1].text


def test_no_token_event_for_the_eos_that_ends_the_answer(engine):
    eos = min(engine.tokenizer.eos_token_ids)

    class EndAfterTwo:  # allows two fixed tokens, then only EOS
        def __init__(self):
            self.n = 0

        def allowed_tokens(self):
            mask = torch.zeros(engine.model.vocab_size, dtype=torch.bool)
            mask[[5, 6][self.n] if self.n < 2 else eos] = True
            return mask

        def advance(self, token_id):
            self.n += 1

        def is_finished(self):
            return False

    events = _run(engine, GenerationSettings(**{**GREEDY, "ignore_eos": False}), logprobs=1,
                  constraint=EndAfterTwo())
    assert [e.token_id for e in events if isinstance(e, TokenEvent)] == [5, 6]
    assert events[-1].stats.finish_reason == "stop" and events[-1].stats.token_ids == [5, 6]


@pytest.mark.parametrize("bad", [-1, 21, True, 1.5, "3"])
def test_bad_logprobs_are_refused_before_any_work(engine, bad):
    with pytest.raises(InvalidSettingError) as e:
        engine.generate(PROMPT, GenerationSettings(**GREEDY), logprobs=bad)
    assert e.value.field == "logprobs"
    with pytest.raises(InvalidSettingError):
        engine.generate_tokens([1, 2, 3], GenerationSettings(**GREEDY), logprobs=bad)


def test_generate_tokens_reports_logprobs_too(engine):
    ids = engine.encode_prompt(PROMPT)
    a = [e for e in engine.generate_tokens(ids, GenerationSettings(**GREEDY), logprobs=3)
         if isinstance(e, TokenEvent | DoneEvent)]
    b = _run(engine, GenerationSettings(**GREEDY), logprobs=3)
    assert [(e.token_id, e.logprob) for e in a if isinstance(e, TokenEvent)] == \
        [(e.token_id, e.logprob) for e in b if isinstance(e, TokenEvent)]


def test_token_bytes_rebuild_multibyte_text(engine):
    tb = engine.tokenizer.token_bytes
    for text in ("你好, world!", "emoji 🙂 and ü", " leading space"):
        ids = engine.tokenizer.encode(text)
        assert b"".join(tb(i) for i in ids) == text.encode("utf-8")
    im_end = engine.tokenizer.token_to_id("<|im_end|>")
    assert tb(im_end) == b"<|im_end|>"  # special tokens: their text
