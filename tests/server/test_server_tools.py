"""Tool calls: the Qwen3 ``<tool_call>`` parser, and tool results travelling through the template."""

from __future__ import annotations

from runtime.chat_template import render_chat
from runtime.server import anthropic_api, openai_api
from runtime.server.tool_calls import ToolCallParser, split_tool_calls
from tests import model_factory as mf
from tests.server.conftest import MODEL_ID

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object",
                                                           "properties": {"city": {"type": "string"}}}}}
ANSWER = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
          '<tool_call>\n{"name": "get_weather", "arguments": {"city": "北京"}}\n</tool_call>')


def test_parser_whole_text():
    text, calls = split_tool_calls(ANSWER)
    assert text.strip() == "Let me check."
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "北京"})]
    assert calls[0].id != calls[1].id and calls[0].arguments_json() == '{"city": "Paris"}'


def test_parser_streamed_one_character_at_a_time_gives_the_same():
    parser = ToolCallParser()
    items = []
    for ch in ANSWER:
        items += parser.feed(ch)
    items += parser.flush()
    text = "".join(v for k, v in items if k == "text")
    calls = [v for k, v in items if k == "tool"]
    assert text.strip() == "Let me check." and len(calls) == 2 and calls[1].arguments == {"city": "北京"}
    assert "<" not in text  # no half tag ever leaked as text


def test_parser_keeps_malformed_blocks_as_text():
    for bad in ("<tool_call>not json</tool_call>", "<tool_call>[1, 2]</tool_call>", "<tool_call>{\"name\": 1}</tool_call>",
                "a <tool_call>{\"name\": \"x\"", "a <tool_"):
        text, calls = split_tool_calls(bad)
        assert calls == [] and text == bad


def test_openai_tool_round_trip_renders_calls_and_results():
    messages = openai_api.convert_messages([
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
    ])
    prompt = render_chat(mf.QWEN3_CHAT_TEMPLATE, messages, tools=[WEATHER])
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert "<|im_start|>user\n<tool_response>\n18 C, sunny\n</tool_response><|im_end|>" in prompt
    assert '"name": "get_weather"' in prompt.split("</tools>\n")[0]  # the tool list in the system part


def test_anthropic_tool_round_trip_is_the_same_prompt():
    anthropic_msgs = anthropic_api.convert_messages({"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "18 C, sunny"}]}]},
    ]})
    tools = anthropic_api.convert_tools({"tools": [{"name": "get_weather", "description": "Weather in a city",
                                                    "input_schema": WEATHER["function"]["parameters"]}]})
    openai_msgs = openai_api.convert_messages([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
    ])
    assert render_chat(mf.QWEN3_CHAT_TEMPLATE, anthropic_msgs, tools=tools) == \
        render_chat(mf.QWEN3_CHAT_TEMPLATE, openai_msgs, tools=[WEATHER])


def test_tool_results_reach_the_model_through_both_apis(openai_client, anthropic_client, tiny_engine_for_server):
    msgs = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
    r = openai_client.chat.completions.create(model=MODEL_ID, messages=msgs, tools=[WEATHER], max_tokens=3,
                                              temperature=0)
    expected = len(tiny_engine_for_server.tokenizer.encode(
        render_chat(tiny_engine_for_server.chat_template, openai_api.convert_messages(msgs), tools=[WEATHER],
                    special_tokens=tiny_engine_for_server.tokenizer.special_tokens_map(), enable_thinking=False),
        add_special_tokens=False))
    assert r.usage.prompt_tokens == expected
    a = anthropic_client.messages.create(
        model=MODEL_ID, max_tokens=3, extra_body={"temperature": 0},
        tools=[{"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER["function"]["parameters"]}],
        messages=[{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                                     "input": {"city": "Paris"}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                "content": "18 C, sunny"}]}])
    assert a.usage.input_tokens == expected
