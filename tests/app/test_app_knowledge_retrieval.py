"""Retrieval: the 30-question done-when (FTS alone), Chinese terms, and the hybrid RRF path."""

import hashlib
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from app.knowledge.indexer import index_base
from app.knowledge.retrieval import RRF_K, fts_query, query_terms, search, top_cosine
from app.knowledge.store import KnowledgeStore
from tests.app.knowledge_samples import QUESTIONS, write_corpus


class FakeEmbedder:
    """Deterministic hashed bag-of-words vectors; ``synonyms`` maps words onto a shared meaning
    so a query can match a passage that shares no word with it (what real embeddings add)."""

    def __init__(self, model_id: str = "fake-a", dim: int = 64, synonyms: dict[str, str] | None = None) -> None:
        self.model_id = model_id
        self.dim = dim
        self.synonyms = synonyms or {}
        self.calls = 0

    def _vector(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, np.float32)
        for word in re.findall(r"\w+", text.lower()):
            word = self.synonyms.get(word, word)
            v[int.from_bytes(hashlib.sha1((self.model_id + word).encode()).digest()[:4], "little") % self.dim] += 1
        n = np.linalg.norm(v)
        return v / n if n else v

    def embed_documents(self, texts, *, cancel=None):
        self.calls += 1
        return np.stack([self._vector(t) for t in texts])

    def embed_query(self, text):
        return self._vector(text)


@pytest.fixture
def corpus_store(tmp_path):
    folder = write_corpus(tmp_path / "docs")
    store = KnowledgeStore(tmp_path / "kb.sqlite3")
    base = store.create_base("Samples")
    store.add_paths(base.id, [folder])
    report = index_base(store, base.id)
    assert not report.problems and report.added == 11
    yield store, base.id
    store.close()


def test_thirty_questions_top3_with_fts_alone(corpus_store):
    store, base_id = corpus_store
    found, misses = 0, []
    for question, name, snippet in QUESTIONS:
        hits = search(store, [base_id], question, k=3)
        assert len(hits) <= 3 and all(h.dense_rank is None and h.fts_rank for h in hits)
        if any(h.passage.path.name == name and snippet in h.passage.text for h in hits):
            found += 1
        else:
            misses.append(question)
    rate = found / len(QUESTIONS)
    print(f"\nFTS top-3 hit rate: {found}/{len(QUESTIONS)} = {rate:.0%}; missed: {misses}")
    assert len(QUESTIONS) == 30
    assert rate >= 0.9, misses


def test_citations_carry_page_heading_and_line(corpus_store):
    store, base_id = corpus_store
    pdf = search(store, [base_id], "oven preheat temperature cast iron pot", k=1)[0].passage
    assert pdf.path.name == "bread.pdf" and pdf.page == 4 and pdf.location() == "bread.pdf, p. 4"
    md = search(store, [base_id], "orion-driver-dkms kernel module", k=1)[0].passage
    assert md.location() == "orion_x200.md, Orion X200 accelerator > Installation > Linux"
    assert md.line is not None and "orion-driver-dkms" in (Path(md.path).read_text().splitlines()[md.line - 1])
    code = search(store, [base_id], "compute_checksum crc32", k=1)[0].passage
    assert code.location() == "archive.py, def compute_checksum"
    docx = search(store, [base_id], "probation period", k=1)[0].passage
    assert docx.location() == "handbook.docx, Starting at the company"


def test_query_terms_english_and_chinese():
    assert query_terms("How many compute cores does the X200 have?") == ["compute", "cores", "x200"]
    assert query_terms("What is it?") == ["what", "is", "it"]  # all stop words: keep them
    assert query_terms("龙井茶产于哪里？") == ["龙井", "井茶", "茶产", "产于"]
    assert query_terms("一线城市出差住宿标准是多少？")[:3] == ["一线", "线城", "城市"]
    assert fts_query('say "hello" x') == '"hello"'
    assert search(KnowledgeStore(":memory:"), [1], "   ") == []


def test_hybrid_rrf_finds_a_paraphrase_and_fuses_ranks(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "cars.txt").write_text("The car needs new tyres before winter.\n", encoding="utf-8")
    (docs / "boats.txt").write_text("The boat needs a new sail before summer.\n", encoding="utf-8")
    (docs / "trains.txt").write_text("Trains run every hour on the automobile-free island.\n", encoding="utf-8")
    store = KnowledgeStore(":memory:")
    base = store.create_base("b")
    store.add_paths(base.id, [docs])
    embedder = FakeEmbedder(synonyms={"automobile": "car", "vehicle": "car"})
    report = index_base(store, base.id, embedder=embedder)
    assert report.embedded == 3 and store.vector_models(base.id) == {"fake-a"}

    fts_only = search(store, [base.id], "vehicle tyres")
    assert [h.passage.path.name for h in fts_only] == ["cars.txt"]  # "tyres" matches; "vehicle" nowhere
    hits = search(store, [base.id], "vehicle", embedder=embedder)
    assert search(store, [base.id], "vehicle") == []  # no shared word: FTS finds nothing
    assert hits[0].passage.path.name == "cars.txt" and hits[0].fts_rank is None and hits[0].dense_rank == 1
    assert hits[0].score == pytest.approx(1 / (RRF_K + 1))
    both = search(store, [base.id], "car tyres", embedder=embedder)[0]
    assert both.passage.path.name == "cars.txt" and both.fts_rank == 1 and both.dense_rank == 1
    assert both.score == pytest.approx(2 / (RRF_K + 1))


def test_model_change_reembeds_and_unembedded_base_stays_fts_only(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(5):
        (docs / f"n{i}.md").write_text(f"# Note {i}\n\nTopic number {i} is about subject{i}.\n", encoding="utf-8")
    store = KnowledgeStore(":memory:")
    base = store.create_base("b")
    store.add_paths(base.id, [docs])
    plain = index_base(store, base.id)
    assert plain.embedded == 0 and store.vector_models(base.id) == set()
    a = FakeEmbedder("model-a")
    hits = search(store, [base.id], "subject3", embedder=a)  # no vectors: FTS only, no error
    assert hits and hits[0].dense_rank is None and hits[0].passage.path.name == "n3.md"

    assert index_base(store, base.id, embedder=a).embedded == 5
    assert index_base(store, base.id, embedder=a).embedded == 0  # nothing new
    b = FakeEmbedder("model-b", dim=32)
    report = index_base(store, base.id, embedder=b)
    assert report.embedded == 5 and report.unchanged == 5 and store.vector_models(base.id) == {"model-b"}
    ids, vectors = store.vectors([base.id], "model-b")
    assert vectors.shape == (5, 32) and vectors.dtype == np.float16
    assert search(store, [base.id], "subject3", embedder=b)[0].dense_rank == 1
    assert search(store, [base.id], "subject3", embedder=a)[0].dense_rank is None  # old model's vectors gone


@pytest.mark.parametrize("torch_available", [True, False])
def test_top_cosine_matches_exact_ranking(monkeypatch, torch_available):
    if not torch_available:  # the numpy fallback for a torch without CPU half-precision mv
        monkeypatch.setitem(sys.modules, "torch", None)
    rng = np.random.default_rng(0)
    v = rng.standard_normal((40000, 48)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    q = v[123] + 0.01 * rng.standard_normal(48).astype(np.float32)
    top = top_cosine(v.astype(np.float16), q, 10)
    exact = np.argsort(-(v @ q))[:10]
    assert top[0] == 123 and set(top[:5]) == set(exact[:5])
    assert list(top_cosine(v, q, 10)) == list(exact)
