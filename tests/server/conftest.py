"""A real ``ternary serve`` server on 127.0.0.1 (a free port) over a tiny random Qwen3 model."""

from __future__ import annotations

import pytest

from tests import model_factory as mf

MODEL_ID = "tiny-qwen3"


@pytest.fixture(scope="session")
def tiny_engine_for_server():
    from runtime.engine import Engine

    cfg = mf.tiny_qwen3_config(max_position_embeddings=2048)
    model = mf.make_ternary_hf_model(cfg, seed=4)
    data = mf.hf_model_to_model_data(model, mf.tiny_tokenizer())
    return Engine.load(data, device="cpu", context_length=1024)  # the template's tool list alone is ~650 tokens


def start(engine, **config):
    from runtime.server import EngineAccess, ServerConfig, start_server

    return start_server(EngineAccess(engine, MODEL_ID), ServerConfig(port=0, **config))


@pytest.fixture(scope="module")
def server(tiny_engine_for_server):
    handle = start(tiny_engine_for_server)
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def openai_client(server):
    import openai

    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def anthropic_client(server):
    import anthropic

    with anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=30) as client:
        yield client


def raw(url: str, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
        timeout: float = 30.0) -> tuple[int, dict, bytes]:
    """(status, headers, body) of one plain HTTP request (what no SDK lets a test send: bad JSON)."""
    import http.client
    from urllib.parse import urlsplit

    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()
