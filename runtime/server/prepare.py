"""From a parsed API request to what the engine runs: settings checked, prompt tokens counted.

Shared by both protocols. The prompt is rendered and tokenized here, before the request queues,
so a prompt that does not fit the context or a bad parameter is a 400 at once, and the Anthropic
stream can report ``input_tokens`` in its first event. Rendering and tokenizing read only the chat
template and the tokenizer, never the model, so they do not need the engine's lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from runtime.chat_template import ChatTemplateError
from runtime.errors import TernaryError
from runtime.generation import CancelToken, GenerationSettings
from runtime.sampling_params import MAX_SEED
from runtime.sampling_params import check as check_setting
from runtime.server.errors import APIError

MAX_STOPS = 16
MAX_TOP_LOGPROBS = 20


@dataclass
class Prepared:
    """A request ready for the engine: its prompt tokens and everything the decode loop needs."""

    prompt_ids: list[int]
    settings: GenerationSettings
    logprobs: int | None = None
    constraint: Any = None

    def run(self, engine: Any, cancel: CancelToken) -> Iterator[Any]:
        return engine.generate_tokens(self.prompt_ids, self.settings, cancel, logprobs=self.logprobs,
                                      constraint=self.constraint)


def setting(body: dict[str, Any], key: str) -> Any:
    """``body[key]`` checked with the runtime's range for the setting of that name (``None`` when absent)."""
    value = body.get(key)
    if value is None:
        return None
    problem = check_setting(key, value)
    if problem:
        raise APIError(400, f"{key}: {problem} Got {value!r}.", param=key)
    return value


def seed(body: dict[str, Any]) -> int | None:
    value = body.get("seed")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise APIError(400, f"seed must be a whole number from 0 to {MAX_SEED}, got {value!r}", param="seed")
    return value


def stops(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise APIError(400, f"{name} must be a string or a list of strings", param=name)
    if len(items) > MAX_STOPS:
        raise APIError(400, f"{name} may hold at most {MAX_STOPS} strings, got {len(items)}", param=name)
    return [s for s in items if s]


def max_tokens(value: Any, name: str, limit: int, default: int) -> int:
    if value is None:
        return min(default, limit)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise APIError(400, f"{name} must be a whole number of at least 1, got {value!r}", param=name)
    if value > limit:
        raise APIError(400, f"{name} is {value} but this server allows at most {limit}", param=name)
    return value


def flag(body: dict[str, Any], key: str) -> bool | None:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise APIError(400, f"{key} must be true or false, got {value!r}", param=key)
    return value


def engine_of(access: Any) -> Any:
    engine = access.engine
    if engine is None:
        raise APIError(503, "the model is loading; retry in a moment", retry_after=5)
    return engine


def json_constraint(engine: Any, schema: dict[str, Any] | None) -> Any:
    """A fresh JSON constraint for one request (the vocabulary index is cached by runtime.constrained)."""
    from runtime.constrained import json_constraint as make

    try:
        return make(engine.tokenizer, engine.model.vocab_size, schema)
    except TernaryError as exc:  # SchemaError: says which keyword it cannot enforce
        raise APIError(400, f"response_format: {exc}", param="response_format") from None


def encode_chat(engine: Any, messages: list[dict[str, Any]], settings: GenerationSettings | None,
                tools: list[dict[str, Any]] | None) -> list[int]:
    """The prompt ids of ``messages`` (and ``tools``) through the model's template, generation prompt added
    (``Engine.encode_prompt``: reads only the template and the tokenizer, so no lock is needed). Shared by the
    chat endpoints and ``/tokenize``, so a count is the prompt a chat request would run."""
    try:
        return engine.encode_prompt(messages, settings, tools=tools or None)  # exactly as Engine.generate renders
    except ChatTemplateError as exc:
        raise APIError(400, f"the messages could not be rendered: {exc}", param="messages") from None


def prepare_chat(engine: Any, messages: list[dict[str, Any]], settings: GenerationSettings,
                 tools: list[dict[str, Any]] | None, logprobs: int | None, constraint: Any) -> Prepared:
    """Render ``messages`` (:func:`encode_chat`); check the prompt fits."""
    return _checked(engine, encode_chat(engine, messages, settings, tools), settings, logprobs, constraint)


def prepare_text(engine: Any, prompt: str | list[int], settings: GenerationSettings, logprobs: int | None) -> Prepared:
    """A raw prompt (``/v1/completions``): text, or token ids."""
    if isinstance(prompt, str):
        ids = engine.encode_prompt(prompt)
    else:
        vocab = engine.model.vocab_size
        if any(not 0 <= t < vocab for t in prompt):
            raise APIError(400, f"prompt token ids must be in 0..{vocab - 1}", param="prompt")
        ids = list(prompt)
    return _checked(engine, ids, settings, logprobs, None)


def _checked(engine: Any, ids: list[int], settings: GenerationSettings, logprobs: int | None,
             constraint: Any) -> Prepared:
    ctx = engine.request_context
    if not ids:
        raise APIError(400, "the prompt is empty", param="messages")
    if len(ids) >= ctx:
        raise APIError(400, f"the prompt is {len(ids)} tokens but a request's context holds {ctx} (at least one "
                            "token must be left for the answer)", code="context_length_exceeded", param="messages")
    return Prepared(ids, settings, logprobs, constraint)


def matched_stop(engine: Any, token_ids: list[int], stop: list[str]) -> str | None:
    """Which stop string ended the answer: the one that starts first in the generated text (the
    engine's matcher cuts at the earliest)."""
    if not stop:
        return None
    text = engine.tokenizer.decode(token_ids)
    hits = [(at, -len(s), s) for s in stop if (at := text.find(s)) >= 0]
    return min(hits)[2] if hits else None
