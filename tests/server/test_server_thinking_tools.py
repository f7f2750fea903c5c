"""Thinking and tool calls in the answers of both APIs.

The tiny random model neither thinks nor calls tools by itself, so these tests put a scripted
answer behind the real server: the real engine's template, tokenizer and context, and a
``generate_tokens`` that yields the events the engine yields for a Qwen3 answer that thinks and
then calls a tool (thinking already split off by the engine, the ``<tool_call>`` block as text).
"""

from __future__ import annotations

import json

import pytest

from runtime.generation import DoneEvent, GenerationStats, TextEvent
from tests.server.conftest import MODEL_ID

THINKING = "The user wants the weather. I should call the tool."
ANSWER = ['Checking.', '\n<tool', '_call>\n{"name": "get_weather", ', '"arguments": {"city": "Paris"}}\n</tool_call>']
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
ANTHROPIC_TOOL = {"name": "get_weather", "description": "Weather in a city",
                  "input_schema": WEATHER["function"]["parameters"]}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


class _Scripted:
    """The real engine for everything but generation, which replays a thinking + tool-call answer."""

    def __init__(self, engine) -> None:
        self._engine = engine

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def generate_tokens(self, prompt_ids, settings=None, cancel=None, **kwargs):
        yield TextEvent(THINKING[:10], "thinking")
        yield TextEvent(THINKING[10:], "thinking")
        for piece in ANSWER:
            yield TextEvent(piece, "answer")
        yield DoneEvent(GenerationStats(prompt_tokens=len(prompt_ids), generated_tokens=30, finish_reason="stop"),
                        text="".join(ANSWER), thinking=THINKING)


@pytest.fixture(scope="module")
def scripted(tiny_engine_for_server):
    import anthropic
    import openai

    from runtime.server import EngineAccess, ServerConfig, start_server

    handle = start_server(EngineAccess(_Scripted(tiny_engine_for_server), MODEL_ID), ServerConfig(port=0))
    with openai.OpenAI(base_url=handle.url + "/v1", api_key="x", max_retries=0) as oc, \
            anthropic.Anthropic(base_url=handle.url, api_key="x", max_retries=0) as ac:
        yield oc, ac
    handle.stop()


def test_openai_reasoning_content_and_tool_calls(scripted):
    oc, _ = scripted
    r = oc.chat.completions.create(model=MODEL_ID, messages=ASK, tools=[WEATHER], max_tokens=64)
    msg = r.choices[0].message
    assert msg.model_extra["reasoning_content"] == THINKING
    assert msg.content == "Checking.\n" and "tool_call" not in msg.content and THINKING not in msg.content
    assert r.choices[0].finish_reason == "tool_calls"
    (call,) = msg.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_openai_stream_reasoning_then_tool_call(scripted):
    oc, _ = scripted
    chunks = list(oc.chat.completions.create(model=MODEL_ID, messages=ASK, tools=[WEATHER], max_tokens=64,
                                             stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    content = "".join(d.content or "" for d in deltas)
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert reasoning == THINKING and content == "Checking.\n"
    assert len(calls) == 1 and calls[0].index == 0 and calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_without_tools_the_block_stays_text(scripted):
    oc, _ = scripted
    r = oc.chat.completions.create(model=MODEL_ID, messages=ASK, max_tokens=64)
    assert r.choices[0].message.content == "".join(ANSWER) and not r.choices[0].message.tool_calls


def test_anthropic_thinking_and_tool_use_blocks(scripted):
    _, ac = scripted
    r = ac.messages.create(model=MODEL_ID, max_tokens=64, messages=ASK, tools=[ANTHROPIC_TOOL])
    assert [b.type for b in r.content] == ["thinking", "text", "tool_use"]
    assert r.content[0].thinking == THINKING and r.content[1].text == "Checking.\n"
    assert r.content[2].name == "get_weather" and r.content[2].input == {"city": "Paris"}
    assert r.content[2].id.startswith("toolu_") and r.stop_reason == "tool_use"


def test_anthropic_stream_blocks_in_order(scripted):
    _, ac = scripted
    with ac.messages.stream(model=MODEL_ID, max_tokens=64, messages=ASK, tools=[ANTHROPIC_TOOL]) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0].thinking == THINKING and final.content[2].input == {"city": "Paris"}
    assert final.stop_reason == "tool_use"
    assert events.count("content_block_start") == 3 and events.count("content_block_stop") == 3
