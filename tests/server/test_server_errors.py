"""Errors in each API's own format, limits, the API key, the loopback rule, a queue that is full,
a client that goes away mid-stream, and an engine failure that must not take the server down."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from runtime.server import EngineAccess, ServerConfig, ServerError, start_server
from tests.server.conftest import MODEL_ID, raw, start

CHAT = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


def _post(url: str, path: str, body: bytes | dict, headers: dict | None = None) -> tuple[int, dict, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, hdrs, out = raw(url, "POST", path, data, headers)
    return status, hdrs, json.loads(out)


def _wait(predicate, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_bad_json_and_bad_parameters_are_400_in_each_format(server):
    status, _, body = _post(server.url, "/v1/chat/completions", b"{not json")
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    assert "not valid JSON" in body["error"]["message"]
    status, _, body = _post(server.url, "/v1/messages", b"[1, 2]")
    assert status == 400 and body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    status, _, body = _post(server.url, "/v1/chat/completions", {**CHAT, "temperature": 5})
    assert status == 400 and body["error"]["param"] == "temperature"
    status, _, body = _post(server.url, "/v1/chat/completions", {**CHAT, "max_tokens": 10**6})
    assert status == 400 and body["error"]["param"] == "max_tokens"
    status, _, body = _post(server.url, "/v1/messages", {"model": MODEL_ID, "messages": CHAT["messages"]})
    assert status == 400 and "max_tokens" in body["error"]["message"]
    status, _, body = _post(server.url, "/v1/chat/completions", {**CHAT, "messages": [{"role": "user",
                                                                                        "content": "x " * 2000}]})
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"


def test_unknown_model_is_404_for_both_sdks(openai_client, anthropic_client):
    import anthropic
    import openai

    with pytest.raises(openai.NotFoundError) as e:
        openai_client.chat.completions.create(model="gpt-4o", messages=CHAT["messages"])
    assert "gpt-4o" in str(e.value)
    with pytest.raises(anthropic.NotFoundError) as e2:
        anthropic_client.messages.create(model="claude-x", max_tokens=4, messages=CHAT["messages"])
    assert e2.value.body["error"]["type"] == "not_found_error"


def test_oversized_body_is_413(tiny_engine_for_server):
    handle = start(tiny_engine_for_server, max_body_bytes=4096)
    try:
        big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
        status, _, body = _post(handle.url, "/v1/chat/completions", big)
        assert status == 413 and "4096" in body["error"]["message"]
        status, _, body = _post(handle.url, "/v1/messages", big)
        assert status == 413 and body["error"]["type"] == "request_too_large"
    finally:
        handle.stop()


def test_api_key_is_required_when_set(tiny_engine_for_server):
    import anthropic
    import openai

    handle = start(tiny_engine_for_server, api_key="s3cret")
    try:
        with openai.OpenAI(base_url=handle.url + "/v1", api_key="wrong", max_retries=0) as bad:
            with pytest.raises(openai.AuthenticationError):
                bad.models.list()
        with anthropic.Anthropic(base_url=handle.url, api_key="wrong", max_retries=0) as bad_a:
            with pytest.raises(anthropic.AuthenticationError):
                bad_a.messages.create(model=MODEL_ID, max_tokens=2, messages=CHAT["messages"])
        with openai.OpenAI(base_url=handle.url + "/v1", api_key="s3cret", max_retries=0) as good:
            assert good.models.list().data[0].id == MODEL_ID
        with anthropic.Anthropic(base_url=handle.url, api_key="s3cret", max_retries=0) as good_a:
            assert good_a.messages.create(model=MODEL_ID, max_tokens=2, messages=CHAT["messages"]).usage.output_tokens
        assert raw(handle.url, "GET", "/health")[0] == 200  # public: no key needed to ask if it is up
    finally:
        handle.stop()


def test_refuses_public_bind_without_key_and_a_taken_port(tiny_engine_for_server):
    access = EngineAccess(tiny_engine_for_server, MODEL_ID)
    with pytest.raises(ServerError, match="without an API key"):
        start_server(access, ServerConfig(host="0.0.0.0", port=0))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        with pytest.raises(ServerError, match="cannot listen"):
            start_server(access, ServerConfig(port=taken.getsockname()[1]))


def test_unknown_path_is_a_json_404(server):
    status, _, body = raw(server.url, "GET", "/v2/nothing")
    assert status == 404 and "no such endpoint" in json.loads(body)["error"]["message"]


def test_loading_model_is_503(tiny_engine_for_server):
    access = EngineAccess(None, MODEL_ID)
    handle = start_server(access, ServerConfig(port=0))
    try:
        status, headers, body = _post(handle.url, "/v1/chat/completions", CHAT)
        assert status == 503 and "loading" in body["error"]["message"] and headers["retry-after"]
        assert raw(handle.url, "GET", "/health")[0] == 503
        access.set_engine(tiny_engine_for_server)
        assert _post(handle.url, "/v1/chat/completions", CHAT)[0] == 200
    finally:
        handle.stop()


def test_queue_full_is_429_with_retry_after(tiny_engine_for_server):
    lock = threading.Lock()  # held here = the app's chat is using the engine
    handle = start_server(EngineAccess(tiny_engine_for_server, MODEL_ID, lock), ServerConfig(port=0, max_queue=1))
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(_post(handle.url, "/v1/chat/completions", CHAT)[0]))
               for _ in range(2)]
    try:
        with lock:
            threads[0].start()
            _wait(lambda: handle.stats().active == 1)
            threads[1].start()
            _wait(lambda: handle.stats().queued == 1)
            status, headers, body = _post(handle.url, "/v1/chat/completions", CHAT)
            assert status == 429 and int(headers["retry-after"]) >= 1 and "queue is full" in body["error"]["message"]
            status, _, body = _post(handle.url, "/v1/messages", CHAT)
            assert status == 429 and body["error"]["type"] == "rate_limit_error"
        for t in threads:
            t.join(30)
        assert results == [200, 200]
        assert handle.stats().requests_served == 2
    finally:
        handle.stop()


def test_client_disconnect_mid_stream_frees_the_slot(tiny_engine_for_server):
    import http.client
    from urllib.parse import urlsplit

    handle = start(tiny_engine_for_server)
    try:
        u = urlsplit(handle.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        body = {**CHAT, "max_tokens": 200, "stream": True, "ignore_eos": True, "temperature": 0}
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        resp.fp.readline()  # the first event arrived: generation is running
        _wait(lambda: handle.stats().active == 1)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        _wait(lambda: handle.stats().active == 0, timeout=5)
        st = handle.stats()
        assert st.tokens_generated < 200  # stopped early, not run to the end
        assert st.requests_cancelled == 1 and st.requests_served == 0
        status, _, out = _post(handle.url, "/v1/chat/completions", CHAT)
        assert status == 200 and out["usage"]["completion_tokens"] >= 1
        status, _, body = raw(handle.url, "GET", "/health")
        health = json.loads(body)
        assert health["requests_served"] == 1 and health["requests_cancelled"] == 1
    finally:
        handle.stop()


class _FailsOnce:
    """The engine, except that its first generation raises (a failure deep inside the engine)."""

    def __init__(self, engine) -> None:
        self._engine = engine
        self.failed = False

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def generate_tokens(self, *args, **kwargs):
        if not self.failed:
            self.failed = True
            raise RuntimeError("simulated kernel failure")
        return self._engine.generate_tokens(*args, **kwargs)


def test_engine_failure_is_500_and_the_server_keeps_serving(tiny_engine_for_server):
    handle = start_server(EngineAccess(_FailsOnce(tiny_engine_for_server), MODEL_ID), ServerConfig(port=0))
    try:
        status, _, body = _post(handle.url, "/v1/chat/completions", CHAT)
        assert status == 500 and "simulated kernel failure" in body["error"]["message"]
        assert _post(handle.url, "/v1/chat/completions", CHAT)[0] == 200
        st = handle.stats()
        assert st.requests_failed == 1 and st.requests_served == 1
    finally:
        handle.stop()
