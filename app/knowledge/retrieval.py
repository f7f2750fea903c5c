"""Finding the passages that answer a question: BM25 over FTS5 always, plus embeddings when available.

Why both: full-text search works offline from the first minute and is exact for names, numbers and
rare words; embeddings find passages that say the same thing in other words. The two rankings are
fused by reciprocal rank fusion (score = sum of 1 / (60 + rank)), which needs no score calibration
between BM25 and cosine. Questions are natural language ("How many cores does the X200 have?"), so
the FTS query is an OR of the question's content words (stop words dropped) and BM25 ranks the
passages that share the most and rarest of them first; Chinese is matched by character pairs, as
:func:`app.knowledge.store.index_terms` indexes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from app.knowledge.indexer import Embedder
from app.knowledge.store import KnowledgeStore, StoredPassage

RRF_K = 60
CANDIDATES = 50  # passages each ranking contributes before fusion (at least; 4 x k when k is larger)
_SCAN_ROWS = 16384  # vectors converted to float32 at a time: bounded memory for any base size

_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
_WORD = re.compile(r"[^\W_]+")
STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both
but by can could did do does doing down during each few for from further had has have having he her here hers
herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
once only or other our ours ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours yourself yourselves many much tell say says said does please
kind sort thing things get got one also may might must shall us use used using called name named
""".split())
# Question words and particles that carry no topic in a Chinese question; removed before pairing.
_ZH_STOP = re.compile("请问|什么|多少|哪些|哪个|哪里|哪儿|怎么样|怎么|怎样|如何|为什么|为何|是否|是不是|有没有|"
                      "一下|可以|能否|告诉|我们|你们|他们|这个|那个|这些|那些|[的了吗呢吧啊是有在和与及或个几把被就都也还又]")


@dataclass
class Hit:
    passage: StoredPassage
    score: float  # fused RRF score (higher is better)
    fts_rank: int | None  # 1-based rank in the BM25 list, None if not there
    dense_rank: int | None  # 1-based rank by cosine similarity, None if not there (or no embedder)


def query_terms(question: str) -> list[str]:
    """The question's search terms: content words (lower-cased) and CJK character pairs, in order.

    If every word is a stop word ("What is it?"), the words are kept rather than searching nothing.
    """
    terms: list[str] = []
    latin = _CJK_RUN.sub(" ", question)
    words = [w.lower() for w in _WORD.findall(latin)]
    content = [w for w in words if w not in STOP_WORDS and (len(w) > 1 or w.isdigit())]
    terms += content or words
    for run in _CJK_RUN.findall(question):
        for piece in _ZH_STOP.split(run):
            if len(piece) == 1:
                terms.append(piece)
            terms += [piece[i:i + 2] for i in range(len(piece) - 1)]
    if not terms:  # a CJK question of stop characters only
        for run in _CJK_RUN.findall(question):
            terms += list(run)
    seen: set[str] = set()
    return [t for t in terms if not (t in seen or seen.add(t))]


def fts_query(question: str) -> str:
    """An FTS5 MATCH expression: the question's terms, quoted, joined by OR ("" if none)."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in query_terms(question))


def search(store: KnowledgeStore, base_ids: list[int], query: str, *, k: int = 8,
           embedder: Embedder | None = None) -> list[Hit]:
    """The ``k`` best passages of the bases for ``query``, best first (see the module docstring)."""
    if not base_ids or not query.strip() or k <= 0:
        return []
    depth = max(CANDIDATES, 4 * k)
    fts = [pid for pid, _ in store.fts_search(base_ids, fts_query(query), depth)]
    dense = dense_ranking(store, base_ids, query, embedder, depth) if embedder is not None else []
    scores: dict[int, float] = {}
    fts_rank = {pid: r for r, pid in enumerate(fts, 1)}
    dense_rank = {pid: r for r, pid in enumerate(dense, 1)}
    for ranks in (fts_rank, dense_rank):
        for pid, r in ranks.items():
            scores[pid] = scores.get(pid, 0.0) + 1.0 / (RRF_K + r)
    best = sorted(scores, key=lambda pid: (-scores[pid], fts_rank.get(pid, depth + 1), pid))[:k]
    passages = {p.id: p for p in store.passages_by_id(best)}
    return [Hit(passages[pid], scores[pid], fts_rank.get(pid), dense_rank.get(pid)) for pid in best if pid in passages]


def dense_ranking(store: KnowledgeStore, base_ids: list[int], query: str, embedder: Embedder,
                  depth: int) -> list[int]:
    """Passage ids by cosine similarity to the query (vectors are unit length), best first."""
    ids, vectors = store.vectors(base_ids, embedder.model_id)
    if not len(ids):
        return []
    q = np.asarray(embedder.embed_query(query), np.float32).reshape(-1)
    if q.shape[0] != vectors.shape[1]:
        return []  # vectors of another dimension under the same model id: the base needs re-indexing
    return [int(ids[i]) for i in top_cosine(vectors, q, depth)]


def top_cosine(vectors: np.ndarray, query: np.ndarray, depth: int) -> np.ndarray:
    """Row indices of the ``depth`` rows of ``vectors`` (unit rows, float16 or float32) most similar to ``query``.

    Why torch for float16: numpy has no float16 matrix product (converting 100k x 1024 to float32
    costs ~0.5 s on 2 cores) while torch's CPU half-precision ``mv`` reads the float16 matrix
    directly (~20 ms); scores differ from float32 by < 1e-4 (docs/knowledge.md).
    """
    query = np.asarray(query, np.float32)
    if vectors.dtype == np.float16:
        scores = _half_scores(vectors, query)
    else:
        scores = np.asarray(vectors, np.float32) @ query
    depth = min(depth, len(scores))
    top = np.argpartition(-scores, depth - 1)[:depth]
    return top[np.argsort(-scores[top], kind="stable")]


def _half_scores(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    try:
        import torch

        matrix = torch.from_numpy(vectors if vectors.flags.writeable else vectors.copy())
        return torch.mv(matrix, torch.from_numpy(query).half()).float().numpy()
    except (ImportError, RuntimeError):  # a torch build without CPU half mv: convert a block at a time
        scores = np.empty(len(vectors), np.float32)
        for start in range(0, len(vectors), _SCAN_ROWS):
            block = vectors[start:start + _SCAN_ROWS].astype(np.float32)
            scores[start:start + len(block)] = block @ query
        return scores
