"""``/v1/messages`` driven by the official ``anthropic`` client."""

from __future__ import annotations

import json

from runtime.generation import GenerationSettings
from tests.server.conftest import MODEL_ID, raw

MSGS = [{"role": "user", "content": "Hello 你好"}]


def test_messages_non_streaming_matches_engine(anthropic_client, tiny_engine_for_server):
    eng = tiny_engine_for_server
    done = list(eng.generate([{"role": "system", "content": "Be brief."}, *MSGS],
                             GenerationSettings(temperature=0.0, max_new_tokens=6)))[-1]
    r = anthropic_client.messages.create(model=MODEL_ID, max_tokens=6, system="Be brief.",
                                         messages=MSGS, extra_body={"temperature": 0})
    assert r.type == "message" and r.role == "assistant" and r.model == MODEL_ID
    assert r.content[0].type == "text" and r.content[0].text == done.text
    assert r.usage.input_tokens == done.stats.prompt_tokens
    assert r.usage.output_tokens == done.stats.generated_tokens
    assert r.stop_reason == ("max_tokens" if done.stats.finish_reason == "length" else "end_turn")


def test_stream_event_order_as_anthropic_sends_it(server):
    body = json.dumps({"model": MODEL_ID, "max_tokens": 5, "temperature": 0, "stream": True, "messages": MSGS})
    status, headers, data = raw(server.url, "POST", "/v1/messages", body.encode())
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = []
    for block in data.decode().strip().split("\n\n"):
        name, payload = block.split("\n", 1)
        assert name.startswith("event: ") and payload.startswith("data: ")
        doc = json.loads(payload[6:])
        assert doc["type"] == name[7:]
        events.append(doc)
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["message_start", "ping", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[3:-3]) == {"content_block_delta"}
    assert events[0]["message"]["usage"]["input_tokens"] > 0
    assert events[-2]["usage"]["output_tokens"] == 5 and events[-2]["delta"]["stop_reason"] in ("max_tokens", "end_turn")


def test_stream_through_the_sdk_equals_non_streaming(anthropic_client):
    kw = dict(model=MODEL_ID, max_tokens=8, messages=MSGS, extra_body={"temperature": 0})
    whole = anthropic_client.messages.create(**kw)
    with anthropic_client.messages.stream(**kw) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == whole.content[0].text
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_stop_sequences_name_the_one_that_matched(anthropic_client):
    base = anthropic_client.messages.create(model=MODEL_ID, max_tokens=16, messages=MSGS,
                                            extra_body={"temperature": 0}).content[0].text
    if len(base) < 6:  # the tiny model may end early: ask for more with ignore_eos
        base = anthropic_client.messages.create(model=MODEL_ID, max_tokens=16, messages=MSGS,
                                                extra_body={"temperature": 0, "ignore_eos": True}).content[0].text
    stop = base[3:5]
    r = anthropic_client.messages.create(model=MODEL_ID, max_tokens=16, messages=MSGS,
                                         stop_sequences=["never-there", stop],
                                         extra_body={"temperature": 0, "ignore_eos": True})
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == stop
    assert r.content[0].text == base[:base.index(stop)]
