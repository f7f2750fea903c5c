"""Anthropic-compatible ``POST /v1/messages``: content blocks (text, thinking, tool_use,
tool_result) in and out, and the stream of named events Anthropic sends (message_start,
content_block_start/delta/stop, ping, message_delta, message_stop)."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from runtime.generation import DoneEvent, GenerationSettings, TextEvent
from runtime.server import prepare as P
from runtime.server.errors import APIError, anthropic_error_body
from runtime.server.gateway import Gateway, as_api_error
from runtime.server.sse import SSE_HEADERS, sse_event
from runtime.server.tool_calls import ToolCall, ToolCallParser, split_tool_calls


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise APIError(400, f"{where}: content must be a string or an array of content blocks")
    for b in content:
        if not isinstance(b, dict) or not isinstance(b.get("type"), str):
            raise APIError(400, f"{where}: every content block needs a type")
    return content


def _text(blocks: list[dict[str, Any]], where: str) -> str:
    out = []
    for b in blocks:
        if b["type"] != "text" or not isinstance(b.get("text"), str):
            raise APIError(400, f"{where}: only text blocks are supported here, got {b['type']!r}")
        out.append(b["text"])
    return "".join(out)


def convert_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Anthropic system + messages -> the chat template's messages (tool_result -> role "tool")."""
    out: list[dict[str, Any]] = []
    system = body.get("system")
    if system is not None:
        out.append({"role": "system", "content": _text(_blocks(system, "system"), "system")})
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise APIError(400, "messages must be a non-empty array")
    for i, m in enumerate(raw):
        where = f"messages.{i}"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise APIError(400, f"{where}: role must be user or assistant")
        blocks = _blocks(m.get("content"), where)
        if m["role"] == "user":
            text: list[str] = []
            for b in blocks:
                if b["type"] == "tool_result":
                    inner = b.get("content", "")
                    result = _text(_blocks(inner, where), where) if inner else ""
                    if b.get("is_error"):
                        result = f"Error: {result}"
                    out.append({"role": "tool", "content": result, "tool_call_id": str(b.get("tool_use_id", ""))})
                elif b["type"] == "text":
                    text.append(str(b.get("text", "")))
                else:
                    raise APIError(400, f"{where}: {b['type']!r} blocks are not supported")
            if text:
                out.append({"role": "user", "content": "".join(text)})
        else:
            msg: dict[str, Any] = {"role": "assistant", "content": ""}
            calls = []
            for b in blocks:
                if b["type"] == "text":
                    msg["content"] += str(b.get("text", ""))
                elif b["type"] == "thinking":
                    msg["reasoning_content"] = str(b.get("thinking", ""))
                elif b["type"] == "redacted_thinking":
                    continue
                elif b["type"] == "tool_use":
                    if not isinstance(b.get("name"), str) or not isinstance(b.get("input", {}), dict):
                        raise APIError(400, f"{where}: tool_use needs a name and an input object")
                    calls.append({"id": b.get("id"), "type": "function",
                                  "function": {"name": b["name"], "arguments": b.get("input", {})}})
                else:
                    raise APIError(400, f"{where}: {b['type']!r} blocks are not supported")
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
    return out


def convert_tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = body.get("tools")
    if not tools:
        return None
    if not isinstance(tools, list):
        raise APIError(400, "tools must be an array")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not t["name"]:
            raise APIError(400, f"tools.{i}: a tool needs a name")
        out.append({"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                      "parameters": t.get("input_schema", {"type": "object"})}})
    choice = body.get("tool_choice") or {"type": "auto"}
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "none":
        return None
    if kind != "auto":
        raise APIError(400, "tool_choice 'any' and 'tool' are not supported; use 'auto' or 'none' "
                            "(the model decides whether to call a tool)")
    return out


def settings_from(body: dict[str, Any], limit: int) -> GenerationSettings:
    if body.get("max_tokens") is None:
        raise APIError(400, "max_tokens is required", param="max_tokens")
    thinking = body.get("thinking")
    enable = None
    if isinstance(thinking, dict):
        enable = {"enabled": True, "disabled": False}.get(thinking.get("type"))
    return GenerationSettings(
        temperature=P.setting(body, "temperature"), top_p=P.setting(body, "top_p"),
        top_k=P.setting(body, "top_k"), max_new_tokens=P.max_tokens(body["max_tokens"], "max_tokens", limit, 1),
        stop=P.stops(body.get("stop_sequences"), "stop_sequences"), enable_thinking=enable,
        ignore_eos=bool(P.flag(body, "ignore_eos")),  # extension (benchmarks, tests)
    )


def stop_reason(done: DoneEvent | None, tool_calls: bool) -> str:
    if tool_calls:
        return "tool_use"
    reason = done.stats.finish_reason if done is not None else "end_turn"
    return {"length": "max_tokens", "stop_string": "stop_sequence"}.get(reason, "end_turn")


def _tool_block(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_" + call.id.removeprefix("call_"), "name": call.name,
            "input": call.arguments}


async def messages(gw: Gateway, request: Request) -> Response:
    import anyio

    body = await gw.read_json(request)
    gw.check_model(body.get("model"))
    msgs = convert_messages(body)
    tools = convert_tools(body)
    settings = settings_from(body, gw.config.max_tokens_limit)
    stream = bool(P.flag(body, "stream"))
    engine = P.engine_of(gw.access)
    prepared = await anyio.to_thread.run_sync(lambda: P.prepare_chat(engine, msgs, settings, tools, None, None))
    job = gw.submit(prepared.run)
    mid, n_prompt = "msg_" + secrets.token_hex(12), len(prepared.prompt_ids)
    if stream:
        return StreamingResponse(_stream(gw, job, engine, prepared, mid, n_prompt, bool(tools)),
                                 media_type="text/event-stream", headers=SSE_HEADERS)
    out = await gw.collect(job, request)
    text, calls = split_tool_calls(out.answer) if tools else (out.answer, [])
    content: list[dict[str, Any]] = []
    if out.thinking:
        content.append({"type": "thinking", "thinking": out.thinking, "signature": ""})
    if text.strip() or not calls:
        content.append({"type": "text", "text": text})
    content += [_tool_block(c) for c in calls]
    reason = stop_reason(out.done, bool(calls))
    stop_seq = P.matched_stop(engine, out.done.stats.token_ids, prepared.settings.stop) if reason == "stop_sequence" else None
    return JSONResponse({"id": mid, "type": "message", "role": "assistant", "model": gw.model_id, "content": content,
                         "stop_reason": reason, "stop_sequence": stop_seq,
                         "usage": {"input_tokens": n_prompt, "output_tokens": out.done.stats.generated_tokens}})


async def _stream(gw: Gateway, job: Any, engine: Any, prepared: P.Prepared, mid: str, n_prompt: int,
                  tools: bool) -> AsyncIterator[bytes]:
    state = {"index": -1, "kind": None}

    def ev(data: dict[str, Any]) -> bytes:
        return sse_event(data, data["type"])

    def close() -> list[bytes]:
        if state["kind"] is None:
            return []
        out = []
        if state["kind"] == "thinking":
            out.append(ev({"type": "content_block_delta", "index": state["index"],
                           "delta": {"type": "signature_delta", "signature": ""}}))
        out.append(ev({"type": "content_block_stop", "index": state["index"]}))
        state["kind"] = None
        return out

    def open_block(kind: str, block: dict[str, Any]) -> list[bytes]:
        out = close()
        state["index"] += 1
        state["kind"] = kind
        out.append(ev({"type": "content_block_start", "index": state["index"], "content_block": block}))
        return out

    def text(kind: str, piece: str) -> list[bytes]:
        out = [] if state["kind"] == kind else open_block(kind, {"type": "text", "text": ""} if kind == "text"
                                                          else {"type": "thinking", "thinking": "", "signature": ""})
        delta = {"type": "text_delta", "text": piece} if kind == "text" else {"type": "thinking_delta", "thinking": piece}
        out.append(ev({"type": "content_block_delta", "index": state["index"], "delta": delta}))
        return out

    n_calls = 0

    def answer_items(items: list[tuple[str, Any]]) -> list[bytes]:
        nonlocal n_calls
        out: list[bytes] = []
        for kind, value in items:
            if kind == "text":
                out += text("text", value)
            else:
                block = _tool_block(value)
                out += open_block("tool_use", {**block, "input": {}})
                out.append(ev({"type": "content_block_delta", "index": state["index"],
                               "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"],
                                                                                                ensure_ascii=False)}}))
                out += close()
                n_calls += 1
        return out

    yield ev({"type": "message_start", "message": {
        "id": mid, "type": "message", "role": "assistant", "model": gw.model_id, "content": [], "stop_reason": None,
        "stop_sequence": None, "usage": {"input_tokens": n_prompt, "output_tokens": 0}}})
    yield ev({"type": "ping"})
    parser = ToolCallParser() if tools else None
    done = None
    try:
        async for item in gw.events(job):
            if isinstance(item, TextEvent):
                if item.channel == "thinking":
                    for b in text("thinking", item.text):
                        yield b
                elif parser is not None:
                    for b in answer_items(parser.feed(item.text)):
                        yield b
                else:
                    for b in text("text", item.text):
                        yield b
            elif isinstance(item, DoneEvent):
                done = item
    except Exception as exc:  # noqa: BLE001 - the stream ends with an error event, the server goes on
        yield ev(anthropic_error_body(as_api_error(exc)))
        return
    if parser is not None:
        for b in answer_items(parser.flush()):
            yield b
    if state["index"] < 0:  # an empty answer still has one (empty) text block, as Anthropic sends it
        for b in text("text", ""):
            yield b
    for b in close():
        yield b
    reason = stop_reason(done, n_calls > 0)
    stop_seq = (P.matched_stop(engine, done.stats.token_ids, prepared.settings.stop)
                if reason == "stop_sequence" and done is not None else None)
    yield ev({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": stop_seq},
              "usage": {"output_tokens": done.stats.generated_tokens if done is not None else 0}})
    yield ev({"type": "message_stop"})
