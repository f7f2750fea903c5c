"""The OpenAI endpoints driven by the official ``openai`` client against a real server."""

from __future__ import annotations

import pytest

from runtime.generation import GenerationSettings
from runtime.tokenizer import byte_level_decoder
from tests.server.conftest import MODEL_ID, raw

HELLO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello 你好"}]


def token_bytes(engine, token_id: int) -> bytes:
    return bytes(byte_level_decoder()[ch] for ch in engine.tokenizer.id_to_token(token_id))


def test_chat_non_streaming_text_and_usage(openai_client, tiny_engine_for_server):
    r = openai_client.chat.completions.create(model=MODEL_ID, messages=HELLO, max_tokens=7, temperature=0,
                                              extra_body={"ignore_eos": True})
    assert r.object == "chat.completion" and r.model == MODEL_ID and len(r.choices) == 1
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason == "length"
    assert r.usage.completion_tokens == 7
    assert r.usage.prompt_tokens == tiny_engine_for_server.count_tokens(HELLO)
    assert r.usage.total_tokens == r.usage.prompt_tokens + 7


def test_streaming_equals_non_streaming_and_reports_usage(openai_client):
    kw = dict(model=MODEL_ID, messages=HELLO, max_tokens=9, temperature=0, extra_body={"ignore_eos": True})
    whole = openai_client.chat.completions.create(**kw)
    chunks = list(openai_client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 9
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_greedy_api_equals_engine_token_for_token(openai_client, tiny_engine_for_server):
    eng = tiny_engine_for_server
    settings = GenerationSettings(temperature=0.0, max_new_tokens=12, ignore_eos=True)
    done = list(eng.generate(HELLO, settings))[-1]
    r = openai_client.chat.completions.create(model=MODEL_ID, messages=HELLO, max_tokens=12, temperature=0,
                                              extra_body={"ignore_eos": True}, logprobs=True, top_logprobs=2)
    assert r.choices[0].message.content == done.text
    assert r.usage.completion_tokens == len(done.stats.token_ids) == 12
    content = r.choices[0].logprobs.content
    assert [bytes(t.bytes) for t in content] == [token_bytes(eng, i) for i in done.stats.token_ids]
    for t in content:
        assert len(t.top_logprobs) == 2 and t.logprob <= 0.0
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob
        assert t.logprob == pytest.approx(t.top_logprobs[0].logprob, abs=1e-4)  # greedy = the best


def test_logprobs_stream_with_the_text(openai_client, tiny_engine_for_server):
    chunks = list(openai_client.chat.completions.create(
        model=MODEL_ID, messages=HELLO, max_tokens=6, temperature=0, logprobs=True, top_logprobs=1, stream=True,
        extra_body={"ignore_eos": True}))
    tokens = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert len(tokens) == 6
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert b"".join(bytes(t.bytes) for t in tokens).decode("utf-8", "replace").lstrip() == text


def test_stop_sequence_cuts_the_answer(openai_client):
    base = openai_client.chat.completions.create(model=MODEL_ID, messages=HELLO, max_tokens=16, temperature=0,
                                                 extra_body={"ignore_eos": True}).choices[0].message.content
    assert len(base) > 6
    stop = base[3:5]
    r = openai_client.chat.completions.create(model=MODEL_ID, messages=HELLO, max_tokens=16, temperature=0,
                                              stop=[stop], extra_body={"ignore_eos": True})
    assert r.choices[0].message.content == base[:base.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_seed_makes_sampling_repeatable(openai_client):
    kw = dict(model=MODEL_ID, messages=HELLO, max_tokens=8, temperature=1.0, top_p=0.9, seed=123,
              presence_penalty=0.5, frequency_penalty=0.2, extra_body={"ignore_eos": True})
    a = openai_client.chat.completions.create(**kw).choices[0].message.content
    b = openai_client.chat.completions.create(**kw).choices[0].message.content
    assert a == b


def test_completions_raw_prompt(openai_client, tiny_engine_for_server):
    eng = tiny_engine_for_server
    done = list(eng.generate("Once upon", GenerationSettings(temperature=0.0, max_new_tokens=5, ignore_eos=True)))[-1]
    r = openai_client.completions.create(model=MODEL_ID, prompt="Once upon", max_tokens=5, temperature=0,
                                         extra_body={"ignore_eos": True})
    assert r.object == "text_completion" and r.choices[0].text == done.text
    assert r.usage.prompt_tokens == done.stats.prompt_tokens and r.usage.completion_tokens == 5
    streamed = list(openai_client.completions.create(model=MODEL_ID, prompt="Once upon", max_tokens=5,
                                                     temperature=0, stream=True, extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in streamed) == done.text
    r = openai_client.completions.create(model=MODEL_ID, prompt="Once upon", max_tokens=5, temperature=0,
                                         logprobs=3, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 5 and all(len(t) == 3 for t in lp.top_logprobs)


def test_models_and_health(openai_client, server):
    import json

    models = openai_client.models.list()
    assert [m.id for m in models.data] == [MODEL_ID]
    status, _, data = raw(server.url, "GET", "/health")
    assert status == 200
    body = json.loads(data)
    assert body["status"] == "ok" and body["parallel_requests"] == 1 and body["model"] == MODEL_ID
