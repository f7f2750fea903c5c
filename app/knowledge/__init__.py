"""Knowledge bases: ask questions of local documents and get answers that cite their passages.

Qt-free core: :mod:`.passages` splits documents, :mod:`.store` keeps bases, files, passages, the
full-text index and vectors in SQLite, :mod:`.indexer` keeps a base up to date with its folders,
:mod:`.retrieval` finds the passages for a question (BM25, plus embeddings fused by RRF).
See docs/knowledge.md.
"""
