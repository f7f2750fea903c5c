"""Embeddings through our own runtime (runtime.embedding) equal transformers' on the same weights.

The reference is Qwen3-Embedding's model-card recipe run by ``transformers``: ``AutoModel`` (the
bare Qwen3 base model) on the same weights, the tokenizer with ``padding=True, truncation=True,
max_length``, left padding, the last position's hidden state, L2 normalisation. Covered: dense
random weights from a Hugging Face folder saved like the real repo (no ``model.`` prefix, no
lm_head, tied) and from a GGUF F16 file; exactly ternary weights through the ternary kernels
(GGUF PQ2_0); Chinese text; truncation; the query format; packing; errors; cancel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from runtime.embedding import (
    DEFAULT_QUERY_INSTRUCTION,
    EmbeddingModel,
    EmbeddingModelError,
    format_query,
    is_embedding_file,
)
from runtime.errors import CancelledError, InvalidSettingError, TernaryError
from runtime.formats.gguf_writer import write_gguf
from runtime.generation import CancelToken
from runtime.model.qwen3 import DenseLinear
from tests import model_factory as mf

MAX_TOKENS = 48
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "你好，世界！今天天气很好。我们在测试中文分词。",
    "def main():\n    return [x * 2 for x in range(10)]",
    "Emoji: 😀 🎉 and numbers 3.14159",
    "Hello, world! " * 60,  # far longer than MAX_TOKENS: truncated, the EOS kept last
    "",
]
GGUF_POOLING = {"qwen3.pooling_type": ("u32", 3)}  # what llama.cpp writes for Qwen3-Embedding


def reference_vectors(folder_or_model, tokenizer, texts: list[str], max_tokens: int = MAX_TOKENS) -> np.ndarray:
    """transformers' vectors: the Qwen3-Embedding model card's code (left padding, last token)."""
    from transformers import AutoModel, PreTrainedTokenizerFast

    model = folder_or_model
    if isinstance(folder_or_model, str | Path):
        model = AutoModel.from_pretrained(folder_or_model, dtype=torch.float32)
    tok = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<|endoftext|>", padding_side="left")
    batch = tok(texts, padding=True, truncation=True, max_length=max_tokens, return_tensors="pt")
    with torch.no_grad():
        hidden = model.eval()(**batch).last_hidden_state[:, -1]
    return torch.nn.functional.normalize(hidden.float(), p=2, dim=-1).numpy()


def assert_cosines(ours: np.ndarray, ref: np.ndarray, floor: float = 0.9999) -> None:
    assert ours.shape == ref.shape and ours.dtype == np.float32
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cos = (ours * ref).sum(-1) / np.linalg.norm(ref, axis=1)
    assert cos.min() >= floor, cos


@pytest.fixture(scope="module")
def dense() -> tuple:
    """(hf model, tokenizer) with random dense weights, tied embeddings like Qwen3-Embedding."""
    cfg = mf.tiny_qwen3_config(tie=True)
    return mf.make_dense_hf_model(cfg, seed=3), mf.embedding_tokenizer()


@pytest.fixture(scope="module")
def dense_folder(dense, tmp_path_factory) -> Path:
    model, tok = dense
    return mf.write_embedding_hf_folder(model, tok, tmp_path_factory.mktemp("emb") / "Qwen3-Embedding-tiny")


@pytest.fixture(scope="module")
def dense_embedder(dense_folder) -> EmbeddingModel:
    return EmbeddingModel.load(dense_folder, "cpu", max_tokens=MAX_TOKENS)


def test_dense_hf_folder_matches_transformers(dense, dense_folder, dense_embedder):
    em = dense_embedder
    assert em.dim == 256 and em.max_tokens == MAX_TOKENS
    assert all(isinstance(layer.down_proj, DenseLinear) for layer in em.model.layers)  # kept dense
    assert em.model.lm_head is None and em.model.cache.max_positions == 0  # no head, no KV cache
    assert_cosines(em.embed_documents(TEXTS), reference_vectors(dense_folder, dense[1], TEXTS))


def test_bf16_folder_like_the_real_repo(dense, tmp_path):
    """The real repo stores bf16: our vectors equal transformers' on the same bf16-rounded weights."""
    model, tok = dense
    folder = mf.write_embedding_hf_folder(model, tok, tmp_path / "bf16", dtype=torch.bfloat16)
    em = EmbeddingModel.load(folder, "cpu", max_tokens=MAX_TOKENS)
    assert_cosines(em.embed_documents(TEXTS[:3]), reference_vectors(folder, tok, TEXTS[:3]))


def test_dense_gguf_f16_matches_transformers(dense, tmp_path):
    model, tok = dense
    rounded = mf.make_dense_hf_model(model.config, seed=3).half().float()  # the weights F16 stores
    path = write_gguf(mf.dense_model_data(rounded, tok), tmp_path / "emb-f16.gguf", "F16",
                      extra_metadata=GGUF_POOLING)
    em = EmbeddingModel.load(path, "cpu", max_tokens=MAX_TOKENS)
    assert em.model_id == f"emb-f16.gguf:{path.stat().st_size}"
    assert_cosines(em.embed_documents(TEXTS), reference_vectors(rounded.model, tok, TEXTS))


def test_ternary_gguf_runs_the_ternary_kernels_and_matches(tmp_path):
    cfg = mf.tiny_qwen3_config(tie=True)
    model, tok = mf.make_ternary_hf_model(cfg, seed=5), mf.embedding_tokenizer()
    path = mf.write_gguf(mf.hf_model_to_model_data(model, tok), tmp_path / "emb-pq2.gguf", "PQ2_0")
    em = EmbeddingModel.load(path, "cpu", max_tokens=MAX_TOKENS)
    assert not any(isinstance(layer.down_proj, DenseLinear) for layer in em.model.layers)
    assert_cosines(em.embed_documents(TEXTS), reference_vectors(model.model, tok, TEXTS))


def test_truncation_keeps_the_eos_last(dense_embedder):
    em = dense_embedder
    ids = em.token_ids(TEXTS[4])
    assert len(ids) == MAX_TOKENS and ids[-1] == mf.TOKEN_IDS["<|endoftext|>"]
    assert em.token_ids("") == [mf.TOKEN_IDS["<|endoftext|>"]]
    longer = em.embed_documents([TEXTS[4], TEXTS[4] * 3])
    assert np.allclose(longer[0], longer[1], atol=1e-6)  # everything past max_tokens is ignored


def test_query_instruction_format(dense_embedder):
    em = dense_embedder
    assert format_query("what is x?", "Find it") == "Instruct: Find it\nQuery:what is x?"
    q = em.embed_query("fox")
    assert q.shape == (256,) and q.dtype == np.float32
    as_doc = em.embed_documents([f"Instruct: {DEFAULT_QUERY_INSTRUCTION}\nQuery:fox", "fox"])
    assert np.allclose(q, as_doc[0], atol=1e-6)
    assert not np.allclose(q, as_doc[1], atol=1e-3)  # documents are plain text
    assert np.allclose(em.embed_query("fox", instruction=""), as_doc[1], atol=1e-6)
    other = em.embed_query("fox", instruction="Retrieve code")
    assert not np.allclose(q, other, atol=1e-3)


def test_packed_passes_equal_one_text_at_a_time(dense_embedder, monkeypatch):
    em = dense_embedder
    packed = em.embed_documents(TEXTS)
    single = np.stack([em.embed_documents([t])[0] for t in TEXTS])
    assert np.allclose(packed, single, atol=1e-5)
    assert em.embed_documents([]).shape == (0, 256)
    passes: list[tuple[int, int]] = []
    assert [em.count_tokens(t) for t in TEXTS] == [37, 48, 44, 30, 48, 1]
    monkeypatch.setattr(em, "pack_tokens", 2 * MAX_TOKENS)  # two texts a pass
    small = em.embed_documents(TEXTS, progress=lambda done, total: passes.append((done, total)))
    assert np.allclose(small, packed, atol=1e-5)
    assert passes == [(2, 6), (4, 6), (6, 6)]


def test_cancel_between_passes_and_at_load(dense_embedder, dense_folder, monkeypatch):
    em = dense_embedder
    monkeypatch.setattr(em, "pack_tokens", 1)  # one text per pass
    token = CancelToken()
    seen: list[int] = []

    def progress(done: int, total: int) -> None:
        seen.append(done)
        if done == 2:
            token.cancel()

    with pytest.raises(CancelledError):
        em.embed_documents(TEXTS, cancel=token, progress=progress)
    assert seen == [1, 2]
    cancelled = CancelToken()
    cancelled.cancel()
    with pytest.raises(CancelledError):
        EmbeddingModel.load(dense_folder, "cpu", cancel=cancelled)
    midway = CancelToken()  # cancelled while the weights are being read
    fractions: list[float] = []
    with pytest.raises(CancelledError):
        EmbeddingModel.load(dense_folder, "cpu", cancel=midway,
                            progress=lambda stage, f: fractions.append(f) or (f > 0.3 and midway.cancel()))
    assert 0.3 < fractions[-1] < 0.5


def test_progress_reports_loading_stages(dense_folder):
    seen: list[tuple[str, float]] = []
    em = EmbeddingModel.load(dense_folder, "cpu", max_tokens=100000 // 4, progress=lambda s, f: seen.append((s, f)))
    assert em.max_tokens == 512  # capped at the model's max_position_embeddings
    fractions = [f for _s, f in seen]
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and seen[-1] == ("ready", 1.0)
    em.close()
    with pytest.raises(EmbeddingModelError) as exc:
        em.embed_query("x")
    assert exc.value.code == "closed"


def test_hybrid_file_is_refused(tmp_path):
    from runtime.model.qwen35.synthetic import qwen35_synthetic_model

    data = qwen35_synthetic_model("bonsai-27b", config=mf.tiny_hybrid_synthetic_config(linear_heads=(2, 2)), group_size=64)
    path = mf.write_gguf(data, tmp_path / "hybrid.gguf", "Q2_0")
    with pytest.raises(EmbeddingModelError) as exc:
        EmbeddingModel.load(path, "cpu")
    assert exc.value.code == "not-embedding" and "Qwen3.5 hybrid" in str(exc.value)
    assert isinstance(exc.value, TernaryError)


def test_missing_tokenizer_is_refused(dense, tmp_path):
    model, tok = dense
    folder = mf.write_embedding_hf_folder(model, tok, tmp_path / "notok")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(EmbeddingModelError) as exc:
        EmbeddingModel.load(folder, "cpu")
    assert exc.value.code == "no-tokenizer" and "tokenizer.json" in str(exc.value)
    path = write_gguf(mf.dense_model_data(model, None), tmp_path / "notok.gguf", "F16")
    with pytest.raises(EmbeddingModelError) as exc:
        EmbeddingModel.load(path, "cpu")
    assert exc.value.code == "no-tokenizer"


def test_other_pooling_is_refused(dense, tmp_path):
    model, tok = dense
    mean = dict(mf.EMBEDDING_POOLING_CONFIG, pooling_mode_lasttoken=False, pooling_mode_mean_tokens=True)
    folder = mf.write_embedding_hf_folder(model, tok, tmp_path / "mean", pooling=mean)
    with pytest.raises(EmbeddingModelError) as exc:
        EmbeddingModel.load(folder, "cpu")
    assert exc.value.code == "pooling" and "mean pooling" in str(exc.value)
    path = write_gguf(mf.dense_model_data(model, tok), tmp_path / "cls.gguf", "F16",
                      extra_metadata={"qwen3.pooling_type": ("u32", 2)})
    with pytest.raises(EmbeddingModelError) as exc:
        EmbeddingModel.load(path, "cpu")
    assert exc.value.code == "pooling" and "cls pooling" in str(exc.value)


def test_bad_arguments(dense_folder, dense_embedder, tmp_path):
    for bad in (1, 0, -5, 10**6, 3.5, True, "512"):
        with pytest.raises(InvalidSettingError) as exc:
            EmbeddingModel.load(dense_folder, "cpu", max_tokens=bad)  # type: ignore[arg-type]
        assert exc.value.field == "max_tokens"
    with pytest.raises(TypeError):
        dense_embedder.embed_documents("one string")  # type: ignore[arg-type]
    junk = tmp_path / "notes.txt"
    junk.write_text("not a model", encoding="utf-8")
    with pytest.raises(TernaryError, match="not a model file"):
        EmbeddingModel.load(junk, "cpu")


def test_is_embedding_file_tells_embedding_models_from_chat_models(dense, dense_folder, tmp_path):
    model, tok = dense
    assert is_embedding_file(dense_folder)
    emb = write_gguf(mf.dense_model_data(model, tok), tmp_path / "emb.gguf", "F16", extra_metadata=GGUF_POOLING)
    chat = write_gguf(mf.dense_model_data(model, tok), tmp_path / "chat.gguf", "F16")
    assert is_embedding_file(emb) and not is_embedding_file(chat)
    (tmp_path / "junk.gguf").write_bytes(b"GGUF\x03\x00")
    assert not any(is_embedding_file(tmp_path / n) for n in ("junk.gguf", "missing.gguf"))
    assert not is_embedding_file(mf.write_hf_folder(mf.make_ternary_hf_model(mf.tiny_qwen3_config()), tok,
                                                     tmp_path / "chat-hf"))


def test_engine_refuses_an_embedding_model_as_chat_model(dense, dense_folder, tmp_path):
    from runtime.engine import Engine
    from runtime.errors import UnsupportedModelError

    model, tok = dense
    emb = write_gguf(mf.dense_model_data(model, tok), tmp_path / "emb.gguf", "F16", extra_metadata=GGUF_POOLING)
    for path in (emb, dense_folder):
        with pytest.raises(UnsupportedModelError, match="embedding model"):
            Engine.load(path, device="cpu")
