"""Render a model's Jinja chat template exactly as Hugging Face's ``apply_chat_template`` does.

Same sandbox (``ImmutableSandboxedEnvironment``, ``trim_blocks``/``lstrip_blocks``, loop controls,
the ``{% generation %}`` tag), same helpers (``tojson`` without HTML escaping, ``raise_exception``,
``strftime_now``, restricted ``dict``/``namespace``) and the same inputs (messages with ``None``
values dropped and reasoning fields aliased, the tokenizer's special tokens, then caller kwargs
such as ``enable_thinking`` or ``reasoning_effort``). Templates come from downloaded files, so they
are untrusted code: the sandbox is not optional.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

from runtime.errors import TernaryError

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class ChatTemplateError(TernaryError):
    """The model's chat template failed to render (or raised on purpose, e.g. bad roles)."""


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` renders its body (HF tracks assistant spans)."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Any) -> str:
        return caller()


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _TemplateDict:
    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """``namespace()`` that refuses underscore attributes (no reaching into CPython internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - same trick as jinja2.Namespace
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _TemplateNamespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat templates cannot set underscore attribute {name!r}")


@functools.lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env.from_string(template)


def _plain(value: Any) -> Any:
    """Rebuild inputs from plain JSON types (the sandbox only knows those are harmless)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return f"<{type(value).__name__}>"


def _normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        if not isinstance(message, dict):
            raise ChatTemplateError(f"chat messages must be dicts, got {type(message).__name__}")
        message = {k: v for k, v in message.items() if v is not None}
        reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(_plain(message))
    return out


def render_chat(template: str, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True,
                tools: list[dict[str, Any]] | None = None, documents: list[dict[str, Any]] | None = None,
                special_tokens: dict[str, str] | None = None, **kwargs: Any) -> str:
    """The prompt text for ``messages``; ``kwargs`` (e.g. ``enable_thinking``) reach the template.

    Keyword arguments whose value is ``None`` are not passed, so the template's own default
    (``enable_thinking is defined`` checks) applies.
    """
    template_kwargs = {**(special_tokens or {}), **{k: v for k, v in kwargs.items() if v is not None}}
    try:
        compiled = _compile(template)
        return compiled.render(messages=_normalize_messages(messages), tools=_plain(tools),
                               documents=_plain(documents), add_generation_prompt=add_generation_prompt,
                               **_plain(template_kwargs))
    except jinja2.exceptions.TemplateError as exc:
        raise ChatTemplateError(f"the model's chat template failed: {exc}") from exc
