"""``POST /tokenize`` in vLLM's format: counts a text and chat messages exactly as the engine (and the chat
endpoint) does, says the per-request context, and fails like the other routes."""

from __future__ import annotations

import json

from runtime.generation import GenerationSettings
from runtime.server import EngineAccess, ServerConfig, start_server
from tests.server.conftest import MODEL_ID, raw, start

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count me, 数一数 ✓"}]


def _post(url: str, body: bytes | dict, headers: dict | None = None) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, _, out = raw(url, "POST", "/tokenize", data, headers)
    return status, json.loads(out)


def test_tokenize_prompt_and_messages_match_the_engine(server, tiny_engine_for_server):
    engine = tiny_engine_for_server
    text = "Hello there: 1234 apples, 数一数.\n\nA second paragraph."
    status, body = _post(server.url, {"model": MODEL_ID, "prompt": text})
    assert status == 200
    assert body["tokens"] == engine.encode_prompt(text) and body["count"] == len(body["tokens"])
    assert body["max_model_len"] == engine.request_context == 1024

    status, body = _post(server.url, {"model": MODEL_ID, "messages": MESSAGES, "add_generation_prompt": True})
    assert status == 200
    assert body["count"] == engine.count_tokens(MESSAGES) == len(body["tokens"])
    assert body["tokens"] == engine.encode_prompt(MESSAGES)

    # the template's switches count: thinking on renders another prompt than off
    on, off = (_post(server.url, {"model": MODEL_ID, "messages": MESSAGES,
                                  "chat_template_kwargs": {"enable_thinking": flag}})[1]["count"] for flag in (True, False))
    assert on == engine.count_tokens(MESSAGES, GenerationSettings(enable_thinking=True))
    assert off == engine.count_tokens(MESSAGES, GenerationSettings(enable_thinking=False))
    assert on != off

    # model is optional (as in vLLM); a text longer than the context is counted, not refused
    status, body = _post(server.url, {"prompt": "word " * 1500})
    assert status == 200 and body["count"] > body["max_model_len"]


def test_tokenize_count_is_the_prompt_a_chat_request_runs(server, openai_client):
    status, body = _post(server.url, {"model": MODEL_ID, "messages": MESSAGES})
    reply = openai_client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, max_tokens=1)
    assert status == 200 and reply.usage.prompt_tokens == body["count"]


def test_tokenize_errors_like_the_other_routes(server, tiny_engine_for_server):
    status, body = _post(server.url, b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    for bad in ({"model": MODEL_ID}, {"model": MODEL_ID, "prompt": "a", "messages": MESSAGES},
                {"model": MODEL_ID, "prompt": 5}, {"model": MODEL_ID, "messages": []},
                {"model": MODEL_ID, "messages": [{"role": "wizard", "content": "x"}]},
                {"model": MODEL_ID, "messages": MESSAGES, "add_generation_prompt": False},
                {"model": MODEL_ID, "messages": MESSAGES, "chat_template_kwargs": {"enable_thinking": "yes"}}):
        status, body = _post(server.url, bad)
        assert status == 400, bad
        assert body["error"]["type"] == "invalid_request_error"
    status, body = _post(server.url, {"model": "gpt-4o", "prompt": "a"})
    assert status == 404 and body["error"]["code"] == "model_not_found"
    assert raw(server.url, "GET", "/tokenize")[0] == 405

    handle = start(tiny_engine_for_server, api_key="s3cret", max_body_bytes=2048)
    try:
        assert _post(handle.url, {"prompt": "a"})[0] == 401
        status, body = _post(handle.url, {"prompt": "a"}, {"Authorization": "Bearer s3cret"})
        assert status == 200 and body["count"] == len(tiny_engine_for_server.encode_prompt("a"))
        assert _post(handle.url, {"prompt": "a" * 4000}, {"Authorization": "Bearer s3cret"})[0] == 413
    finally:
        handle.stop()

    access = EngineAccess(None, MODEL_ID)
    loading = start_server(access, ServerConfig(port=0))
    try:
        status, body = _post(loading.url, {"model": MODEL_ID, "prompt": "a"})
        assert status == 503 and "loading" in body["error"]["message"]
    finally:
        loading.stop()
