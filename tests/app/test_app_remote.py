"""app.core.remote against a real loopback HTTP server that speaks the OpenAI chat API (SSE streaming).

The fake server is plain http.server: each test sets what it answers (models, stream chunks, errors,
a stream cut mid-answer, a stall) and the client must turn it into the app's engine events or one
clear error, keeping the key out of the error text.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.core.remote import (
    RemoteClient,
    RemoteEngine,
    RemoteError,
    normalize_base_url,
    parse_remote_ref,
    remote_ref,
    sampling_params,
)
from runtime.generation import CancelToken, DoneEvent, GenerationSettings, TextEvent

KEY = "sk-test-secret-123"


def _chunk(delta: dict, finish: str | None = None) -> dict:
    return {"id": "c1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


class FakeOpenAI:
    """A loopback server; ``mode`` picks the answer of POST /v1/chat/completions."""

    def __init__(self, key: str | None = None) -> None:
        self.key = key
        self.mode = "ok"
        self.requests: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _json(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                if fake.key and self.headers.get("Authorization") != f"Bearer {fake.key}":
                    self._json(401, {"error": {"message": "Invalid API key", "type": "invalid_request_error"}})
                    return False
                return True

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                if not self._authorized():
                    return
                if self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": "m", "object": "model"},
                                                                {"id": "other", "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                if not self._authorized():
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                if self.path != "/v1/chat/completions":
                    self._json(404, {"error": {"message": "not found"}})
                    return
                if body.get("model") not in ("m", "other"):
                    self._json(404, {"error": {"message": f"model {body.get('model')} not found"}})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()

                def send(obj: dict | str) -> None:
                    payload = obj if isinstance(obj, str) else json.dumps(obj)
                    self.wfile.write(f"data: {payload}\n\n".encode())
                    self.wfile.flush()

                self.wfile.write(b": keep-alive\n\n")
                send(_chunk({"role": "assistant"}))
                send(_chunk({"reasoning_content": "think "}))
                send(_chunk({"content": "Hel"}))
                send(_chunk({"content": "lo ✓"}))
                if fake.mode == "cut":
                    self.close_connection = True
                    return  # the server "dies" mid-answer: no finish, no [DONE]
                if fake.mode == "stall":
                    time.sleep(3)
                    return
                send(_chunk({}, "stop"))
                send({"id": "c1", "object": "chat.completion.chunk", "choices": [],
                      "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}})
                send("[DONE]")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake():
    server = FakeOpenAI(key=KEY)
    yield server
    server.close()


def _run(engine: RemoteEngine, cancel: CancelToken | None = None) -> tuple[list[TextEvent], DoneEvent]:
    texts, done = [], None
    for ev in engine.generate([{"role": "user", "content": "hi"}], GenerationSettings(temperature=0.0, seed=3,
                                                                                         max_new_tokens=20), cancel):
        if isinstance(ev, TextEvent):
            texts.append(ev)
        else:
            done = ev
    assert done is not None
    return texts, done


def test_refs_and_urls() -> None:
    assert parse_remote_ref(remote_ref("box", "qwen3:8b")) == parse_remote_ref("remote:box#qwen3:8b")
    assert parse_remote_ref("remote:box#qwen3:8b").model == "qwen3:8b"
    assert parse_remote_ref("/models/a.gguf") is None
    assert normalize_base_url("http://h:1/v1/") == "http://h:1"
    with pytest.raises(ValueError, match="http://"):
        normalize_base_url("h:1")


def test_sampling_maps_to_api_parameters() -> None:
    params = sampling_params(GenerationSettings(temperature=0.2, top_p=0.9, top_k=20, seed=5, max_new_tokens=64,
                                                presence_penalty=0.5, enable_thinking=False))
    assert params == {"temperature": 0.2, "top_p": 0.9, "top_k": 20, "seed": 5, "max_tokens": 64,
                      "presence_penalty": 0.5, "chat_template_kwargs": {"enable_thinking": False}}


def test_lists_models_and_streams_answer_and_thinking(fake) -> None:
    client = RemoteClient(fake.url + "/v1", KEY)
    assert client.list_models() == ["m", "other"]
    engine = RemoteEngine("box", fake.url, "m", KEY)
    engine.check()
    texts, done = _run(engine)
    assert [(t.channel, t.text) for t in texts] == [("thinking", "think "), ("answer", "Hel"), ("answer", "lo ✓")]
    assert (done.text, done.thinking) == ("Hello ✓", "think ")
    assert done.stats.prompt_tokens == 7 and done.stats.generated_tokens == 3
    assert done.stats.finish_reason == "stop" and done.stats.ttft_s > 0
    sent = fake.requests[-1]
    assert sent["stream"] is True and sent["temperature"] == 0.0 and sent["max_tokens"] == 20
    assert sent["messages"] == [{"role": "user", "content": "hi"}]


def test_wrong_key_is_a_clear_401_without_the_key(fake) -> None:
    with pytest.raises(RemoteError, match="refused the API key") as err:
        RemoteClient(fake.url, "wrong-key-456").list_models()
    assert "wrong-key-456" not in str(err.value)


def test_unknown_model_and_missing_path(fake) -> None:
    with pytest.raises(RemoteError, match="does not serve 'nope'"):
        RemoteEngine("box", fake.url, "nope", KEY).check()
    with pytest.raises(RemoteError, match="404"):
        list(RemoteClient(fake.url, KEY).stream_chat("nope", [{"role": "user", "content": "x"}], {}))


def test_connection_refused() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(RemoteError, match="Could not connect"):
        RemoteClient(f"http://127.0.0.1:{port}").list_models()


def test_stream_cut_mid_answer_keeps_what_arrived(fake) -> None:
    fake.mode = "cut"
    engine = RemoteEngine("box", fake.url, "m", KEY)
    seen = []
    with pytest.raises(RemoteError, match="middle of the answer"):
        for ev in engine.generate([{"role": "user", "content": "hi"}], None):
            seen.append(ev)
    assert "".join(e.text for e in seen if isinstance(e, TextEvent) and e.channel == "answer") == "Hello ✓"


def test_read_timeout_is_reported(fake) -> None:
    fake.mode = "stall"
    engine = RemoteEngine("box", fake.url, "m", KEY, read_timeout=0.5)
    with pytest.raises(RemoteError, match="lost|stopped answering"):
        _run(engine)


def test_stop_closes_a_stalled_stream_at_once(fake) -> None:
    fake.mode = "stall"
    engine = RemoteEngine("box", fake.url, "m", KEY)
    cancel = CancelToken()
    threading.Timer(0.3, cancel.cancel).start()
    t0 = time.monotonic()
    texts, done = _run(engine, cancel)
    assert time.monotonic() - t0 < 2.0  # the server stalls 3 s; Stop must not wait for it
    assert done.stats.finish_reason == "cancelled"
    assert done.text == "Hello ✓"
