"""Which embedding model the knowledge base uses, and the shared lazily loaded handle."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.knowledge.embedder import EmbedderHandle, embedding_files, find_embedding_model


class FakeModel:
    closed = 0
    model_id = "fake"
    dim = 2

    def __init__(self) -> None:
        self.running = 0
        self.overlaps = 0

    def _work(self) -> list[float]:
        self.running += 1
        self.overlaps += self.running > 1
        time.sleep(0.01)
        self.running -= 1
        return [1.0, 0.0]

    def embed_documents(self, texts, *, cancel=None):
        return [self._work() for _ in texts]

    def embed_query(self, text, instruction="find"):
        return self._work()

    def close(self) -> None:
        FakeModel.closed += 1


def test_handle_loads_once_for_many_threads_and_reloads_after_close(tmp_path):
    calls = []

    def loader(path, device, **kwargs):
        calls.append((path, device, kwargs["max_tokens"]))
        time.sleep(0.05)  # a slow load: the other threads must wait for it, not start their own
        return FakeModel()

    handle = EmbedderHandle(tmp_path / "emb.gguf", "cpu", max_tokens=256, loader=loader)
    assert not handle.loaded
    got = []
    threads = [threading.Thread(target=lambda: got.append(handle.get())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [(tmp_path / "emb.gguf", "cpu", 256)] and len({id(m) for m in got}) == 1 and handle.loaded
    before = FakeModel.closed
    handle.close()
    assert FakeModel.closed == before + 1 and not handle.loaded
    handle.close()  # closing twice is harmless
    assert handle.get() is not got[0] and len(calls) == 2


def test_failed_load_is_not_remembered(tmp_path):
    attempts = []

    def loader(path, device, **kwargs):
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("file is being copied")
        return FakeModel()

    handle = EmbedderHandle(tmp_path / "e.gguf", loader=loader)
    with pytest.raises(OSError):
        handle.get()
    assert isinstance(handle.get().model, FakeModel) and len(attempts) == 2


def _catalog(*models):
    return SimpleNamespace(models=list(models))


def _model(role, files, local_path=None):
    return SimpleNamespace(role=role, local_path=local_path,
                           files=[SimpleNamespace(file=f, ms_file=f, default=d) for f, d in files])


def test_installed_embedding_model_is_found_by_catalog_role(tmp_path):
    emb_q8 = tmp_path / "Qwen3-Embedding-0.6B-Q8_0.gguf"
    emb_f16 = tmp_path / "Qwen3-Embedding-0.6B-f16.gguf"
    chat = tmp_path / "Bonsai.gguf"
    store = SimpleNamespace(installed=lambda: [SimpleNamespace(filename=p.name, path=p) for p in (chat, emb_f16, emb_q8)])
    catalog = _catalog(_model("", [(chat.name, True)]),
                       _model("embedding", [(emb_f16.name, False), (emb_q8.name, True)]))
    assert embedding_files(catalog, store) == [emb_q8, emb_f16]  # the default file first
    assert find_embedding_model(catalog, store) == emb_q8
    assert find_embedding_model(_catalog(_model("", [(chat.name, True)])), store) is None
    not_installed = SimpleNamespace(installed=lambda: [SimpleNamespace(filename=chat.name, path=chat)])
    assert find_embedding_model(catalog, not_installed) is None
    local = tmp_path / "my-embedder.gguf"
    local.write_bytes(b"GGUF")
    user = _model("embedding", [(local.name, True)], local_path=str(local))
    assert find_embedding_model(_catalog(user), not_installed) == Path(local)


def test_nothing_installed_in_a_fresh_home_means_full_text_search_only():
    assert embedding_files() == [] and find_embedding_model() is None  # the real catalog and store, no network


def test_shared_model_runs_one_call_at_a_time(tmp_path):
    """The indexing thread and a chat's retrieval embed at once: the model (not thread-safe) takes turns."""
    handle = EmbedderHandle(tmp_path / "e.gguf", loader=lambda *a, **k: FakeModel())
    shared = handle.get()
    assert (shared.model_id, shared.dim) == ("fake", 2)  # the model's own attributes
    calls = [lambda: shared.embed_documents(["a", "b", "c"]), lambda: shared.embed_query("q")] * 4
    threads = [threading.Thread(target=c) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert shared.model.overlaps == 0 and shared.embed_query("q", "other instruction") == [1.0, 0.0]
