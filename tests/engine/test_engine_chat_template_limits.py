"""Hostile chat templates are stopped with a clear error; real templates render exactly as before.

The corpus covers each way a template can exhaust the machine: huge ranges, repetition, format
widths, padding, replace/join/indent blow-ups, big numbers, aliasing (a list holding the same big
list many times), nested loops, recursion, output floods inside and outside macros, and slow
pure-Python filters (the watchdog). Each case must end with :class:`ChatTemplateError` naming the
template's source and the limit hit, fast, and without allocating (checked under an address-space
cap in a subprocess).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerFast

from runtime.chat_template import ChatTemplateError, RenderLimits, render_chat
from tests import model_factory as mf
from tests.engine.hostile_templates import HOSTILE

ROOT = Path(__file__).resolve().parents[2]
LIMITS = RenderLimits(seconds=3.0)
MSGS = [{"role": "user", "content": "hi"}]

@pytest.mark.parametrize("name,template,limit", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_template_is_stopped(name, template, limit):
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateError) as e:
        render_chat(template, MSGS, source="evil-model.gguf", limits=LIMITS)
    elapsed = time.monotonic() - t0
    assert e.value.limit in limit.split("|"), str(e.value)
    assert "the chat template of evil-model.gguf" in str(e.value)
    assert "Traceback" not in str(e.value) and "_LimitExceeded" not in str(e.value)
    assert elapsed < LIMITS.seconds + 3.0, f"{name} took {elapsed:.1f} s"


def test_corpus_never_allocates_under_a_memory_cap():
    """The whole corpus in a child process limited to 1 GiB of address space: every case must be
    refused by a limit (not by MemoryError, which would mean the bomb was being built)."""
    code = textwrap.dedent("""
        import json, resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from runtime.chat_template import ChatTemplateError, RenderLimits, render_chat
        from tests.engine.hostile_templates import HOSTILE
        out = {}
        for name, template, _ in HOSTILE:
            try:
                render_chat(template, [{"role": "user", "content": "hi"}], limits=RenderLimits(seconds=3.0))
                out[name] = "rendered"
            except ChatTemplateError as exc:
                out[name] = exc.limit
            except MemoryError:
                out[name] = "MemoryError"
        print(json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = {name: limit for name, _, limit in HOSTILE}
    wrong = {n: k for n, k in outcome.items() if k not in expected[n].split("|")}
    assert not wrong, wrong


def test_watchdog_leaves_no_stray_exception_behind():
    slow = "{% set s = 'ab ' * 200000 %}{% for i in range(1000) %}{{ (s|wordwrap(1))|length }}{% endfor %}"
    with pytest.raises(ChatTemplateError) as e:
        render_chat(slow, MSGS, limits=RenderLimits(seconds=0.5))
    assert e.value.limit == "time" and "longer than 0.5 s" in str(e.value)
    time.sleep(1.5)  # a late watchdog would raise in here
    assert sum(range(1000)) == 499500
    # many quick renders: the watchdog never fires after a render that finished
    for _ in range(200):
        assert render_chat(mf.QWEN3_CHAT_TEMPLATE, MSGS, limits=RenderLimits(seconds=0.5))


def test_an_ordinary_template_error_names_the_source():
    with pytest.raises(ChatTemplateError) as e:
        render_chat("{{ 1 / 0 }}", MSGS, source="bonsai.ternary")
    assert e.value.limit == "" and "the chat template of bonsai.ternary failed" in str(e.value)
    assert "division by zero" in str(e.value)


# -- real templates render exactly as transformers does -----------------------------------------
# A Qwen3.5 / Qwen3-Coder style template (XML tool calls, macros, for-if filters, |items, tojson,
# loop.previtem/nextitem, slicing, namespace, string methods, format): written for this test.
XML_TOOLS_TEMPLATE = """\
{%- macro render_extra(d, handled) -%}
{%- if d is mapping -%}{%- for k in d if k not in handled -%}
{{- '\\n<' ~ k ~ '>' ~ (d[k] | tojson if d[k] is mapping or (d[k] is sequence and d[k] is not string) else d[k] | string)
    ~ '</' ~ k ~ '>' -}}
{%- endfor -%}{%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(last_user=-1, turns=0) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- if messages[0].role == 'system' -%}{%- set system = messages[0].content -%}{%- set rest = messages[1:] -%}
{%- else -%}{%- set rest = messages -%}{%- endif -%}
<|im_start|>system
{{ system | default('You are helpful.') | trim }}
{%- if tools %}

# Tools
<tools>
{%- for tool in tools %}{% set f = tool.function if tool.function is defined else tool %}
<function><name>{{ f.name }}</name><description>{{ f.description | trim }}</description>
{%- for pname, pfields in (f.parameters.properties | default({})) | items %}
<parameter><name>{{ pname }}</name><type>{{ pfields.type }}</type>{{ render_extra(pfields, ['type']) }}</parameter>
{%- endfor %}
</function>
{%- endfor %}
</tools>
{%- endif %}<|im_end|>
{% for m in rest -%}
{%- set ns.turns = ns.turns + 1 -%}
{%- if m.role == 'assistant' -%}
<|im_start|>assistant
{%- set content = m.content.split('</think>')[-1].lstrip('\\n') if '</think>' in m.content else m.content %}
{%- if m.reasoning_content is defined and loop.index0 > ns.last_user - 1 %}
<think>
{{ m.reasoning_content.strip() }}
</think>
{%- endif %}
{{ content }}
{%- for call in m.tool_calls | default([]) %}
<tool_call>
<function={{ (call.function or call).name }}>
{%- for a, v in (call.function or call).arguments | items %}
<parameter={{ a }}>
{{ v | tojson if v is not string else v }}
</parameter>
{%- endfor %}
</function>
</tool_call>
{%- endfor %}<|im_end|>
{% elif m.role == 'tool' -%}
{%- if loop.previtem is not defined or loop.previtem.role != 'tool' %}<|im_start|>user{% endif %}
<tool_response>
{{ m.content }}
</tool_response>
{%- if loop.last or loop.nextitem.role != 'tool' %}<|im_end|>
{% endif -%}
{% else -%}
<|im_start|>{{ m.role }}
{{ '%s' | format(m.content) }} [{{ '{:>3}'.format(loop.index) }}/{{ rest | length }}]<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif %}{% endif -%}
"""

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": " Weather for a city <b> ",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "the city", "enum": ["Paris", "Oslo"]},
        "days": {"type": "integer", "minimum": 1}}}}}]


def _long_conversation(turns: int) -> list[dict]:
    msgs: list[dict] = [{"role": "system", "content": "You are terse. 你好"}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"Question {i}: what is {i} + {i}? " + "pad " * (i % 7)})
        if i % 5 == 3:
            msgs.append({"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": i}}}]})
            msgs.append({"role": "tool", "content": json.dumps({"temp": i})})
            msgs.append({"role": "tool", "content": "{\"sky\": \"clear\"}"})
        msgs.append({"role": "assistant", "content": f"<think>\nadd\n</think>\n\n{2 * i}",
                     "reasoning_content": f"adding {i}"} if i % 2 else {"role": "assistant", "content": str(2 * i)})
    msgs.append({"role": "user", "content": "Thanks!"})
    return msgs


@pytest.fixture(scope="module")
def hf_tok() -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=mf.tiny_tokenizer(), eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", chat_template=mf.QWEN3_CHAT_TEMPLATE,
                                   clean_up_tokenization_spaces=False)


@pytest.mark.parametrize("template", ["qwen3", "xml-tools"])
@pytest.mark.parametrize("thinking", [None, False])
def test_real_templates_render_exactly_as_transformers(hf_tok, template, thinking):
    source = mf.QWEN3_CHAT_TEMPLATE if template == "qwen3" else XML_TOOLS_TEMPLATE
    msgs = _long_conversation(300)
    kw = {} if thinking is None else {"enable_thinking": thinking}
    expected = hf_tok.apply_chat_template(msgs, chat_template=source, tools=TOOLS, tokenize=False,
                                          add_generation_prompt=True, **kw)
    t0 = time.monotonic()
    got = render_chat(source, msgs, tools=TOOLS, add_generation_prompt=True, enable_thinking=thinking)
    assert got == expected
    assert len(got) > 20_000 and "<tool_call>" in got
    assert time.monotonic() - t0 < 5.0


def test_big_legitimate_input_is_not_refused():
    """A 20 MB message is above the base limit; limits grow with the input, so it still renders."""
    big = "word " * 4_000_000
    out = render_chat(mf.QWEN3_CHAT_TEMPLATE, [{"role": "user", "content": big}])
    assert big in out


def test_engine_names_the_model_whose_template_failed(tiny_pair):
    import dataclasses

    from runtime.engine import Engine
    from runtime.generation import GenerationSettings

    _, data = tiny_pair
    data = dataclasses.replace(data, name="hostile-tiny",
                               tokenizer=dataclasses.replace(data.tokenizer, chat_template="{{ 'x' * 10**10 }}"))
    eng = Engine.load(data, device="cpu", context_length=64)
    try:
        with pytest.raises(ChatTemplateError) as e:
            eng.generate(MSGS, GenerationSettings(max_new_tokens=2))
        assert "the chat template of hostile-tiny was stopped" in str(e.value) and e.value.limit == "size"
    finally:
        eng.close()
