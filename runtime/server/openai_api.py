"""OpenAI-compatible endpoints: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``, and vLLM's
``/tokenize``.

Request fields map onto :class:`~runtime.generation.GenerationSettings`; thinking goes to
``reasoning_content`` (as vLLM, DeepSeek and llama-server send it), Qwen3 ``<tool_call>`` blocks to
``tool_calls``, and ``response_format`` to a JSON constraint. Extensions other servers accept too:
``chat_template_kwargs.enable_thinking``, ``reasoning_effort``, ``ignore_eos``, ``top_k``, ``min_p``,
``repetition_penalty``.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from runtime.generation import DoneEvent, GenerationSettings, TextEvent, TokenEvent
from runtime.server import prepare as P
from runtime.server.errors import APIError, openai_error_body
from runtime.server.gateway import Gateway, as_api_error
from runtime.server.sse import OPENAI_DONE, SSE_HEADERS, sse_event
from runtime.server.tool_calls import ToolCallParser, split_tool_calls

DEFAULT_CHAT_MAX_TOKENS = 4096
DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
_ROLES = {"system", "developer", "user", "assistant", "tool"}


# -- requests ---------------------------------------------------------------------------------------
def text_of(content: Any, where: str) -> str:
    """A message's content as text: a string, or an array of text parts (other parts are refused)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise APIError(400, f"{where}: only text content parts are supported, got {kind!r}", param="messages")
            out.append(part["text"])
        return "".join(out)
    raise APIError(400, f"{where}: content must be a string or an array of text parts", param="messages")


def convert_messages(raw: Any) -> list[dict[str, Any]]:
    """OpenAI messages -> the chat template's (assistant tool_calls with parsed arguments, tool results)."""
    if not isinstance(raw, list) or not raw:
        raise APIError(400, "messages must be a non-empty array", param="messages")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            raise APIError(400, f"{where}: role must be one of {sorted(_ROLES)}", param="messages")
        role = "system" if m["role"] == "developer" else m["role"]
        msg: dict[str, Any] = {"role": role, "content": text_of(m.get("content"), where)}
        if role == "assistant":
            reasoning = m.get("reasoning_content") or m.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                msg["reasoning_content"] = reasoning
            calls = m.get("tool_calls")
            if calls:
                msg["tool_calls"] = [_template_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
        elif role == "tool":
            if m.get("tool_call_id") is not None:
                msg["tool_call_id"] = str(m["tool_call_id"])
        out.append(msg)
    return out


def _template_call(call: Any, where: str) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise APIError(400, f"{where}: a tool call needs function.name", param="messages")
    args = fn.get("arguments") or "{}"
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            raise APIError(400, f"{where}: function.arguments is not valid JSON", param="messages") from None
    return {"id": call.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": args}}


def convert_tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The tools the template lists, or ``None`` (no tools, or tool_choice "none")."""
    tools = body.get("tools")
    choice = body.get("tool_choice", "auto")
    if not tools:
        return None
    if not isinstance(tools, list):
        raise APIError(400, "tools must be an array", param="tools")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise APIError(400, f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}", param="tools")
    if choice == "none":
        return None
    if choice not in ("auto", None):
        raise APIError(400, "tool_choice 'required' and named functions are not supported; use 'auto' or 'none' "
                            "(the model decides whether to call a tool)", param="tool_choice")
    return tools


def settings_from(body: dict[str, Any], max_tokens: int) -> GenerationSettings:
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise APIError(400, "chat_template_kwargs must be an object", param="chat_template_kwargs")
    thinking = kwargs.get("enable_thinking")
    if thinking is not None and not isinstance(thinking, bool):
        raise APIError(400, "chat_template_kwargs.enable_thinking must be true or false", param="chat_template_kwargs")
    effort = body.get("reasoning_effort")
    if effort is not None and not isinstance(effort, str):
        raise APIError(400, "reasoning_effort must be a string", param="reasoning_effort")
    return GenerationSettings(
        **{k: P.setting(body, k) for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                                            "presence_penalty", "frequency_penalty")},
        max_new_tokens=max_tokens, seed=P.seed(body), stop=P.stops(body.get("stop"), "stop"),
        enable_thinking=thinking, reasoning_effort=effort, ignore_eos=bool(P.flag(body, "ignore_eos")),
    )


def _check_n(body: dict[str, Any]) -> None:
    if body.get("n") not in (None, 1):
        raise APIError(400, "n must be 1 (one answer per request)", param="n")


def _include_usage(body: dict[str, Any]) -> bool:
    opts = body.get("stream_options") or {}
    return bool(isinstance(opts, dict) and opts.get("include_usage"))


def _response_format(body: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
    """(constrain?, schema) for response_format."""
    rf = body.get("response_format")
    if rf is None or (isinstance(rf, dict) and rf.get("type") == "text"):
        return False, None
    if not isinstance(rf, dict) or rf.get("type") not in ("json_object", "json_schema"):
        raise APIError(400, "response_format.type must be text, json_object or json_schema", param="response_format")
    if rf["type"] == "json_object":
        return True, None
    js = rf.get("json_schema")
    if not isinstance(js, dict) or not isinstance(js.get("schema", {}), dict):
        raise APIError(400, "response_format.json_schema must be an object with a 'schema' object",
                       param="response_format")
    return True, js.get("schema") or {"type": "object"}


# -- logprobs ---------------------------------------------------------------------------------------
def _token_text(b: bytes) -> str:
    """A token's text; part of a UTF-8 character is written ``bytes:\\xe4\\xbd`` as OpenAI does (the
    ``bytes`` field has the exact bytes), so distinct partial tokens stay distinct keys."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{x:02x}" for x in b)


def chat_logprobs(tokens: list[Any]) -> list[dict[str, Any]]:
    return [{"token": _token_text(t.token_bytes), "logprob": t.logprob, "bytes": list(t.token_bytes),
             "top_logprobs": [{"token": _token_text(b), "logprob": lp, "bytes": list(b)} for _, b, lp in t.top]}
            for t in tokens]


def completion_logprobs(tokens: list[Any], offset: int = 0) -> dict[str, Any]:
    texts = [_token_text(t.token_bytes) for t in tokens]
    offsets, pos = [], offset
    for s in texts:
        offsets.append(pos)
        pos += len(s)
    return {"tokens": texts, "token_logprobs": [t.logprob for t in tokens],
            "top_logprobs": [{_token_text(b): lp for _, b, lp in t.top} for t in tokens], "text_offset": offsets}


# -- responses --------------------------------------------------------------------------------------
def finish_reason(done: DoneEvent | None, tool_calls: bool = False) -> str:
    if tool_calls:
        return "tool_calls"
    reason = done.stats.finish_reason if done is not None else "stop"
    return "length" if reason == "length" else "stop"


def usage(done: DoneEvent | None, prompt_tokens: int) -> dict[str, int]:
    generated = done.stats.generated_tokens if done is not None else 0
    return {"prompt_tokens": prompt_tokens, "completion_tokens": generated, "total_tokens": prompt_tokens + generated}


async def chat_completions(gw: Gateway, request: Request) -> Response:
    import anyio

    body = await gw.read_json(request)
    gw.check_model(body.get("model"))
    _check_n(body)
    messages = convert_messages(body.get("messages"))
    tools = convert_tools(body)
    limit = gw.config.max_tokens_limit
    max_tok = body.get("max_completion_tokens", body.get("max_tokens"))
    settings = settings_from(body, P.max_tokens(max_tok, "max_tokens", limit, DEFAULT_CHAT_MAX_TOKENS))
    logprobs = None
    if P.flag(body, "logprobs"):
        top = body.get("top_logprobs") or 0
        if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= P.MAX_TOP_LOGPROBS:
            raise APIError(400, f"top_logprobs must be a whole number from 0 to {P.MAX_TOP_LOGPROBS}",
                           param="top_logprobs")
        logprobs = top
    elif body.get("top_logprobs") is not None:
        raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    constrain, schema = _response_format(body)
    stream = bool(P.flag(body, "stream"))
    include_usage = _include_usage(body)
    engine = P.engine_of(gw.access)

    def prepare() -> P.Prepared:
        constraint = P.json_constraint(engine, schema) if constrain else None
        return P.prepare_chat(engine, messages, settings, tools, logprobs, constraint)

    prepared = await anyio.to_thread.run_sync(prepare)
    job = gw.submit(prepared.run)
    rid, created, n_prompt = "chatcmpl-" + secrets.token_hex(12), int(time.time()), len(prepared.prompt_ids)
    if stream:
        return StreamingResponse(_chat_stream(gw, job, rid, created, n_prompt, bool(tools), logprobs is not None,
                                              include_usage), media_type="text/event-stream", headers=SSE_HEADERS)
    out = await gw.collect(job, request)
    content, calls = split_tool_calls(out.answer) if tools else (out.answer, [])
    message: dict[str, Any] = {"role": "assistant", "content": content if content.strip() or not calls else None}
    if out.thinking:
        message["reasoning_content"] = out.thinking
    if calls:
        message["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments_json()}} for c in calls]
    choice = {"index": 0, "message": message, "finish_reason": finish_reason(out.done, bool(calls)),
              "logprobs": {"content": chat_logprobs(out.tokens)} if logprobs is not None else None}
    return JSONResponse({"id": rid, "object": "chat.completion", "created": created, "model": gw.model_id,
                         "choices": [choice], "usage": usage(out.done, n_prompt)})


async def _chat_stream(gw: Gateway, job: Any, rid: str, created: int, n_prompt: int, tools: bool,
                       want_logprobs: bool, include_usage: bool) -> AsyncIterator[bytes]:
    base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": gw.model_id}
    pending: list[Any] = []  # token logprobs waiting for the text they produced

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        lp = None
        if want_logprobs:
            lp = {"content": chat_logprobs(pending)}
            pending.clear()
        data = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}]}
        if include_usage:
            data["usage"] = None
        return sse_event(data)

    parser = ToolCallParser() if tools else None
    n_calls = 0
    done = None

    def answer_items(items: list[tuple[str, Any]]) -> list[bytes]:
        nonlocal n_calls
        out = []
        for kind, value in items:
            if kind == "text":
                out.append(chunk({"content": value}))
            else:
                out.append(chunk({"tool_calls": [{"index": n_calls, "id": value.id, "type": "function",
                                                  "function": {"name": value.name,
                                                               "arguments": value.arguments_json()}}]}))
                n_calls += 1
        return out

    yield chunk({"role": "assistant", "content": ""})
    try:
        async for ev in gw.events(job):
            if isinstance(ev, TokenEvent):
                pending.append(ev)
            elif isinstance(ev, TextEvent):
                if ev.channel == "thinking":
                    yield chunk({"reasoning_content": ev.text})
                elif parser is not None:
                    for piece in answer_items(parser.feed(ev.text)):
                        yield piece
                else:
                    yield chunk({"content": ev.text})
            elif isinstance(ev, DoneEvent):
                done = ev
    except Exception as exc:  # noqa: BLE001 - the stream ends with an error event, the server goes on
        yield sse_event(openai_error_body(as_api_error(exc)))
        yield OPENAI_DONE
        return
    if parser is not None:
        for piece in answer_items(parser.flush()):
            yield piece
    yield chunk({}, finish_reason(done, n_calls > 0))
    if include_usage:
        yield sse_event({**base, "choices": [], "usage": usage(done, n_prompt)})
    yield OPENAI_DONE


async def completions(gw: Gateway, request: Request) -> Response:
    import anyio

    body = await gw.read_json(request)
    gw.check_model(body.get("model"))
    _check_n(body)
    for unsupported in ("suffix", "best_of"):
        if body.get(unsupported) not in (None, 1) or (unsupported == "suffix" and body.get("suffix")):
            raise APIError(400, f"{unsupported} is not supported", param=unsupported)
    if P.flag(body, "echo"):
        raise APIError(400, "echo is not supported", param="echo")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if not (isinstance(prompt, str) or (isinstance(prompt, list) and prompt
                                        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt))):
        raise APIError(400, "prompt must be a string or an array of token ids (one prompt per request)",
                       param="prompt")
    limit = gw.config.max_tokens_limit
    settings = settings_from(body, P.max_tokens(body.get("max_tokens"), "max_tokens", limit,
                                                DEFAULT_COMPLETION_MAX_TOKENS))
    logprobs = body.get("logprobs")
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                 or not 0 <= logprobs <= P.MAX_TOP_LOGPROBS):
        raise APIError(400, f"logprobs must be a whole number from 0 to {P.MAX_TOP_LOGPROBS}", param="logprobs")
    stream = bool(P.flag(body, "stream"))
    include_usage = _include_usage(body)
    engine = P.engine_of(gw.access)
    prepared = await anyio.to_thread.run_sync(lambda: P.prepare_text(engine, prompt, settings, logprobs))
    job = gw.submit(prepared.run)
    rid, created, n_prompt = "cmpl-" + secrets.token_hex(12), int(time.time()), len(prepared.prompt_ids)
    base = {"id": rid, "object": "text_completion", "created": created, "model": gw.model_id}
    if stream:
        return StreamingResponse(_completion_stream(gw, job, base, n_prompt, logprobs is not None, include_usage),
                                 media_type="text/event-stream", headers=SSE_HEADERS)
    out = await gw.collect(job, request)
    choice = {"index": 0, "text": out.answer, "finish_reason": finish_reason(out.done),
              "logprobs": completion_logprobs(out.tokens) if logprobs is not None else None}
    return JSONResponse({**base, "choices": [choice], "usage": usage(out.done, n_prompt)})


async def _completion_stream(gw: Gateway, job: Any, base: dict[str, Any], n_prompt: int, want_logprobs: bool,
                             include_usage: bool) -> AsyncIterator[bytes]:
    pending: list[Any] = []
    offset = 0
    done = None

    def chunk(text: str, finish: str | None = None) -> bytes:
        nonlocal offset
        lp = None
        if want_logprobs:
            lp = completion_logprobs(pending, offset)
            offset += sum(len(s) for s in lp["tokens"])
            pending.clear()
        data = {**base, "choices": [{"index": 0, "text": text, "logprobs": lp, "finish_reason": finish}]}
        if include_usage:
            data["usage"] = None
        return sse_event(data)

    try:
        async for ev in gw.events(job):
            if isinstance(ev, TokenEvent):
                pending.append(ev)
            elif isinstance(ev, TextEvent) and ev.channel == "answer":
                yield chunk(ev.text)
            elif isinstance(ev, DoneEvent):
                done = ev
    except Exception as exc:  # noqa: BLE001 - the stream ends with an error event, the server goes on
        yield sse_event(openai_error_body(as_api_error(exc)))
        yield OPENAI_DONE
        return
    yield chunk("", finish_reason(done))
    if include_usage:
        yield sse_event({**base, "choices": [], "usage": usage(done, n_prompt)})
    yield OPENAI_DONE


async def tokenize(gw: Gateway, request: Request) -> Response:
    """``POST /tokenize`` in vLLM's format: ``{"prompt": text}`` or ``{"messages": [...]}`` (rendered through the
    chat template exactly as ``/v1/chat/completions`` renders them, generation prompt included) ->
    ``{"count", "max_model_len", "tokens"}``. What a client needs to fit text into a request's context
    (the app's answers from documents and summaries over a remote model). Runs no model and takes no queue
    slot; a text longer than the context is counted, not refused. ``model`` is optional, as in vLLM."""
    import anyio

    body = await gw.read_json(request)
    if body.get("model") is not None:
        gw.check_model(body["model"])
    prompt, raw_messages = body.get("prompt"), body.get("messages")
    if (prompt is None) == (raw_messages is None):
        raise APIError(400, "send either prompt (a string) or messages (an array)", param="prompt")
    special = P.flag(body, "add_special_tokens")
    engine = P.engine_of(gw.access)
    if prompt is not None:
        if not isinstance(prompt, str):
            raise APIError(400, "prompt must be a string", param="prompt")

        def encode() -> list[int]:
            if special is False:
                return engine.tokenizer.encode(prompt, add_special_tokens=False)
            return engine.encode_prompt(prompt)  # as /v1/completions encodes a text prompt
    else:
        messages = convert_messages(raw_messages)
        tools = convert_tools(body)
        settings = settings_from(body, 1)  # only chat_template_kwargs / reasoning_effort reach the template
        if P.flag(body, "add_generation_prompt") is False or P.flag(body, "continue_final_message") or special:
            raise APIError(400, "messages are counted as a chat request renders them: add_generation_prompt "
                                "true, continue_final_message and add_special_tokens false", param="messages")

        def encode() -> list[int]:
            return P.encode_chat(engine, messages, settings, tools)
    ids = await anyio.to_thread.run_sync(encode)
    return JSONResponse({"count": len(ids), "max_model_len": engine.request_context, "tokens": ids})


async def models(gw: Gateway, request: Request) -> Response:
    engine = gw.access.engine
    meta: dict[str, Any] = {"parallel_requests": gw.scheduler.parallel, "scheduling": gw.scheduler.scheduling()}
    if engine is not None:
        meta.update(context_length=engine.request_context, device=engine.info.device, arch=engine.info.arch)
    return JSONResponse({"object": "list", "data": [{"id": gw.model_id, "object": "model", "created": gw.created,
                                                     "owned_by": "ternary-chat", "meta": meta}]})
