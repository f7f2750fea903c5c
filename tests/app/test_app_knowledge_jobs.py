"""IndexJob / IndexRunner on their own: where the work runs, what a failed run says, what reaches the GUI."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import threading  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from app.knowledge.embedder import EmbedderHandle  # noqa: E402
from app.knowledge.store import KnowledgeStore  # noqa: E402
from app.knowledge_jobs import IndexJob, IndexRunner, resolve_embedder  # noqa: E402


class TinyEmbedder:
    model_id = "tiny"
    dim = 4

    def embed_documents(self, texts, *, cancel=None):
        return np.tile(np.array([1.0, 0, 0, 0], np.float32), (len(texts), 1))

    def embed_query(self, text):
        return np.array([1.0, 0, 0, 0], np.float32)

    def close(self):
        pass


@pytest.fixture
def store(tmp_path):
    s = KnowledgeStore(tmp_path / "knowledge.sqlite3")
    yield s
    s.close()


def test_the_model_loads_and_the_files_are_read_on_the_jobs_thread_not_the_gui_thread(qtbot, store, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(40):
        (folder / f"n{i:02d}.md").write_text(f"# Note {i}\n\nword{i} appears here.\n", encoding="utf-8")
    threads = []

    def loader(path, device, **kwargs):
        threads.append(threading.current_thread())
        assert kwargs["cancel"] is not None  # cancelling a job also stops a slow model load
        return TinyEmbedder()

    handle = EmbedderHandle(tmp_path / "embed.gguf", loader=loader)
    base = store.create_base("Notes")
    store.add_paths(base.id, [folder])
    job = IndexJob(store.path, base.id, embedder=handle)
    delivered, gui = [], threading.current_thread()
    job.progress.connect(lambda p: delivered.append((p.phase, p.done_files, threading.current_thread() is gui)))
    job.finished.connect(lambda r: delivered.append(("finished", r.added, threading.current_thread() is gui)))
    with qtbot.waitSignal(job.finished, timeout=30_000):
        job.start()
    assert threads and threads[0] is not gui and handle.loaded
    assert job.report.added == 40 and job.report.embedded == store.passage_count([base.id]) > 0
    assert all(on_gui for *_, on_gui in delivered)
    assert delivered[-1] == ("finished", 40, True)  # nothing after the end
    assert 1 <= len(delivered) - 1 <= 40 + 10  # coalesced: never more deliveries than steps
    assert len(store.vectors([base.id], "tiny")[0]) == job.report.embedded
    assert job.wait(1) and not job.is_running()
    with pytest.raises(RuntimeError, match="already started"):
        job.start()


def test_a_run_that_cannot_open_the_store_fails_with_words_and_the_queue_goes_on(qtbot, store, tmp_path):
    blocked = tmp_path / "a-folder.sqlite3"
    blocked.mkdir()
    runner = IndexRunner(blocked)
    messages = []
    job = runner.index(1)
    job.failed.connect(messages.append)
    job.finished.connect(lambda r: messages.append("finished?!"))
    with qtbot.waitSignal(runner.idle, timeout=10_000):
        pass
    assert messages == [job.error] and str(blocked) in job.error and "not a file" in job.error
    assert job.report is None and not runner.busy()
    assert runner.shutdown(1)


def test_inputs_that_cannot_work_are_refused_clearly(qtbot, tmp_path):
    with pytest.raises(ValueError, match="in-memory"):
        IndexJob(":memory:", 1)
    with pytest.raises(ValueError, match="in-memory"):
        IndexRunner(":memory:")
    tiny = TinyEmbedder()
    assert resolve_embedder(None) is None
    assert resolve_embedder(tiny) is tiny
    assert resolve_embedder(lambda: tiny) is tiny
    handle = EmbedderHandle(tmp_path / "e.gguf", loader=lambda *a, **k: tiny)
    assert resolve_embedder(handle).model is tiny  # a handle gives its thread-safe wrapper of the model
    with pytest.raises(TypeError, match="not an embedder"):
        resolve_embedder("Qwen3-Embedding-0.6B.gguf")


def test_shutdown_cancels_a_running_job_and_keeps_the_files_it_finished(qtbot, store, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(30):
        (folder / f"f{i:02d}.txt").write_text(f"text number {i}\n", encoding="utf-8")
    release = threading.Event()
    started = threading.Event()

    class Gate:
        """Lets the files phase run, then blocks the first embedding batch until released."""

        model_id, dim = "gate", 4

        def embed_documents(self, texts, *, cancel=None):
            started.set()
            release.wait(10)
            return np.ones((len(texts), 4), np.float32) / 2

        def embed_query(self, text):
            return np.ones(4, np.float32) / 2

    base = store.create_base("Many")
    store.add_paths(base.id, [folder])
    runner = IndexRunner(store.path, embedder=Gate())
    job = runner.index(base.id)
    qtbot.waitUntil(started.is_set, timeout=20_000)  # the runner starts jobs from the event loop
    threading.Timer(0.2, release.set).start()
    assert runner.shutdown(10)  # cancelled; waits for the batch in flight
    assert job.cancelled and job.wait(0)
    assert sum(f.status == "indexed" for f in store.files(base.id)) == 30
    with qtbot.waitSignal(job.finished, timeout=5_000):
        pass
    assert job.report.cancelled and runner.current is None
