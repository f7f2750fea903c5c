"""Chat template rendering equals transformers' ``apply_chat_template`` (text and token ids)."""

from __future__ import annotations

import pytest
from transformers import PreTrainedTokenizerFast

from runtime.chat_template import ChatTemplateError, render_chat
from runtime.tokenizer import Tokenizer
from tests import model_factory as mf
from tests.engine.conftest import tokenizer_data

CONVERSATIONS = {
    "single-user": [{"role": "user", "content": "Hello! 你好 😀"}],
    "system-multi-turn": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
        {"role": "user", "content": "And 3+3?"},
    ],
    "reasoning-field-last-turn": [
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "Because.", "reasoning_content": "The user asks why."},
    ],
    "tools": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "tool", "content": "{\"sky\": \"clear\"}"},
    ],
    "none-values-dropped": [{"role": "user", "content": "hi", "name": None}],
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city <b>",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def hf_tok() -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(
        tokenizer_object=mf.tiny_tokenizer(), eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template=mf.QWEN3_CHAT_TEMPLATE, clean_up_tokenization_spaces=False,
    )


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer(tokenizer_data())


def _ids(result) -> list[int]:
    return list(result["input_ids"]) if hasattr(result, "keys") else list(result)


@pytest.mark.parametrize("name", list(CONVERSATIONS))
@pytest.mark.parametrize("thinking", [None, True, False])
@pytest.mark.parametrize("gen_prompt", [True, False])
def test_qwen3_template_matches_transformers(hf_tok, tok, name, thinking, gen_prompt):
    messages = CONVERSATIONS[name]
    tools = TOOLS if name == "tools" else None
    kw = {} if thinking is None else {"enable_thinking": thinking}
    expected = hf_tok.apply_chat_template(messages, tools=tools, tokenize=False,
                                          add_generation_prompt=gen_prompt, **kw)
    got = render_chat(mf.QWEN3_CHAT_TEMPLATE, messages, tools=tools, add_generation_prompt=gen_prompt,
                      special_tokens=tok.special_tokens_map(), enable_thinking=thinking)
    assert got == expected
    expected_ids = _ids(hf_tok.apply_chat_template(messages, tools=tools, tokenize=True,
                                                   add_generation_prompt=gen_prompt, **kw))
    assert tok.encode(got) == expected_ids


def test_thinking_switch_changes_the_prompt(tok):
    msgs = CONVERSATIONS["single-user"]
    off = render_chat(mf.QWEN3_CHAT_TEMPLATE, msgs, enable_thinking=False)
    on = render_chat(mf.QWEN3_CHAT_TEMPLATE, msgs, enable_thinking=True)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on.endswith("<|im_start|>assistant\n")


HELPER_TEMPLATE = (
    "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}"
    "{{ bos_token if bos_token is defined else '' }}{{ eos_token }}|{{ reasoning_effort | default('xhigh') }}|"
    "{{ strftime_now('%Y') | length }}|{{ messages | tojson }}|{{ {'b': '<&>', 'a': 1} | tojson(sort_keys=True) }}"
    "{% set ns = namespace(n=0) %}{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
    "{% set ns.n = ns.n + 1 %}{% endfor %}|{{ ns.n }}|{% generation %}gen{% endgeneration %}"
)


@pytest.mark.parametrize("effort", [None, "medium"])
def test_helpers_and_kwargs_match_transformers(hf_tok, tok, effort):
    msgs = [{"role": "user", "content": "é <b>"}, {"role": "assistant", "content": "x"}]
    kw = {} if effort is None else {"reasoning_effort": effort}
    expected = hf_tok.apply_chat_template(msgs, chat_template=HELPER_TEMPLATE, tokenize=False, **kw)
    got = render_chat(HELPER_TEMPLATE, msgs, add_generation_prompt=False, special_tokens=tok.special_tokens_map(),
                      reasoning_effort=effort)
    assert got == expected
    assert "<&>" in got and "é" in got


def test_raise_exception_becomes_a_clear_error():
    with pytest.raises(ChatTemplateError, match="first message must be from the user"):
        render_chat(HELPER_TEMPLATE, [{"role": "system", "content": "x"}])


@pytest.mark.parametrize("evil", [
    "{{ messages.__class__.__mro__ }}",
    "{{ ''.__class__.__subclasses__() }}",
    "{% set ns = namespace() %}{% set ns._x = 1 %}",
    "{{ messages.append(1) }}",
])
def test_templates_are_sandboxed(evil):
    with pytest.raises(ChatTemplateError):
        render_chat(evil, [{"role": "user", "content": "hi"}])
