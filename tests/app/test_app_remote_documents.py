"""Documents over a remote model: RemoteEngine learns the context length and counts tokens through the
remote's tokenizer, so answers from documents and summaries fit a remote's context as they fit a local one.

Against a real ``ternary serve`` (runtime.server over the tiny model, on 127.0.0.1) the counts are exact and
the summarizer's prompts are checked by what the server itself tokenized; tiny loopback fakes stand in for a
llama-server (``/props``, ``/apply-template``, ``/tokenize {"content"}``) and for a server that cannot count
at all (the byte upper bound).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.core import remote as R
from app.core.remote import COUNT_EXACT, COUNT_UPPER_BOUND, RemoteEngine, RemoteError, byte_upper_bound
from app.core.summarize import Summarizer, SummaryStep
from runtime.generation import GenerationSettings
from tests import model_factory as mf

KEY = "docs-remote-key-456"
CONTEXT = 512
MESSAGES = [{"role": "system", "content": "Answer from the sources."},
            {"role": "user", "content": "What does the report say about 2024? 数一数 ✓"}]


@pytest.fixture(scope="module")
def tiny_engine():
    from runtime.engine import Engine

    cfg = mf.tiny_qwen3_config(max_position_embeddings=2048)
    data = mf.hf_model_to_model_data(mf.make_ternary_hf_model(cfg, seed=4), mf.tiny_tokenizer())
    engine = Engine.load(data, device="cpu", context_length=CONTEXT)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def served(tiny_engine):
    """The tiny engine behind ``ternary serve`` with a key; every prompt it runs is recorded (ids, max tokens)."""
    from runtime.server import EngineAccess, ServerConfig, start_server

    runs: list[tuple[int, int]] = []
    real = tiny_engine.generate_tokens

    def recorded(prompt_ids, settings=None, cancel=None, **kw):
        runs.append((len(prompt_ids), settings.max_new_tokens))
        # what was asked is recorded; the random model then answers briefly (the test is about prompts, and fast)
        yield from real(prompt_ids, dataclasses.replace(settings, max_new_tokens=min(settings.max_new_tokens, 12)),
                        cancel, **kw)

    tiny_engine.generate_tokens = recorded
    handle = start_server(EngineAccess(tiny_engine, "tiny"), ServerConfig(port=0, api_key=KEY))
    handle.runs = runs
    yield handle
    handle.stop()
    tiny_engine.generate_tokens = real


@pytest.fixture
def remote(served):
    engine = RemoteEngine("box", served.url, "tiny", KEY)
    engine.check()
    yield engine
    engine.close()


def test_learns_the_context_and_counts_exactly_like_the_local_engine(remote, tiny_engine, monkeypatch):
    assert remote.info.context_length == remote.info["context_length"] == tiny_engine.request_context == CONTEXT
    assert remote.info["token_counting"] == remote.token_counting == COUNT_EXACT  # decided at check()
    assert remote.require_context() == CONTEXT
    text = "A text with numbers 1234, 数一数 and ✓.\n\nAnother paragraph."
    assert remote.count_tokens(text) == tiny_engine.count_tokens(text)
    assert remote.count_tokens(MESSAGES) == tiny_engine.count_tokens(MESSAGES)
    for thinking in (True, False):  # the template switch reaches the count as it reaches the chat request
        s = GenerationSettings(enable_thinking=thinking)
        assert remote.count_tokens(MESSAGES, s) == tiny_engine.count_tokens(MESSAGES, s)
    assert remote.count_tokens(MESSAGES, GenerationSettings(enable_thinking=True)) != remote.count_tokens(MESSAGES)
    # a text longer than one request's body is counted in pieces cut after line breaks; the sum is the count
    monkeypatch.setattr(R, "COUNT_PIECE_CHARS", 40)
    long = "\n".join(f"Line {i}: some words, 数 {i * 37}." for i in range(30))
    assert remote.count_tokens(long) == tiny_engine.count_tokens(long)


def test_summarizer_over_the_remote_keeps_every_prompt_in_the_context(remote, served, tiny_engine):
    text = "\n\n".join(f"Paragraph {i}: the committee met on day {i} and decided item {i * 7} after a long "
                       "discussion about budgets, names and dates." for i in range(20))
    assert tiny_engine.count_tokens(text) > 3 * CONTEXT  # many parts
    steps: list[SummaryStep] = []
    served.runs.clear()
    summarizer = Summarizer(remote)  # reads engine.info.context_length, counts through /tokenize
    assert summarizer.context_length == CONTEXT
    result = summarizer.summarize(text, name="minutes.txt", on_step=steps.append)
    assert result.failure is None and result.complete, result.failure
    assert result.chunks > 3 and result.chunks_used == result.chunks and result.used_chars == len(text)
    assert result.total_tokens == tiny_engine.count_tokens(text)
    runs = list(served.runs)
    started = [s for s in steps if s.stats is None]
    assert len(runs) == len(started) > result.chunks  # every part, then at least one combining step
    for (prompt_tokens, max_tokens), step in zip(runs, started, strict=True):
        assert prompt_tokens == step.prompt_tokens  # the app's count is the server's own
        assert prompt_tokens + max_tokens <= CONTEXT
        assert max_tokens == summarizer.answer_tokens


# -- stand-ins for other servers -----------------------------------------------------------------------------
class Fake:
    """A loopback JSON server: ``routes[(method, path)](body) -> (status, json)``; unknown paths are 404.
    ``hits`` counts the requests per path."""

    def __init__(self, routes: dict[tuple[str, str], Callable[[dict], tuple[int, object]]]) -> None:
        self.hits: dict[str, int] = {}
        self.bodies: list[tuple[str, dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _answer(self, method: str) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(size)) if size else {}
                fake.hits[self.path] = fake.hits.get(self.path, 0) + 1
                fake.bodies.append((self.path, body))
                route = routes.get((method, self.path))
                status, out = route(body) if route else (404, {"error": {"message": "File Not Found"}})
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                self._answer("GET")

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                self._answer("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _llama_render(messages: list[dict]) -> str:
    return "".join(f"<|{m['role']}|> {m['content']} <|end|> " for m in messages) + "<|assistant|>"


@pytest.fixture
def llama_server():
    """llama-server's shapes: /v1/models without a context, /props with n_ctx, /apply-template, and a /tokenize
    that wants ``content`` (and, like llama-server, answers ``{"tokens": []}`` to vLLM's ``prompt``)."""
    def tokenize(body: dict) -> tuple[int, object]:
        content = body.get("content")
        return 200, {"tokens": list(range(len(content.split()))) if isinstance(content, str) else []}

    fake = Fake({
        ("GET", "/v1/models"): lambda b: (200, {"object": "list", "data": [
            {"id": "llama-model", "object": "model", "owned_by": "llamacpp", "meta": {"n_ctx_train": 131072}}]}),
        ("GET", "/props"): lambda b: (200, {"default_generation_settings": {"n_ctx": 2048, "params": {}},
                                            "total_slots": 1}),
        ("POST", "/apply-template"): lambda b: (200, {"prompt": _llama_render(b["messages"])}),
        ("POST", "/tokenize"): tokenize,
    })
    yield fake
    fake.close()


def test_llama_server_context_from_props_and_counts_by_its_template(llama_server):
    engine = RemoteEngine("llama", llama_server.url, "llama-model")
    try:
        engine.check()
        assert engine.info.context_length == 2048  # /props, not meta.n_ctx_train
        assert engine.token_counting == COUNT_EXACT
        assert engine.count_tokens(MESSAGES) == len(_llama_render(MESSAGES).split())
        assert engine.count_tokens("three little words") == 3
        assert engine.count_tokens("four words counted again") == 4
        # vLLM's form was tried once (the probe at check), then llama-server's way is kept
        vllm_tries = [b for p, b in llama_server.bodies if p == "/tokenize" and "content" not in b]
        assert len(vllm_tries) == 1
        assert {"content": _llama_render(MESSAGES), "add_special": True} in [b for p, b in llama_server.bodies]
    finally:
        engine.close()


@pytest.fixture
def no_tokenizer_server():
    """A vLLM-like /v1/models (``max_model_len``) and nothing to count tokens with (Ollama-like otherwise)."""
    fake = Fake({("GET", "/v1/models"): lambda b: (200, {"object": "list", "data": [
        {"id": "m", "object": "model", "max_model_len": 4096}, {"id": "bare", "object": "model"}]})})
    yield fake
    fake.close()


def test_without_a_tokenize_endpoint_counts_are_a_byte_upper_bound(no_tokenizer_server, tiny_engine):
    engine = RemoteEngine("plain", no_tokenizer_server.url, "m")
    try:
        engine.check()
        assert engine.info.context_length == 4096 and engine.require_context() == 4096
        assert engine.token_counting == COUNT_UPPER_BOUND == "upper bound (bytes)"
        hits = dict(no_tokenizer_server.hits)
        long = [{"role": "user", "content": "Ω " * 300}, {"role": "assistant", "content": "ok"}, *MESSAGES]
        for messages in (MESSAGES, long):
            for thinking in (None, True, False):
                s = GenerationSettings(enable_thinking=thinking)
                n = engine.count_tokens(messages, s)
                assert n == byte_upper_bound(messages) >= tiny_engine.count_tokens(messages, s)
        text = "Plain text, 数一数 ✓ " * 50
        assert engine.count_tokens(text) == len(text.encode()) + 2 >= tiny_engine.count_tokens(text)
        assert no_tokenizer_server.hits == hits  # the missing endpoints were not asked again
        assert hits.get("/tokenize") == 1 and hits.get("/apply-template") == 1
    finally:
        engine.close()


def test_a_remote_without_a_context_length_says_so(no_tokenizer_server):
    engine = RemoteEngine("plain", no_tokenizer_server.url, "bare")
    try:
        engine.check()  # chatting still works: loading does not fail
        assert engine.info.context_length == 0 and no_tokenizer_server.hits.get("/props") == 1
        with pytest.raises(RemoteError, match="plain does not report its context length"):
            engine.require_context()
    finally:
        engine.close()
